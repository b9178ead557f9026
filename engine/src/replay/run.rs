//! One policy's replay: the trace's faults become simulator faults at their times on their nodes, the
//! simulated cluster runs the training job under a manual clock, and the policy recovers it. The
//! clock jumps from one expected event to the next and ticks at the engine's poll interval around
//! them, so the engine sees a failure no sooner than its polling would.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};

use super::metrics::{FailureRecord, Handler, PolicyResult, RunTotals, summarize};
use super::onsets::Onset;
use super::trace::Trace;
use super::{Policy, ReplayError, paging};
use crate::attribute::Catalog;
use crate::backend::sim::{
    AttemptFilter, FaultKind, FaultSpec, GPUS_PER_NODE, MAX_NODES, Scenario, SimCluster,
    SimOptions, SimProgress, WorkloadSpec,
};
use crate::backend::{Backend, JobSnapshot};
use crate::clock::{Clock, ManualClock};
use crate::config::Config;
use crate::engine::{Engine, EngineOptions};
use crate::model::JobState;
use crate::store::Store;

/// The replayed job's name.
const JOB: &str = "llama3-pretrain";
/// The longest jump of the clock while nothing is expected.
const COARSE_S: f64 = 1800.0;
/// A failure runguard has not acted on after this long is a failure it declined: a person is paged.
const ESCALATE_AFTER_S: f64 = 60.0;

/// How to run one replay.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Working directory: the simulated cluster's files and the engine's store (emptied first).
    pub dir: PathBuf,
    pub days: f64,
    pub nodes: u32,
    pub spare_nodes: u32,
    pub checkpoint_minutes: f64,
    pub policy: Policy,
    /// The engine's poll interval; every policy observes the job at this pace.
    pub poll_s: f64,
}

/// The attempt being watched.
struct Attempt {
    job_id: String,
    restart: u32,
    start_s: f64,
    nodes: Vec<String>,
    max_iteration: u64,
    /// Onsets expected in this attempt that did not strike (dropped from the expectations).
    spent: HashSet<usize>,
}

/// What the simulator tells of the last fault that struck the job, in seconds from the start.
#[derive(Debug, Clone, Copy)]
struct Struck {
    fault_s: Option<f64>,
    /// When its first log line was written.
    shown_s: Option<f64>,
}

/// A failure not yet closed by the next attempt's start.
struct Open {
    record: FailureRecord,
    onset: Option<usize>,
    observed_s: f64,
    person_due_s: Option<f64>,
}

