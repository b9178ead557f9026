//! The simulation proper: a FIFO scheduler, Megatron-style training attempts and the faults that strike
//! them, advanced lazily event by event up to the time the caller asks about.
//!
//! Nothing here depends on when it is asked: advancing to t₁ and then to t₂ writes exactly what advancing
//! straight to t₂ writes, which is what makes a restarted engine continue byte for byte.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use rand::Rng;

use crate::model::{JobSpec, RecoveryLimits};

use super::faults::{self, Attempt};
use super::files::Output;
use super::progress::{compile_ms, iteration_duration, log_iteration, startup};
use super::scenario::{FaultKind, Scenario, WorkloadSpec, node_name, node_number};
use super::state::{
    ArmedFault, Draw, Effect, Ending, Job, NodeState, Pending, Phase, Run, STATE_VERSION, SimState,
    rng,
};
use super::text::{self};

/// Job ids start here, like a Slurm cluster that has run a few jobs already.
const FIRST_JOB_ID: u64 = 4201;

/// A bound on the events one advance processes, so a scenario bug cannot spin forever.
const MAX_EVENTS_PER_ADVANCE: usize = 2_000_000;

/// The simulated cluster: its persisted state plus the scenario and directory it runs in.
#[derive(Debug)]
pub(super) struct World {
    pub state: SimState,
    pub scenario: Scenario,
    /// Absolute sim directory; logs and default checkpoints live under it.
    pub dir: PathBuf,
}

/// What happens next in the simulation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    /// A scripted line of a running job is due.
    Script(usize),
    /// A running job completes an iteration.
    Iteration(usize),
    /// A running job's attempt ends.
    End(usize),
    /// A scenario workload is submitted.
    Submit(usize),
    /// A pending job becomes eligible for scheduling.
    Wake(usize),
}

/// What the scheduler can do for a pending job right now.
#[derive(Debug, PartialEq)]
pub(super) enum Placement {
    Nodes(Vec<String>),
    /// Not enough free nodes now; the job heads the queue and blocks the jobs behind it.
    Wait,
    /// Drained and excluded nodes leave too few nodes for it ever to run.
    Never,
}

impl World {
    /// A fresh cluster that starts `scenario` at `origin_ms`.
    pub fn fresh(
        scenario: Scenario,
        seed: u64,
        node_count: u32,
        fingerprint: u64,
        dir: PathBuf,
        origin_ms: i64,
        out: &mut Output,
    ) -> Self {
        let workloads = scenario.jobs.len();
        let nodes = (1..=node_count)
            .map(|n| NodeState {
                name: node_name(n),
                drain_reason: None,
            })
            .collect::<Vec<_>>();
        let state = SimState {
            version: STATE_VERSION,
            scenario: scenario.name.clone(),
            fingerprint,
            seed,
            origin_ms,
            now_ms: origin_ms,
            next_job_id: FIRST_JOB_ID,
            nodes,
            jobs: Vec::new(),
            submitted: vec![false; workloads],
            attempts_started: vec![0; workloads],
            checkpoints: Default::default(),
            files: Default::default(),
        };
        let mut world = World {
            state,
            scenario,
            dir,
        };
        for node in &world.state.nodes {
            let file = kernel_log(&node.name);
            let boot = origin_ms - 95_000;
            let lines: String = text::KERNEL_BOOT
                .iter()
                .enumerate()
                .map(|(i, message)| text::kernel(boot + i as i64 * 1500, &node.name, message))
                .collect();
            out.append(&file, &lines);
        }
        for workload in 0..workloads {
            if world.submit_after_ms(workload) == 0 {
                world.submit_workload(workload, origin_ms);
            }
        }
        world.schedule(origin_ms, out);
        out.changed = true;
        world
    }

