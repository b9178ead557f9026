//! A simulated month of history, the same for the same seed: a 16-node cluster (12 `train` nodes, 4
//! `debug` nodes, 8 GPUs each) under a strict first-in-first-out scheduler, with demand that peaks on
//! weekday mornings, node failures that fail the job on them, runguard's recoveries (detection,
//! analysis, requeue) and the failed node quarantined until it is repaired. [`SimulatedMonth::store`]
//! writes it as the engine would have recorded it, so `runguard capacity` can be shown and tested on it.

use std::collections::VecDeque;

use chrono::{DateTime, Datelike, TimeDelta, Timelike, Utc, Weekday};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use super::history::{Instant, NodeSample, NodeUse, QuarantineSpan, QueueSample};

mod record;

/// Seconds between two listings of the jobs and the nodes.
pub const STEP_SECONDS: i64 = 300;
/// GPUs of every node.
pub const GPUS_PER_NODE: u32 = 8;
/// The reason runguard's drains carry (see [`super::quarantines_from_node_samples`]).
pub const QUARANTINE_REASON: &str = "runguard: gpu (Xid 79)";
/// The reason of the one administrator's drain, which is not a quarantine.
pub const MAINTENANCE_REASON: &str = "maintenance: firmware update";

/// A node of the simulated cluster.
#[derive(Debug, Clone, PartialEq)]
pub struct SimNode {
    pub name: String,
    pub partition: String,
}

/// A job with its attempts; a failed attempt is followed by the requeued one.
#[derive(Debug, Clone, PartialEq)]
pub struct SimJob {
    pub job_id: String,
    pub partition: String,
    pub nodes: u32,
    pub attempts: Vec<SimAttempt>,
}