/// Replays `onsets` under `options.policy`.
pub async fn replay(
    trace: &Trace,
    onsets: &[Onset],
    options: &ReplayOptions,
) -> Result<PolicyResult, ReplayError> {
    if !(options.poll_s >= 1.0 && options.days > 0.0 && options.checkpoint_minutes > 0.0) {
        return Err(ReplayError::Options(
            "poll interval ≥ 1 s, days and checkpoint interval > 0 needed".into(),
        ));
    }
    if options.nodes == 0 || options.nodes.saturating_add(options.spare_nodes) > MAX_NODES {
        return Err(ReplayError::Options(format!(
            "the simulated cluster holds 1..={MAX_NODES} nodes with the spares"
        )));
    }
    let _ = std::fs::remove_dir_all(&options.dir);
    std::fs::create_dir_all(&options.dir).map_err(|source| ReplayError::Read {
        path: options.dir.display().to_string(),
        source,
    })?;
    let start = trace.replay.start;
    let clock = Arc::new(ManualClock::new(start));
    let sim = Arc::new(SimCluster::open(
        SimOptions {
            dir: options.dir.join("sim"),
            scenario: scenario(trace, onsets, options),
            seed: 0x11a3a,
            nodes: options.nodes + options.spare_nodes,
        },
        Arc::clone(&clock) as Arc<dyn Clock>,
    )?);
    let mut engine = match options.policy {
        Policy::Runguard => {
            let mut config = Config::default();
            config.engine.poll_interval_secs = options.poll_s;
            config.engine.file_events = false;
            config.recovery.system_max_requeues = 100_000;
            let mut engine = Engine::new(
                Store::open(&options.dir.join("runguard.sqlite"))?,
                Arc::clone(&sim) as Arc<dyn Backend>,
                Arc::clone(&clock) as Arc<dyn Clock>,
                config,
                Catalog::builtin()?,
                EngineOptions { auto: true },
            );
            engine.reconcile()?;
            Some(engine)
        }
        Policy::Blind | Policy::Paged => None,
    };
    let job_id = sim
        .list_jobs()
        .await?
        .into_iter()
        .find(|job| job.name == JOB)
        .map(|job| job.job_id)
        .ok_or_else(|| ReplayError::Options("the replayed job was not submitted".into()))?;

    let mut driver = Driver {
        tick_walls: Vec::new(),
        job_id,
        pages: 0,
        trace,
        onsets,
        options,
        start,
        attempt: None,
        open: None,
        failures: Vec::new(),
        implicated: HashSet::new(),
        recent_failures: Vec::new(),
    };
    let end_s = options.days * 86_400.0;
    let mut now_s = 0.0;
    loop {
        let snap = job(&sim, &driver.job_id).await?;
        let progress = sim.progress(JOB)?;
        driver.observe(&snap, &progress, now_s);
        if let Some(engine) = engine.as_mut() {
            let began = Instant::now();
            engine.tick().await?;
            driver
                .tick_walls
                .push((now_s, began.elapsed().as_secs_f64() * 1000.0));
            let snap = job(&sim, &driver.job_id).await?;
            let progress = sim.progress(JOB)?;
            driver.observe(&snap, &progress, now_s);
        }
        let snap = job(&sim, &driver.job_id).await?;
        driver.act(&sim, &snap, now_s).await?;
        if now_s >= end_s {
            break;
        }
        let mut next = driver.next_time(now_s).min(end_s).max(now_s + 1.0);
        // A confirmation window ending before the next look: the engine is ticked at its end, as
        // its own loop wakes itself there.
        if let Some(due) = engine.as_ref().and_then(Engine::next_deadline) {
            let due_s = (due - start).num_milliseconds() as f64 / 1000.0;
            if due_s > now_s {
                next = next.min(due_s);
            }
        }
        clock.advance(Duration::from_secs_f64(next - now_s));
        now_s = next;
    }
    let snap = job(&sim, &driver.job_id).await?;
    let progress = sim.progress(JOB)?;
    let kept = progress
        .iteration
        .unwrap_or(progress.checkpoint)
        .max(progress.checkpoint);
    let mut failures = driver.failures;
    if let Some(open) = driver.open.take() {
        let mut record = open.record;
        if record.action_s.is_none() {
            record.handler = Handler::Nobody;
        }
        failures.push(record);
    }
    Ok(summarize(
        RunTotals {
            policy: options.policy,
            checkpoint_minutes: options.checkpoint_minutes,
            wall_s: end_s,
            kept_iterations: kept,
            seconds_per_iteration: trace.run.seconds_per_iteration,
            save_s: trace.run.save_s as f64,
            excluded_nodes: snap.excluded_nodes.len(),
        },
        failures,
    ))
}

async fn job(sim: &SimCluster, job_id: &str) -> Result<JobSnapshot, ReplayError> {
    sim.job(job_id)
        .await?
        .ok_or_else(|| ReplayError::Options(format!("job {job_id} vanished from the simulator")))
}