    /// Processes every event due up to `target_ms`, writing lines into `out`.
    pub fn advance(&mut self, target_ms: i64, out: &mut Output) {
        for _ in 0..MAX_EVENTS_PER_ADVANCE {
            let Some((at_ms, event)) = self.next_event() else {
                break;
            };
            if at_ms > target_ms {
                break;
            }
            self.state.now_ms = self.state.now_ms.max(at_ms);
            self.apply(event, at_ms, out);
            self.schedule(at_ms, out);
            out.changed = true;
        }
        if self
            .next_event()
            .is_some_and(|(at_ms, _)| at_ms <= target_ms)
        {
            tracing::warn!(
                target_ms,
                "sim stopped after {MAX_EVENTS_PER_ADVANCE} events in one advance; it continues on the next call"
            );
            return;
        }
        self.state.now_ms = self.state.now_ms.max(target_ms);
    }

    /// The earliest due event; ties go scripts, iterations, ends, submissions, wake-ups, then by index.
    fn next_event(&self) -> Option<(i64, Event)> {
        let mut best: Option<(i64, u8, usize, Event)> = None;
        let mut consider = |at_ms: i64, class: u8, index: usize, event: Event| {
            if best.is_none_or(|(b_at, b_class, b_index, _)| {
                (at_ms, class, index) < (b_at, b_class, b_index)
            }) {
                best = Some((at_ms, class, index, event));
            }
        };
        for (index, job) in self.state.jobs.iter().enumerate() {
            match &job.phase {
                Phase::Running(run) => {
                    if let Some(line) = run.script.first() {
                        consider(line.at_ms, 0, index, Event::Script(index));
                    }
                    if let Some(at_ms) = run.next_iteration_ms {
                        consider(at_ms, 1, index, Event::Iteration(index));
                    }
                    if let Some(end) = &run.end {
                        consider(end.at_ms, 2, index, Event::End(index));
                    }
                }
                Phase::Pending(pending) if !pending.woken => {
                    consider(pending.eligible_ms, 4, index, Event::Wake(index));
                }
                _ => {}
            }
        }
        for (workload, submitted) in self.state.submitted.iter().enumerate() {
            if !submitted {
                let at_ms = self.state.origin_ms + self.submit_after_ms(workload);
                consider(at_ms, 3, workload, Event::Submit(workload));
            }
        }
        best.map(|(at_ms, _, _, event)| (at_ms, event))
    }

    fn apply(&mut self, event: Event, at_ms: i64, out: &mut Output) {
        match event {
            Event::Script(index) => self.write_scripted(index, out),
            Event::Iteration(index) => self.complete_iteration(index, at_ms, out),
            Event::End(index) => self.end_attempt(index, at_ms),
            Event::Submit(workload) => self.submit_workload(workload, at_ms),
            Event::Wake(index) => {
                if let Some(Job {
                    phase: Phase::Pending(pending),
                    ..
                }) = self.state.jobs.get_mut(index)
                {
                    pending.woken = true;
                }
            }
        }
    }

    fn submit_after_ms(&self, workload: usize) -> i64 {
        self.scenario.jobs.get(workload).map_or(0, |spec| {
            i64::try_from(spec.submit_after_s.saturating_mul(1000)).unwrap_or(i64::MAX / 4)
        })
    }

    /// Submits a scenario workload as its first job.
    fn submit_workload(&mut self, workload: usize, at_ms: i64) {
        if let Some(submitted) = self.state.submitted.get_mut(workload) {
            *submitted = true;
        }
        let Some(spec) = self.scenario.jobs.get(workload) else {
            return;
        };
        let job_spec = job_spec(spec);
        self.submit(workload, job_spec, None, Vec::new(), at_ms);
    }

    /// Queues a new job; returns its id.
    pub fn submit(
        &mut self,
        workload: usize,
        spec: JobSpec,
        tag: Option<String>,
        excluded: Vec<String>,
        at_ms: i64,
    ) -> u64 {
        let id = self.state.next_job_id;
        self.state.next_job_id += 1;
        let limits = self
            .scenario
            .jobs
            .get(workload)
            .map(limits)
            .unwrap_or_default();
        let delay =
            rng(self.state.seed, Draw::SchedulingDelay, &[id]).random_range(20_000..=40_000);
        self.state.jobs.push(Job {
            id,
            workload,
            spec,
            limits,
            tag,
            submit_ms: at_ms,
            restart_count: 0,
            excluded: normalised(excluded),
            phase: Phase::Pending(Pending {
                eligible_ms: at_ms + delay,
                woken: false,
                requeued_until_ms: None,
            }),
            alloc: Vec::new(),
            start_ms: None,
            end_ms: None,
            exit_code: None,
            struck_ms: None,
            shown_ms: None,
        });
        id
    }

