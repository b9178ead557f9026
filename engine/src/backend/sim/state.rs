//! The persisted state of the simulated cluster: everything needed to continue after a restart.
//!
//! Times are milliseconds since the Unix epoch on the simulated timeline.

use std::collections::BTreeMap;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::model::{JobSpec, RecoveryLimits};

use super::scenario::FaultKind;

/// Bumped when the layout changes; a state of another version is not continued.
pub(super) const STATE_VERSION: u32 = 1;

/// The whole simulated cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct SimState {
    pub version: u32,
    /// Name of the scenario it runs.
    pub scenario: String,
    /// Hash of the scenario's content, so an edited scenario starts afresh.
    pub fingerprint: u64,
    pub seed: u64,
    /// When the scenario started.
    pub origin_ms: i64,
    /// The simulation has processed every event up to this time.
    pub now_ms: i64,
    pub next_job_id: u64,
    pub nodes: Vec<NodeState>,
    /// Every job ever submitted, in submission (= job id) order.
    pub jobs: Vec<Job>,
    /// Per scenario workload: whether it was submitted yet.
    pub submitted: Vec<bool>,
    /// Per scenario workload: attempts started so far, across requeues and resubmissions.
    pub attempts_started: Vec<u32>,
    /// Per workload name: the iteration of its last completed checkpoint.
    pub checkpoints: BTreeMap<String, u64>,
    /// Per file (relative to the sim directory): bytes committed, i.e. covered by this state.
    pub files: BTreeMap<String, u64>,
}

/// One node of the cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct NodeState {
    pub name: String,
    /// Why the node was drained; drained nodes take no new jobs.
    pub drain_reason: Option<String>,
}

/// One job (one Slurm job id) and its current attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Job {
    pub id: u64,
    /// Index of the scenario workload it runs.
    pub workload: usize,
    pub spec: JobSpec,
    pub limits: RecoveryLimits,
    pub tag: Option<String>,
    pub submit_ms: i64,
    pub restart_count: u32,
    /// Sorted, without duplicates.
    pub excluded: Vec<String>,
    pub phase: Phase,
    /// Nodes of the current or last attempt (kept after it ends, cleared when it is requeued).
    pub alloc: Vec<String>,
    pub start_ms: Option<i64>,
    pub end_ms: Option<i64>,
    pub exit_code: Option<i32>,
    /// When a fault struck the current or last attempt.
    #[serde(default)]
    pub struck_ms: Option<i64>,
    /// When the first line of that failure was written.
    #[serde(default)]
    pub shown_ms: Option<i64>,
}

/// Where a job is in its life.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) enum Phase {
    Pending(Pending),
    Running(Box<Run>),
    Completed,
    Failed,
    Cancelled,
}

/// A job waiting for the scheduler.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Pending {
    /// The scheduler considers the job from this time on.
    pub eligible_ms: i64,
    /// The eligibility event was processed.
    pub woken: bool,
    /// Set after a requeue: the job shows as REQUEUED until then, then pending on `BeginTime`.
    pub requeued_until_ms: Option<i64>,
}

/// The attempt a running job is making.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Run {
    /// Attempt number of the workload (0 = its very first attempt).
    pub attempt: u32,
    /// The attempt's log, relative to the sim directory.
    pub log: String,
    /// Checkpoint iteration the attempt resumed from (0 = from scratch).
    pub resumed_from: u64,
    /// Last completed iteration.
    pub iteration: u64,
    /// When the iteration in flight completes; None while starting up, stalled or finishing.
    pub next_iteration_ms: Option<i64>,
    /// Duration of the iteration in flight.
    pub iteration_ms: f64,
    /// Iteration time summed since the last logged iteration, and how many iterations that covers.
    pub window_ms: f64,
    pub window_iterations: u64,
    /// Multiplier on iteration time (a straggler makes it > 1).
    pub slowdown: f64,
    /// Rank that reports the slowest iteration time, once a straggler struck.
    pub slow_rank: Option<u32>,
    /// Faults still to strike this attempt.
    pub faults: Vec<ArmedFault>,
    /// Lines (and effects) due later, in time order.
    pub script: Vec<Scripted>,
    /// How and when the attempt ends, once that is known.
    pub end: Option<Ending>,
}

/// A fault resolved for one attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct ArmedFault {
    pub kind: FaultKind,
    /// Strikes when this iteration completes.
    pub iteration: u64,
    /// Or at the first iteration completed from this time on (a fault set at a time).
    #[serde(default)]
    pub at_ms: Option<i64>,
    /// Index of the struck node in the allocation.
    pub node_index: usize,
    /// Local GPU index on that node.
    pub gpu: u32,
    pub slowdown: f64,
}

/// A line due at a later time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Scripted {
    pub at_ms: i64,
    /// File relative to the sim directory.
    pub file: String,
    pub text: String,
    pub effect: Option<Effect>,
}

/// What happens in the cluster when a scripted line is written.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) enum Effect {
    /// A checkpoint of this iteration is complete.
    CheckpointSaved(u64),
}

/// The end of an attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Ending {
    pub at_ms: i64,
    pub completed: bool,
    pub exit_code: i32,
}

impl Run {
    /// Adds a line to the script, after any line due at the same time.
    pub fn schedule(&mut self, at_ms: i64, file: &str, text: String, effect: Option<Effect>) {
        let at = self.script.partition_point(|line| line.at_ms <= at_ms);
        self.script.insert(
            at,
            Scripted {
                at_ms,
                file: file.to_string(),
                text,
                effect,
            },
        );
    }

    /// Schedules a line on the attempt's own log.
    pub fn log_at(&mut self, at_ms: i64, text: String) {
        let log = self.log.clone();
        self.schedule(at_ms, &log, text, None);
    }

    /// Time of the last scripted line, if any.
    pub fn last_scripted_ms(&self) -> Option<i64> {
        self.script.last().map(|line| line.at_ms)
    }
}

/// Purposes of random draws, so that no two draws share a stream.
#[derive(Debug, Clone, Copy)]
#[repr(u64)]
pub(super) enum Draw {
    SchedulingDelay = 1,
    Startup = 2,
    IterationTime = 3,
    Fault = 4,
    Loss = 5,
    Process = 6,
    Checkpoint = 7,
    Requeue = 8,
    Failure = 9,
}

/// A random stream derived from the seed and what it is for, so every draw can be re-derived after a
/// restart without persisting generator state.
pub(super) fn rng(seed: u64, purpose: Draw, parts: &[u64]) -> ChaCha8Rng {
    let mut hash = splitmix(seed ^ 0x5EED_CAFE_F00D_D00D);
    hash = splitmix(hash ^ purpose as u64);
    for part in parts {
        hash = splitmix(hash ^ splitmix(*part));
    }
    ChaCha8Rng::seed_from_u64(hash)
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// FNV-1a over bytes: a stable fingerprint of a scenario.
pub(super) fn fingerprint(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}