impl SimJob {
    pub fn gpus(&self) -> u32 {
        self.nodes * GPUS_PER_NODE
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct SimAttempt {
    pub submitted: DateTime<Utc>,
    pub started: Option<DateTime<Utc>>,
    pub ended: Option<DateTime<Utc>>,
    pub nodes: Vec<String>,
    /// How the attempt failed and was recovered; `None` when it completed or has not ended.
    pub failure: Option<SimFailure>,
    /// When training resumed after the checkpoint load (a requeued attempt that started).
    pub resumed: Option<DateTime<Utc>>,
}

/// A failure and runguard's answer: the crash seen, the requeue planned and done.
#[derive(Debug, Clone, PartialEq)]
pub struct SimFailure {
    pub node: String,
    pub detected: DateTime<Utc>,
    pub planned: DateTime<Utc>,
    pub requeued: DateTime<Utc>,
}

/// The generated month: the jobs, what each listing saw, and the quarantine spans.
#[derive(Debug, Clone, PartialEq)]
pub struct SimulatedMonth {
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub nodes: Vec<SimNode>,
    pub jobs: Vec<SimJob>,
    pub instants: Vec<Instant>,
    pub queue: Vec<QueueSample>,
    pub node_samples: Vec<NodeSample>,
    pub quarantines: Vec<QuarantineSpan>,
}

struct Running {
    job: usize,
    nodes: Vec<usize>,
    remaining_steps: u32,
}

#[derive(Default, Clone, Copy)]
struct NodeState {
    job: Option<usize>,
    /// Quarantined until this step (exclusive).
    quarantined_until: Option<usize>,
    /// Drained by an administrator until this step (exclusive).
    maintenance_until: Option<usize>,
}

/// A month of `days` days starting at `start` (best at midnight UTC).
pub fn month(seed: u64, start: DateTime<Utc>, days: u32) -> SimulatedMonth {
    Simulation::new(seed, start).run(days as usize * 24 * 3600 / STEP_SECONDS as usize)
}

struct Simulation {
    rng: ChaCha8Rng,
    start: DateTime<Utc>,
    nodes: Vec<SimNode>,
    node_states: Vec<NodeState>,
    jobs: Vec<SimJob>,
    /// Work left per job, in steps.
    work: Vec<u32>,
    queues: Vec<(String, VecDeque<usize>)>,
    /// Requeued jobs and the step they enter the queue.
    returning: Vec<(usize, usize)>,
    running: Vec<Running>,
    month: SimulatedMonth,
}

impl Simulation {
    fn new(seed: u64, start: DateTime<Utc>) -> Self {
        let nodes: Vec<SimNode> = (1..=16)
            .map(|i| SimNode {
                name: format!("gpu-{i:02}"),
                partition: if i <= 12 { "train" } else { "debug" }.to_string(),
            })
            .collect();
        let node_states = vec![NodeState::default(); nodes.len()];
        Self {
            rng: ChaCha8Rng::seed_from_u64(seed),
            start,
            node_states,
            jobs: Vec::new(),
            work: Vec::new(),
            queues: vec![
                ("train".to_string(), VecDeque::new()),
                ("debug".to_string(), VecDeque::new()),
            ],
            returning: Vec::new(),
            running: Vec::new(),
            month: SimulatedMonth {
                start,
                end: start,
                nodes: nodes.clone(),
                jobs: Vec::new(),
                instants: Vec::new(),
                queue: Vec::new(),
                node_samples: Vec::new(),
                quarantines: Vec::new(),
            },
            nodes,
        }
    }

    fn time(&self, step: usize) -> DateTime<Utc> {
        self.start + TimeDelta::seconds(step as i64 * STEP_SECONDS)
    }

    fn run(mut self, steps: usize) -> SimulatedMonth {
        // One administrator's drain on the tenth day: out of service, but not runguard's doing.
        let maintenance_from = 9 * 24 * 3600 / STEP_SECONDS as usize + 100;
        for step in 0..steps {
            let now = self.time(step);
            if step == maintenance_from {
                self.node_states[15].maintenance_until = Some(step + 12 * 12);
            }
            self.release(step);
            self.advance(step, now);
            self.arrive(step, now);
            self.schedule(now);
            self.record(now);
        }
        self.month.end = self.time(steps);
        self.month.jobs = self.jobs;
        self.month
    }

    fn release(&mut self, step: usize) {
        for (index, node) in self.node_states.iter_mut().enumerate() {
            if node.quarantined_until == Some(step) {
                node.quarantined_until = None;
                if let Some(span) = self
                    .month
                    .quarantines
                    .iter_mut()
                    .rev()
                    .find(|s| s.node == self.nodes[index].name)
                {
                    span.to = Some(self.start + TimeDelta::seconds(step as i64 * STEP_SECONDS));
                }
            }
            if node.maintenance_until == Some(step) {
                node.maintenance_until = None;
            }
        }
    }

    /// Runs one step of every running job: it completes, or a node under it fails.
    fn advance(&mut self, step: usize, now: DateTime<Utc>) {
        let running = std::mem::take(&mut self.running);
        for mut run in running {
            run.remaining_steps = run.remaining_steps.saturating_sub(1);
            self.work[run.job] = run.remaining_steps;
            let job = run.job;
            if run.remaining_steps == 0 {
                self.finish(&run, now, None);
                continue;
            }
            // A node fails about once in 400 node-hours of training.
            let per_step = 1.0 / (400.0 * 3600.0 / STEP_SECONDS as f64);
            let train = self.jobs[job].partition == "train";
            let failed =
                train && (0..run.nodes.len()).any(|_| self.rng.random_bool(per_step.min(1.0)));
            if !failed {
                self.running.push(run);
                continue;
            }
            let culprit = run.nodes[self.rng.random_range(0..run.nodes.len())];
            let detected = now + TimeDelta::seconds(self.rng.random_range(60..=180));
            let planned = detected + TimeDelta::seconds(self.rng.random_range(30..=120));
            let requeued = planned + TimeDelta::seconds(self.rng.random_range(20..=60));
            let repair_steps = self.rng.random_range(4 * 12..=24 * 12);
            self.node_states[culprit].quarantined_until = Some(step + repair_steps);
            self.month.quarantines.push(QuarantineSpan {
                node: self.nodes[culprit].name.clone(),
                gpus: GPUS_PER_NODE,
                from: now,
                to: None,
            });
            let failure = SimFailure {
                node: self.nodes[culprit].name.clone(),
                detected,
                planned,
                requeued,
            };
            self.finish(&run, now, Some(failure));
            // The requeued attempt joins the queue at the first listing after the requeue.
            let enter = step + 1 + ((requeued - now).num_seconds() / STEP_SECONDS) as usize;
            self.jobs[job].attempts.push(SimAttempt {
                submitted: requeued,
                started: None,
                ended: None,
                nodes: Vec::new(),
                failure: None,
                resumed: None,
            });
            self.returning.push((job, enter));
        }
    }

    fn finish(&mut self, run: &Running, now: DateTime<Utc>, failure: Option<SimFailure>) {
        for node in &run.nodes {
            self.node_states[*node].job = None;
        }
        if let Some(attempt) = self.jobs[run.job].attempts.last_mut() {
            attempt.ended = Some(now);
            attempt.failure = failure;
        }
    }

    /// New jobs: on weekdays `train` jobs come mostly 08:00–12:00 and `debug` jobs 09:00–17:00.
    fn arrive(&mut self, step: usize, now: DateTime<Utc>) {
        let returning = std::mem::take(&mut self.returning);
        for (job, enter) in returning {
            if enter <= step {
                self.queue_of(job).push_back(job);
            } else {
                self.returning.push((job, enter));
            }
        }
        let weekday = !matches!(now.weekday(), Weekday::Sat | Weekday::Sun);
        let hour = now.hour();
        let train_rate = if weekday && (8..12).contains(&hour) {
            2.5
        } else {
            0.3
        };
        let debug_rate = if weekday && (9..17).contains(&hour) {
            5.0
        } else {
            0.5
        };
        let per_step = STEP_SECONDS as f64 / 3600.0;
        for (partition, rate) in [("train", train_rate), ("debug", debug_rate)] {
            if !self.rng.random_bool((rate * per_step).min(1.0)) {
                continue;
            }
            let (nodes, steps) = if partition == "train" {
                let nodes = match self.rng.random_range(0..100) {
                    0..40 => 1,
                    40..75 => 2,
                    _ => 4,
                };
                (nodes, self.rng.random_range(2 * 12..=10 * 12))
            } else {
                (1, self.rng.random_range(2..=8))
            };
            let offset = if step == 0 {
                0
            } else {
                self.rng.random_range(0..STEP_SECONDS)
            };
            let index = self.jobs.len();
            self.jobs.push(SimJob {
                job_id: (100_000 + index).to_string(),
                partition: partition.to_string(),
                nodes,
                attempts: vec![SimAttempt {
                    submitted: now - TimeDelta::seconds(offset),
                    started: None,
                    ended: None,
                    nodes: Vec::new(),
                    failure: None,
                    resumed: None,
                }],
            });
            self.work.push(steps);
            self.queue_of(index).push_back(index);
        }
    }

    fn queue_of(&mut self, job: usize) -> &mut VecDeque<usize> {
        let partition = self.jobs[job].partition.clone();
        let at = self
            .queues
            .iter()
            .position(|(name, _)| *name == partition)
            .unwrap_or(0);
        &mut self.queues[at].1
    }

    /// Strict first in, first out per partition: a job that does not fit blocks the ones behind it.
    fn schedule(&mut self, now: DateTime<Utc>) {
        for q in 0..self.queues.len() {
            while let Some(&job) = self.queues[q].1.front() {
                let partition = &self.queues[q].0;
                let free: Vec<usize> = (0..self.nodes.len())
                    .filter(|n| self.nodes[*n].partition == *partition)
                    .filter(|n| {
                        let state = self.node_states[*n];
                        state.job.is_none()
                            && state.quarantined_until.is_none()
                            && state.maintenance_until.is_none()
                    })
                    .collect();
                let want = self.jobs[job].nodes as usize;
                if free.len() < want {
                    break;
                }
                self.queues[q].1.pop_front();
                let nodes: Vec<usize> = free.into_iter().take(want).collect();
                for node in &nodes {
                    self.node_states[*node].job = Some(job);
                }
                let load = TimeDelta::seconds(self.rng.random_range(180..=480));
                let requeued = self.jobs[job].attempts.len() > 1;
                if let Some(attempt) = self.jobs[job].attempts.last_mut() {
                    attempt.started = Some(now);
                    attempt.nodes = nodes.iter().map(|n| self.nodes[*n].name.clone()).collect();
                    attempt.resumed = requeued.then_some(now + load);
                }
                self.running.push(Running {
                    job,
                    nodes,
                    remaining_steps: self.work[job].max(1),
                });
            }
        }
    }

    fn record(&mut self, now: DateTime<Utc>) {
        self.month.instants.push(Instant {
            time: now,
            seconds: STEP_SECONDS as f64,
        });
        for (_, queue) in &self.queues {
            for (position, job) in queue.iter().enumerate() {
                let job = &self.jobs[*job];
                self.month.queue.push(QueueSample {
                    time: now,
                    job_id: job.job_id.clone(),
                    partition: Some(job.partition.clone()),
                    pending: true,
                    reason: Some(
                        if position == 0 {
                            "Resources"
                        } else {
                            "Priority"
                        }
                        .to_string(),
                    ),
                    gpus: job.gpus(),
                });
            }
        }
        for run in &self.running {
            let job = &self.jobs[run.job];
            self.month.queue.push(QueueSample {
                time: now,
                job_id: job.job_id.clone(),
                partition: Some(job.partition.clone()),
                pending: false,
                reason: None,
                gpus: job.gpus(),
            });
        }
        for (node, state) in self.nodes.iter().zip(&self.node_states) {
            let (use_, allocated, reason) = if state.quarantined_until.is_some() {
                (NodeUse::Drained, 0, Some(QUARANTINE_REASON))
            } else if state.maintenance_until.is_some() {
                (NodeUse::Drained, 0, Some(MAINTENANCE_REASON))
            } else if state.job.is_some() {
                (NodeUse::Allocated, GPUS_PER_NODE, None)
            } else {
                (NodeUse::Idle, 0, None)
            };
            self.month.node_samples.push(NodeSample {
                time: now,
                seconds: STEP_SECONDS as f64,
                node: node.name.clone(),
                partition: Some(node.partition.clone()),
                state: use_,
                gpus: GPUS_PER_NODE,
                gpus_allocated: allocated,
                reason: reason.map(str::to_string),
            });
        }
    }
}