    /// Starts every pending job the queue allows, first come first served (no backfill).
    pub fn schedule(&mut self, at_ms: i64, out: &mut Output) {
        for index in 0..self.state.jobs.len() {
            let eligible = matches!(
                self.state.jobs.get(index).map(|job| &job.phase),
                Some(Phase::Pending(pending)) if pending.eligible_ms <= at_ms
            );
            if !eligible {
                continue;
            }
            match self.placement(index) {
                Placement::Nodes(nodes) => self.start(index, nodes, at_ms, out),
                Placement::Wait => break,
                Placement::Never => {}
            }
        }
    }

    /// Whether and where pending job `index` can start now.
    pub fn placement(&self, index: usize) -> Placement {
        let Some(job) = self.state.jobs.get(index) else {
            return Placement::Never;
        };
        let needed = job.spec.nodes as usize;
        let busy: BTreeSet<&str> = self
            .state
            .jobs
            .iter()
            .filter(|other| matches!(other.phase, Phase::Running(_)))
            .flat_map(|other| other.alloc.iter().map(String::as_str))
            .collect();
        let usable: Vec<&NodeState> = self
            .state
            .nodes
            .iter()
            .filter(|node| node.drain_reason.is_none() && !job.excluded.contains(&node.name))
            .collect();
        if usable.len() < needed || needed == 0 {
            return Placement::Never;
        }
        let pinned = self
            .scenario
            .jobs
            .get(job.workload)
            .map(|spec| spec.initial_nodes.as_slice())
            .unwrap_or_default();
        let first_attempt = job.restart_count == 0
            && job.tag.is_none()
            && self.state.attempts_started.get(job.workload) == Some(&0);
        let pin_usable = !pinned.is_empty()
            && pinned
                .iter()
                .all(|name| usable.iter().any(|node| &node.name == name));
        if first_attempt && pin_usable {
            return if pinned.iter().all(|name| !busy.contains(name.as_str())) {
                Placement::Nodes(pinned.to_vec())
            } else {
                Placement::Wait
            };
        }
        let free: Vec<String> = usable
            .iter()
            .filter(|node| !busy.contains(node.name.as_str()))
            .take(needed)
            .map(|node| node.name.clone())
            .collect();
        if free.len() == needed {
            Placement::Nodes(free)
        } else {
            Placement::Wait
        }
    }

    /// Where a workload's checkpoints go, as the log prints it.
    pub fn checkpoint_dir(&self, workload: usize) -> String {
        self.scenario
            .jobs
            .get(workload)
            .map(|spec| checkpoint_dir(&self.dir, spec))
            .unwrap_or_default()
    }