/// The simulated cluster's scenario: the one job and every onset as a fault at its time and node.
fn scenario(trace: &Trace, onsets: &[Onset], options: &ReplayOptions) -> Scenario {
    let spi = trace.run.seconds_per_iteration;
    let per_iterations = |seconds: f64| ((seconds / spi).ceil() as u64).max(1);
    let faults = onsets
        .iter()
        .filter_map(|onset| {
            let cause = trace.causes.get(onset.cause)?;
            Some(FaultSpec {
                kind: cause.fault,
                at_iteration: None,
                after_iterations: cause.recur_after_s.map(|s| per_iterations(s as f64)),
                attempts: AttemptFilter::Every,
                node: node_name(onset.node),
                gpu: Some(onset.gpu.min(GPUS_PER_NODE - 1)),
                slowdown: None,
                at_s: Some(onset.at_s),
                stays: cause.stays,
            })
        })
        .collect();
    Scenario {
        name: format!("replay-{}", trace.name),
        description: trace.title.clone(),
        jobs: vec![WorkloadSpec {
            name: JOB.to_string(),
            user: "pretrain".to_string(),
            nodes: options.nodes,
            gpus_per_node: GPUS_PER_NODE,
            // Never completes within the replay: twice the steps the period holds.
            iterations: per_iterations(options.days * 86_400.0) * 2 + 100,
            seconds_per_iteration: spi,
            log_interval: trace.run.log_interval,
            checkpoint_interval: per_iterations(options.checkpoint_minutes * 60.0),
            tflops_per_gpu: 400.0,
            global_batch_size: 2048,
            max_requeue_times: 100_000,
            checkpoint_dir: None,
            collective_timeout_s: trace.run.collective_timeout_s,
            submit_after_s: 0,
            compile_s: trace.run.restart_s,
            save_s: Some(trace.run.save_s),
            initial_nodes: Vec::new(),
            script: None,
            faults,
        }],
    }
}

fn node_name(number: u32) -> String {
    format!("node-{number:02}")
}

/// What the replay has seen of the job, and the baselines' and the person's pending moves.
struct Driver<'a> {
    /// Wall time of the engine's passes of the current attempt: (simulated second, milliseconds).
    tick_walls: Vec<(f64, f64)>,
    /// The job being replayed: a person's resubmission replaces it.
    job_id: String,
    pages: u32,
    trace: &'a Trace,
    onsets: &'a [Onset],
    options: &'a ReplayOptions,
    start: DateTime<Utc>,
    attempt: Option<Attempt>,
    open: Option<Open>,
    failures: Vec<FailureRecord>,
    implicated: HashSet<String>,
    /// When failures were seen since a person last acted (the blind requeue's crash-loop alarm).
    recent_failures: Vec<f64>,
}

