//! What the capacity report is computed from: plain records read from the store (or generated), with
//! no behaviour of their own, so the arithmetic can be tested on hand-built values.

use chrono::{DateTime, TimeDelta, Utc};
use serde::{Deserialize, Serialize};

/// Everything the capacity report needs, over any span of time; the report picks its window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct CapacityHistory {
    /// Each attempt's time in the queue.
    pub waits: Vec<QueueWait>,
    /// Each time the jobs were listed: when, and how long that listing stands for.
    pub instants: Vec<Instant>,
    /// Each listed job at each instant.
    pub queue: Vec<QueueSample>,
    /// Each node at each time the nodes were listed.
    pub nodes: Vec<NodeSample>,
    /// Nodes taken out of service by runguard, with their GPUs.
    pub quarantines: Vec<QuarantineSpan>,
    /// Each recovery of a failed attempt, with the time it took.
    pub recoveries: Vec<RecoveryTime>,
    /// Each attempt's running time, for the failure rate.
    pub runs: Vec<RunSpan>,
    /// Each checkpoint save measured in a run's progress (minutes), the checkpoint's cost.
    pub save_minutes: Vec<f64>,
}

/// One attempt from submission to start (`started` is `None` while it still waits).
#[derive(Debug, Clone, PartialEq)]
pub struct QueueWait {
    pub partition: Option<String>,
    pub gpus: u32,
    pub submitted: DateTime<Utc>,
    pub started: Option<DateTime<Utc>>,
    /// A requeue or resubmission of a failed attempt: its wait is part of a recovery's downtime.
    pub requeued: bool,
}

/// One listing of the jobs: it stands for the `seconds` that ended at `time`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Instant {
    pub time: DateTime<Utc>,
    pub seconds: f64,
}

/// A job as one listing saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueSample {
    pub time: DateTime<Utc>,
    pub job_id: String,
    pub partition: Option<String>,
    /// Waiting to start (otherwise running).
    pub pending: bool,
    /// The scheduler's reason code while pending (`Resources`, `Priority`, ...).
    pub reason: Option<String>,
    /// GPUs requested (pending) or allocated (running).
    pub gpus: u32,
}

/// What a node was doing, in the scheduler-neutral words of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeUse {
    /// Nothing running.
    Idle,
    /// Some GPUs allocated.
    Mixed,
    /// Every GPU allocated.
    Allocated,
    /// Taken out of scheduling (drained, cordoned).
    Drained,
    /// Not answering or failed.
    Down,
}

impl NodeUse {
    pub const ALL: [NodeUse; 5] = [
        NodeUse::Idle,
        NodeUse::Mixed,
        NodeUse::Allocated,
        NodeUse::Drained,
        NodeUse::Down,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            NodeUse::Idle => "idle",
            NodeUse::Mixed => "mixed",
            NodeUse::Allocated => "allocated",
            NodeUse::Drained => "drained",
            NodeUse::Down => "down",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == text)
    }

    /// The node can take jobs: its free GPUs count as idle capacity.
    pub fn in_service(self) -> bool {
        matches!(self, NodeUse::Idle | NodeUse::Mixed | NodeUse::Allocated)
    }
}

/// A node as one listing of the nodes saw it; it stands for the `seconds` that ended at `time`.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSample {
    pub time: DateTime<Utc>,
    pub seconds: f64,
    pub node: String,
    pub partition: Option<String>,
    pub state: NodeUse,
    pub gpus: u32,
    pub gpus_allocated: u32,
    /// Why the node is out of service, in the scheduler's words.
    pub reason: Option<String>,
}

/// A node out of service because runguard took it out; `to` is `None` while it still is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QuarantineSpan {
    pub node: String,
    pub gpus: u32,
    pub from: DateTime<Utc>,
    pub to: Option<DateTime<Utc>>,
}

/// One recovery, split as the recovery report splits it (see [`crate::report::downtime`]).
#[derive(Debug, Clone, PartialEq)]
pub struct RecoveryTime {
    pub failed_at: DateTime<Utc>,
    /// GPUs of the failed attempt.
    pub gpus: u32,
    /// Detection, analysis and the requeue itself: the part a person would do by hand; `None` when
    /// runguard's restart did not complete (the scheduler restarted the job by itself, the action
    /// was rejected, or it is still under way): runguard saved nothing there.
    pub response: Option<TimeDelta>,
    /// The time from the next start to training again (the checkpoint load), when measured.
    pub checkpoint_load: Option<TimeDelta>,
}

/// An attempt running on `nodes` nodes from `start` to `end`.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSpan {
    pub nodes: u32,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

/// The report's window, half open: `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Window {
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

impl Window {
    pub fn contains(&self, time: DateTime<Utc>) -> bool {
        self.from <= time && time < self.to
    }

    /// The part of `[start, end)` inside the window, in hours.
    pub fn overlap_hours(&self, start: DateTime<Utc>, end: DateTime<Utc>) -> f64 {
        let start = start.max(self.from);
        let end = end.min(self.to);
        if end <= start {
            return 0.0;
        }
        hours(end - start)
    }

    pub fn hours(&self) -> f64 {
        hours(self.to - self.from)
    }
}

/// A duration in hours.
pub fn hours(delta: TimeDelta) -> f64 {
    delta.num_milliseconds() as f64 / 3_600_000.0
}