    /// Starts an attempt of pending job `index` on `nodes`.
    fn start(&mut self, index: usize, nodes: Vec<String>, at_ms: i64, out: &mut Output) {
        let seed = self.state.seed;
        let Some(job) = self.state.jobs.get(index) else {
            return;
        };
        let workload = job.workload;
        let Some(spec) = self.scenario.jobs.get(workload) else {
            return;
        };
        let ckpt = checkpoint_dir(&self.dir, spec);
        let attempt = self
            .state
            .attempts_started
            .get(workload)
            .copied()
            .unwrap_or(0);
        let resumed_from = self.state.checkpoints.get(&spec.name).copied().unwrap_or(0);
        let log = log_file(job);
        let ctx = Attempt {
            seed,
            job_id: job.id,
            restart: job.restart_count,
            alloc: &nodes,
            gpus_per_node: job.spec.gpus_per_node,
            collective_timeout_s: spec.collective_timeout_s,
        };
        let mut run = Run {
            attempt,
            log: log.clone(),
            resumed_from,
            iteration: resumed_from,
            next_iteration_ms: None,
            iteration_ms: 0.0,
            window_ms: 0.0,
            window_iterations: 0,
            slowdown: 1.0,
            slow_rank: None,
            faults: Vec::new(),
            script: Vec::new(),
            end: None,
        };
        let training_from = startup(&ctx, &mut run, &ckpt, at_ms) + compile_ms(spec);
        run.faults = arm_faults(
            &ctx,
            spec,
            attempt,
            resumed_from,
            (self.state.origin_ms, training_from),
        );
        if resumed_from >= spec.iterations {
            let done = training_from + 2000;
            run.log_at(
                done,
                text::ranked(0, &text::datetime_marker("after training is done", done)),
            );
            run.end = Some(Ending {
                at_ms: done + 2000,
                completed: true,
                exit_code: 0,
            });
        } else {
            let duration = iteration_duration(&ctx, spec, resumed_from + 1, 1.0);
            run.iteration_ms = duration;
            run.next_iteration_ms = Some(training_from + whole_ms(duration));
        }
        if let Some(started) = self.state.attempts_started.get_mut(workload) {
            *started += 1;
        }
        out.touch(&log);
        self.state.files.entry(log).or_insert(0);
        if let Some(job) = self.state.jobs.get_mut(index) {
            job.phase = Phase::Running(Box::new(run));
            job.alloc = nodes;
            job.start_ms = Some(at_ms);
            job.end_ms = None;
            job.exit_code = None;
            job.struck_ms = None;
            job.shown_ms = None;
        }
    }

    /// Writes the first scripted line of running job `index` and applies its effect.
    fn write_scripted(&mut self, index: usize, out: &mut Output) {
        let Some(job) = self.state.jobs.get_mut(index) else {
            return;
        };
        let Phase::Running(run) = &mut job.phase else {
            return;
        };
        if run.script.is_empty() {
            return;
        }
        let line = run.script.remove(0);
        out.append(&line.file, &line.text);
        if let Some(Effect::CheckpointSaved(iteration)) = line.effect
            && let Some(spec) = self.scenario.jobs.get(job.workload)
        {
            self.state.checkpoints.insert(spec.name.clone(), iteration);
            out.trackers.insert(spec.name.clone());
        }
    }

    /// Running job `index` completes its next iteration at `at_ms`.
    fn complete_iteration(&mut self, index: usize, at_ms: i64, out: &mut Output) {
        let seed = self.state.seed;
        let Some(job) = self.state.jobs.get_mut(index) else {
            return;
        };
        let Some(spec) = self.scenario.jobs.get(job.workload) else {
            return;
        };
        let ckpt = checkpoint_dir(&self.dir, spec);
        let ctx = Attempt {
            seed,
            job_id: job.id,
            restart: job.restart_count,
            alloc: &job.alloc,
            gpus_per_node: job.spec.gpus_per_node,
            collective_timeout_s: spec.collective_timeout_s,
        };
        let Phase::Running(run) = &mut job.phase else {
            return;
        };
        run.next_iteration_ms = None;
        run.iteration += 1;
        let iteration = run.iteration;
        run.window_ms += run.iteration_ms;
        run.window_iterations += 1;
        let total = spec.iterations;

        if iteration % spec.log_interval == 0 || iteration >= total {
            log_iteration(&ctx, spec, run, job.workload, at_ms, out);
        }

        let (due, later): (Vec<ArmedFault>, Vec<ArmedFault>) = std::mem::take(&mut run.faults)
            .into_iter()
            .partition(|fault| {
                fault.iteration == iteration || fault.at_ms.is_some_and(|strikes| at_ms >= strikes)
            });
        run.faults = later;
        let mut fatal = None;
        for mut fault in due {
            // A fault set at a time strikes at this iteration.
            fault.iteration = iteration;
            if fault.kind == FaultKind::Straggler {
                run.slowdown *= fault.slowdown;
                run.slow_rank = Some(ctx.rank(fault.node_index, fault.gpu));
            } else if fatal.is_none() {
                fatal = Some(fault);
            }
        }
        if let Some(fault) = fatal {
            job.shown_ms = faults::strike(&ctx, run, &fault, at_ms);
            job.struck_ms = Some(at_ms);
            return;
        }

        let mut pause_ms = 0;
        if iteration % spec.checkpoint_interval == 0 || iteration >= total {
            let mut draw = rng(
                seed,
                Draw::Checkpoint,
                &[ctx.job_id, u64::from(ctx.restart), iteration],
            );
            pause_ms = match spec.save_s {
                Some(seconds) => i64::try_from(seconds.min(86_400) * 1000).unwrap_or(0),
                None => draw.random_range(5_000..9_000),
            };
            let saved_ms = at_ms + pause_ms;
            out.append(
                &run.log,
                &text::ranked(0, &text::saving_checkpoint(&ckpt, iteration)),
            );
            let log = run.log.clone();
            run.schedule(
                saved_ms,
                &log,
                text::ranked(0, &text::saved_checkpoint(&ckpt, iteration)),
                Some(Effect::CheckpointSaved(iteration)),
            );
            let slowest = pause_ms as f64 - draw.random_range(40.0..400.0);
            let fastest = slowest - draw.random_range(0.02..0.2);
            for line in text::save_timers(fastest, slowest) {
                run.log_at(saved_ms, text::ranked(ctx.last_rank(), &line));
            }
        }
        if iteration >= total {
            let done = at_ms + pause_ms + 2000;
            run.log_at(
                done,
                text::ranked(0, &text::datetime_marker("after training is done", done)),
            );
            run.end = Some(Ending {
                at_ms: done + 2000,
                completed: true,
                exit_code: 0,
            });
        } else {
            let duration = iteration_duration(&ctx, spec, iteration + 1, run.slowdown);
            run.iteration_ms = duration;
            run.next_iteration_ms = Some(at_ms + pause_ms + whole_ms(duration));
        }
    }