impl Driver<'_> {
    fn seconds(&self, at: Option<DateTime<Utc>>, fallback: f64) -> f64 {
        at.map_or(fallback, |t| {
            (t - self.start).num_milliseconds() as f64 / 1000.0
        })
    }

    /// Updates what is known from a snapshot of the job at `now_s`.
    fn observe(&mut self, snap: &JobSnapshot, progress: &SimProgress, now_s: f64) {
        let (iteration, resumed_from) = (progress.iteration, progress.resumed_from);
        let since_start = |ms: i64| (ms - self.start.timestamp_millis()) as f64 / 1000.0;
        let struck = Struck {
            fault_s: progress.struck_ms.map(since_start),
            shown_s: progress.shown_ms.map(since_start),
        };
        // Requeued since the last look: whoever did it acted now.
        if let Some(attempt) = &self.attempt
            && attempt.job_id == snap.job_id
            && snap.restart_count > attempt.restart
        {
            if self.open.is_none() {
                // Ended by the action before the scheduler saw it fail (a fatal kernel event).
                self.open_failure(now_s, struck, now_s);
            }
            if let Some(open) = self.open.as_mut()
                && open.record.action_s.is_none()
            {
                open.record.action_s = Some(now_s);
                open.record.handler = Handler::Runguard;
                // The engine's passes from the fault to its action, this one included.
                open.record.engine_wall_ms = self
                    .tick_walls
                    .iter()
                    .filter(|(at, _)| *at >= open.record.fault_s.floor())
                    .map(|(_, ms)| ms)
                    .sum();
            }
            self.attempt = None;
        }
        match snap.state {
            JobState::Running => {
                let fresh = self.attempt.as_ref().is_none_or(|attempt| {
                    attempt.job_id != snap.job_id || attempt.restart != snap.restart_count
                });
                if fresh {
                    let start_s = self.seconds(snap.start_time, now_s);
                    if let Some(mut open) = self.open.take() {
                        open.record.resumed_s = Some(start_s + self.trace.run.restart_s as f64);
                        open.record.lost_iterations = open
                            .record
                            .lost_iterations
                            .saturating_sub(resumed_from.unwrap_or(0));
                        self.failures.push(open.record);
                    }
                    self.tick_walls.clear();
                    self.attempt = Some(Attempt {
                        job_id: snap.job_id.clone(),
                        restart: snap.restart_count,
                        start_s,
                        nodes: snap.nodes.clone(),
                        max_iteration: iteration.unwrap_or(0),
                        spent: HashSet::new(),
                    });
                } else if let (Some(attempt), Some(iteration)) = (self.attempt.as_mut(), iteration)
                {
                    attempt.max_iteration = attempt.max_iteration.max(iteration);
                }
            }
            JobState::Failed
            | JobState::NodeFail
            | JobState::Timeout
            | JobState::OutOfMemory
            | JobState::Cancelled
                if self.open.is_none() && self.attempt.is_some() =>
            {
                let exit_s = self.seconds(snap.end_time, now_s);
                self.open_failure(exit_s, struck, now_s);
            }
            _ => {}
        }
    }

    /// Records the failure of the watched attempt, struck as the simulator tells, ended at `exit_s`,
    /// seen at `now_s`.
    fn open_failure(&mut self, exit_s: f64, struck: Struck, now_s: f64) {
        let Some(attempt) = self.attempt.as_ref() else {
            return;
        };
        let culprit = self
            .expected_strikes(attempt)
            .into_iter()
            .min_by(|a, b| a.1.partial_cmp(&b.1).unwrap_or(std::cmp::Ordering::Equal));
        // The simulator's record belongs to this attempt only if it struck after its start.
        let this_attempt = struck
            .fault_s
            .is_some_and(|struck| struck >= attempt.start_s);
        let shown_s = struck.shown_s.filter(|_| this_attempt);
        let (cause, node, fault_s, onset) = match culprit {
            Some((index, at_s)) => {
                let onset = &self.onsets[index];
                let cause = self
                    .trace
                    .causes
                    .get(onset.cause)
                    .map_or_else(|| "unknown".to_string(), |cause| cause.name.clone());
                let fault_s = struck.fault_s.filter(|_| this_attempt).unwrap_or(at_s);
                (
                    cause,
                    node_name(onset.node),
                    fault_s.min(exit_s),
                    Some(index),
                )
            }
            None => ("unexplained".to_string(), String::new(), exit_s, None),
        };
        let repeat = !node.is_empty() && !self.implicated.insert(node.clone());
        self.recent_failures.push(now_s);
        self.open = Some(Open {
            record: FailureRecord {
                cause,
                node,
                fault_s,
                shown_s,
                exit_s,
                action_s: None,
                resumed_s: None,
                // The attempt's progress; less the checkpoint resumed from once that is known.
                lost_iterations: attempt.max_iteration,
                repeat,
                handler: Handler::Nobody,
                engine_wall_ms: 0.0,
            },
            onset,
            observed_s: now_s,
            person_due_s: None,
        });
    }

    /// Onsets that strike `attempt`, with when they are expected (seconds from the start).
    fn expected_strikes(&self, attempt: &Attempt) -> Vec<(usize, f64)> {
        let spi = self.trace.run.seconds_per_iteration;
        let training_from = attempt.start_s + self.trace.run.restart_s as f64;
        self.onsets
            .iter()
            .enumerate()
            .filter(|(index, _)| !attempt.spent.contains(index))
            .filter(|(_, onset)| attempt.nodes.contains(&node_name(onset.node)))
            .filter_map(|(index, onset)| {
                let cause = self.trace.causes.get(onset.cause)?;
                let at_s = onset.at_s as f64;
                if at_s > training_from {
                    Some((index, at_s))
                } else if cause.stays {
                    let recur = cause.recur_after_s.unwrap_or(0) as f64;
                    Some((index, training_from + (recur / spi).ceil().max(1.0) * spi))
                } else {
                    None
                }
            })
            .collect()
    }

    /// The policy's move at `now_s`: a blind requeue, a page, or the paged person's requeue.
    async fn act(
        &mut self,
        sim: &SimCluster,
        snap: &JobSnapshot,
        now_s: f64,
    ) -> Result<(), ReplayError> {
        let job_id = snap.job_id.as_str();
        let Some(open) = self.open.as_mut() else {
            return Ok(());
        };
        if open.record.action_s.is_some() {
            return Ok(());
        }
        let paging = &self.trace.paging;
        let page_now = |now_s: f64| {
            let at = self.start + chrono::TimeDelta::milliseconds((now_s * 1000.0) as i64);
            now_s + paging::reaction_s(paging, at)
        };
        let window_s = self.trace.blind.crash_loop_window_minutes * 60.0;
        let in_window = self
            .recent_failures
            .iter()
            .filter(|at| now_s - **at <= window_s)
            .count();
        if open.person_due_s.is_none() {
            match self.options.policy {
                Policy::Blind if in_window < self.trace.blind.crash_loop_alarm_after as usize => {
                    sim.requeue(job_id, &[]).await?;
                    open.record.action_s = Some(now_s);
                    open.record.handler = Handler::Blind;
                    return Ok(());
                }
                Policy::Blind | Policy::Paged => open.person_due_s = Some(page_now(now_s)),
                Policy::Runguard if now_s - open.observed_s >= ESCALATE_AFTER_S => {
                    open.person_due_s = Some(page_now(now_s));
                }
                Policy::Runguard => return Ok(()),
            }
        }
        if open.person_due_s.is_some_and(|due| now_s >= due) {
            // The person leaves out the node the logs name (an Xid, link errors; a traceback of
            // the script names none) and submits the job again, as runguard advises for what it
            // declines; nodes the job was kept off stay out.
            let names_a_node = open
                .onset
                .and_then(|index| self.onsets.get(index))
                .and_then(|onset| self.trace.causes.get(onset.cause))
                .is_some_and(|cause| cause.fault != FaultKind::AppBug);
            let mut exclude = snap.excluded_nodes.clone();
            if names_a_node && !open.record.node.is_empty() {
                exclude.push(open.record.node.clone());
            }
            self.pages += 1;
            let tag = format!("paged-{}", self.pages);
            let outcome = match sim.resubmit(&snap.spec, &exclude, &tag).await {
                Ok(outcome) => outcome,
                // Too few nodes left to leave one more out: the person submits it as it was.
                Err(_) => sim.resubmit(&snap.spec, &snap.excluded_nodes, &tag).await?,
            };
            if let Some(new_job) = outcome.new_job_id {
                self.job_id = new_job;
            }
            open.record.action_s = Some(now_s);
            open.record.handler = Handler::Person;
            self.recent_failures.clear();
        }
        Ok(())
    }

    /// When to look next: at the poll pace around a failure or an expected strike, else a jump to
    /// shortly before the next expected strike.
    fn next_time(&mut self, now_s: f64) -> f64 {
        let poll = self.options.poll_s;
        let on_grid = |t: f64| (t / poll).ceil() * poll;
        if let Some(open) = &self.open {
            return match open.person_due_s {
                Some(due) if open.record.action_s.is_none() && due > now_s + poll => on_grid(due),
                _ => now_s + poll,
            };
        }
        let Some(attempt) = self.attempt.as_ref() else {
            return now_s + poll;
        };
        let spi = self.trace.run.seconds_per_iteration;
        let window = self.trace.run.collective_timeout_s as f64 + spi + 120.0;
        let strikes = self.expected_strikes(attempt);
        // An expectation long past without a failure did not come true (the fault was spared).
        let missed: Vec<usize> = strikes
            .iter()
            .filter(|(_, at)| now_s > at + window)
            .map(|(index, _)| *index)
            .collect();
        if let Some(attempt) = self.attempt.as_mut() {
            attempt.spent.extend(missed);
        }
        let next = strikes
            .iter()
            .map(|(_, at)| *at)
            .filter(|at| now_s <= at + window)
            .fold(f64::INFINITY, f64::min);
        let lead = 2.0 * poll + spi;
        if now_s >= next - lead {
            now_s + poll
        } else {
            on_grid((next - lead).min(now_s + COARSE_S))
        }
    }
}