    /// The attempt of job `index` ends as its script decided.
    fn end_attempt(&mut self, index: usize, at_ms: i64) {
        let Some(job) = self.state.jobs.get_mut(index) else {
            return;
        };
        let Phase::Running(run) = &job.phase else {
            return;
        };
        let Some(end) = run.end.clone() else {
            return;
        };
        job.phase = if end.completed {
            Phase::Completed
        } else {
            Phase::Failed
        };
        job.end_ms = Some(at_ms);
        job.exit_code = Some(end.exit_code);
    }

    /// Stops a running attempt because Slurm killed it, noting it in the attempt's log.
    pub fn kill(&mut self, index: usize, at_ms: i64, requeue: bool, out: &mut Output) {
        let Some(job) = self.state.jobs.get_mut(index) else {
            return;
        };
        if let Phase::Running(run) = &job.phase {
            let head = job.alloc.first().map_or("node-01", String::as_str);
            let line = text::step_cancelled(job.id, head, at_ms, requeue);
            out.append(&run.log, &text::plain(&line));
        }
    }

    /// Checks that a loaded state fits this world's scenario and node count.
    pub fn fits(state: &SimState, scenario: &Scenario, node_count: u32) -> bool {
        state.version == STATE_VERSION
            && state.nodes.len() == node_count as usize
            && state.submitted.len() == scenario.jobs.len()
            && state.attempts_started.len() == scenario.jobs.len()
            && state
                .jobs
                .iter()
                .all(|job| job.workload < scenario.jobs.len())
    }
}

/// A node's kernel log, relative to the sim directory.
pub(super) fn kernel_log(node: &str) -> String {
    format!("nodes/{node}/kern.log")
}

/// The log of a job's current attempt, relative to the sim directory.
pub(super) fn log_file(job: &Job) -> String {
    format!(
        "logs/{}_{}_{}.log",
        job.spec.name, job.id, job.restart_count
    )
}

/// The checkpoint directory of a workload: absolute, or relative to the sim directory.
pub(super) fn checkpoint_dir(dir: &Path, spec: &WorkloadSpec) -> String {
    let configured = spec
        .checkpoint_dir
        .clone()
        .unwrap_or_else(|| format!("checkpoints/{}", spec.name));
    let path = Path::new(&configured);
    if path.is_absolute() {
        configured
    } else {
        dir.join(path).display().to_string()
    }
}

/// What a workload's job looks like to the scheduler.
pub(super) fn job_spec(spec: &WorkloadSpec) -> JobSpec {
    JobSpec {
        name: spec.name.clone(),
        user: spec.user.clone(),
        nodes: spec.nodes,
        gpus_per_node: spec.gpus_per_node,
        tasks_per_node: 0,
        partition: Some("gpu".to_string()),
        command: Some(
            spec.script
                .clone()
                .unwrap_or_else(|| format!("{}.sbatch", spec.name)),
        ),
        work_dir: Some("/workspace/Megatron-LM".to_string()),
        dependency: None,
        cluster: Some("sim".to_string()),
        reservation: None,
        // A DGX-like node: 112 cores and 2 TB per node.
        cpus: spec.nodes * 112,
        memory: Some(format!("{}G", spec.nodes * 2048)),
        included_nodes: Vec::new(),
    }
}

fn limits(spec: &WorkloadSpec) -> RecoveryLimits {
    RecoveryLimits {
        max_requeue_times: Some(spec.max_requeue_times),
        auto_resume_mode: Some("requeue".to_string()),
        allowed_actions: None,
    }
}

/// Sorted node names without duplicates.
pub(super) fn normalised(mut nodes: Vec<String>) -> Vec<String> {
    nodes.sort_by_key(|name| (node_number(name).unwrap_or(u32::MAX), name.clone()));
    nodes.dedup();
    nodes
}

fn whole_ms(duration: f64) -> i64 {
    (duration.round() as i64).max(1)
}

/// The faults of `spec` that strike this attempt, resolved to an iteration (or a time), a node and a
/// GPU; `(origin_ms, training_from_ms)`: when the scenario started and the attempt's first step starts.
fn arm_faults(
    ctx: &Attempt,
    spec: &WorkloadSpec,
    attempt: u32,
    resumed_from: u64,
    (origin_ms, training_from_ms): (i64, i64),
) -> Vec<ArmedFault> {
    let mut armed = Vec::new();
    for (number, fault) in spec.faults.iter().enumerate() {
        if !fault.attempts.includes(attempt) {
            continue;
        }
        let mut at_ms = None;
        let iteration = match (fault.at_s, fault.at_iteration, fault.after_iterations) {
            (Some(at_s), _, after) => {
                let strikes_ms = origin_ms.saturating_add(
                    i64::try_from(at_s.saturating_mul(1000)).unwrap_or(i64::MAX / 2),
                );
                if strikes_ms > training_from_ms {
                    at_ms = Some(strikes_ms);
                    u64::MAX
                } else if fault.stays && fault.node != "any" {
                    resumed_from.saturating_add(after.unwrap_or(1).max(1))
                } else {
                    continue;
                }
            }
            (None, Some(at), _) if at > resumed_from => at,
            (None, None, Some(after)) => resumed_from.saturating_add(after),
            _ => continue,
        };
        if at_ms.is_none() && iteration > spec.iterations {
            continue;
        }
        let mut draw = rng(
            ctx.seed,
            Draw::Fault,
            &[ctx.job_id, u64::from(ctx.restart), number as u64],
        );
        let node_index = if fault.node == "any" {
            draw.random_range(0..ctx.alloc.len().max(1))
        } else {
            match ctx.alloc.iter().position(|node| *node == fault.node) {
                Some(index) => index,
                // A fault of a named node only strikes attempts that run on it.
                None => continue,
            }
        };
        let gpu = fault
            .gpu
            .unwrap_or_else(|| draw.random_range(0..ctx.gpus_per_node.max(1)));
        armed.push(ArmedFault {
            kind: fault.kind,
            iteration,
            at_ms,
            node_index,
            gpu,
            slowdown: fault.slowdown.unwrap_or(1.4),
        });
    }
    armed
}

/// A node name's number, or its 1-based position when it does not follow the `node-NN` pattern.
pub(super) fn number_of(name: &str, fallback_index: usize) -> u32 {
    node_number(name).unwrap_or(fallback_index as u32 + 1)
}
