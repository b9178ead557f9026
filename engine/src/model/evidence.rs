use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{Remedy, WorkflowId};

/// One log line kept as evidence for attribution.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceLine {
    pub time: DateTime<Utc>,
    pub rank: Option<u32>,
    pub text: String,
}

/// A checkpoint the run saved.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Checkpoint {
    pub workflow_id: WorkflowId,
    pub attempt_index: u32,
    pub iteration: u64,
    pub time: DateTime<Utc>,
    pub path: String,
}

/// Training throughput at one point of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThroughputSample {
    pub workflow_id: WorkflowId,
    pub attempt_index: u32,
    pub time: DateTime<Utc>,
    pub iteration: u64,
    pub tflops_per_gpu: f64,
    /// The rank that reported it, when known.
    pub rank: Option<u32>,
    /// The node that reported it, when known.
    pub node: Option<String>,
}

/// What kind of trouble a detector saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnomalyKind {
    Crash,
    Hang,
    ThroughputDrop,
    Straggler,
    CheckpointStall,
    CrashLoop,
    StuckPending,
    /// A recovery has not brought the run back within `recovery.watchdog_secs`.
    RecoveryStalled,
}

impl AnomalyKind {
    const ALL: [AnomalyKind; 8] = [
        Self::Crash,
        Self::Hang,
        Self::ThroughputDrop,
        Self::Straggler,
        Self::CheckpointStall,
        Self::CrashLoop,
        Self::StuckPending,
        Self::RecoveryStalled,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Crash => "crash",
            Self::Hang => "hang",
            Self::ThroughputDrop => "throughput_drop",
            Self::Straggler => "straggler",
            Self::CheckpointStall => "checkpoint_stall",
            Self::CrashLoop => "crash_loop",
            Self::StuckPending => "stuck_pending",
            Self::RecoveryStalled => "recovery_stalled",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }
}

/// An anomaly raised on one attempt, with the log lines that show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Anomaly {
    pub id: i64,
    pub workflow_id: WorkflowId,
    pub attempt_index: u32,
    pub kind: AnomalyKind,
    pub time: DateTime<Utc>,
    pub summary: String,
    pub evidence: Vec<String>,
}

/// The part of the system a failure is attributed to (the taxonomy's components).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Component {
    Gpu,
    GpuMemory,
    HostMemory,
    Network,
    Storage,
    Scheduler,
    Application,
    Data,
    Infrastructure,
    None,
}

impl Component {
    const ALL: [Component; 10] = [
        Self::Gpu,
        Self::GpuMemory,
        Self::HostMemory,
        Self::Network,
        Self::Storage,
        Self::Scheduler,
        Self::Application,
        Self::Data,
        Self::Infrastructure,
        Self::None,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Gpu => "gpu",
            Self::GpuMemory => "gpu_memory",
            Self::HostMemory => "host_memory",
            Self::Network => "network",
            Self::Storage => "storage",
            Self::Scheduler => "scheduler",
            Self::Application => "application",
            Self::Data => "data",
            Self::Infrastructure => "infrastructure",
            Self::None => "none",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

/// Where the failure sits, as precisely as the evidence allows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Culprit {
    pub node: Option<String>,
    pub rank: Option<u32>,
    pub gpu: Option<u32>,
    /// Nodes of the allocation that each reported the failure's own error when nothing singled out
    /// one of them (no `node` then): candidates for over-eviction, never blamed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suspects: Vec<String>,
}

impl Culprit {
    pub fn is_known(&self) -> bool {
        self.node.is_some() || self.rank.is_some() || self.gpu.is_some()
    }
}

/// Why an attempt failed: category, component, culprit and the evidence behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    pub id: i64,
    pub workflow_id: WorkflowId,
    pub attempt_index: u32,
    /// A category id of the failure taxonomy (`nccl_timeout`, `xid_79`, ...).
    pub category: String,
    pub component: Component,
    pub culprit: Culprit,
    /// 0.0 ..= 1.0
    pub confidence: f64,
    /// Whether a plain requeue (possibly excluding the culprit) can help.
    pub recoverable: bool,
    /// The catalog signature that matched, if any.
    pub signature: Option<String>,
    /// One paragraph for the user.
    pub explanation: String,
    /// The recovery steps the catalog recommends, in order; the policy decides which run.
    #[serde(default)]
    pub remedies: Vec<Remedy>,
    pub evidence: Vec<String>,
    pub time: DateTime<Utc>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Info,
    Warning,
    Critical,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Info => "info",
            Self::Warning => "warning",
            Self::Critical => "critical",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        [Self::Info, Self::Warning, Self::Critical]
            .into_iter()
            .find(|s| s.as_str() == name)
    }
}

/// What a notification is about: alert channels filter on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AlertEvent {
    /// A failure was attributed and a recovery decided.
    Failure,
    /// The workflow entered `recovering`.
    Recovering,
    /// The recovery is done: a new attempt runs.
    Recovered,
    /// A recovery action failed.
    RecoveryFailed,
    /// The workflow stopped without success (crash loop, requeue limit, non-recoverable failure).
    Stopped,
    /// The workflow's run completed.
    Completed,
    /// An action waits for the user's approval.
    ApprovalNeeded,
    /// The scheduler refused the engine's credentials.
    CredentialError,
    /// A recovery has not brought the run back within the watchdog's time.
    Watchdog,
    /// No checkpoint for much longer than usual.
    CheckpointStall,
    /// Throughput stayed below the baseline.
    ThroughputDrop,
    /// One rank or node lags behind the others.
    Straggler,
    /// A job has waited in the queue far longer than expected.
    StuckPending,
    /// The node ledger quarantined a node.
    NodeQuarantined,
    /// A quarantined node passed its health check and is back in service.
    NodeReturned,
    /// Anything else worth a line in the history (enrolment, watching again).
    Notice,
}

impl AlertEvent {
    pub const ALL: [AlertEvent; 16] = [
        Self::Failure,
        Self::Recovering,
        Self::Recovered,
        Self::RecoveryFailed,
        Self::Stopped,
        Self::Completed,
        Self::ApprovalNeeded,
        Self::CredentialError,
        Self::Watchdog,
        Self::CheckpointStall,
        Self::ThroughputDrop,
        Self::Straggler,
        Self::StuckPending,
        Self::NodeQuarantined,
        Self::NodeReturned,
        Self::Notice,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Failure => "failure",
            Self::Recovering => "recovering",
            Self::Recovered => "recovered",
            Self::RecoveryFailed => "recovery_failed",
            Self::Stopped => "stopped",
            Self::Completed => "completed",
            Self::ApprovalNeeded => "approval_needed",
            Self::CredentialError => "credential_error",
            Self::Watchdog => "watchdog",
            Self::CheckpointStall => "checkpoint_stall",
            Self::ThroughputDrop => "throughput_drop",
            Self::Straggler => "straggler",
            Self::StuckPending => "stuck_pending",
            Self::NodeQuarantined => "node_quarantined",
            Self::NodeReturned => "node_returned",
            Self::Notice => "notice",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|event| event.as_str() == name)
    }

    /// The alert raised by a warning-only anomaly.
    pub fn of_warning(kind: AnomalyKind) -> Self {
        match kind {
            AnomalyKind::CheckpointStall => Self::CheckpointStall,
            AnomalyKind::ThroughputDrop => Self::ThroughputDrop,
            AnomalyKind::Straggler => Self::Straggler,
            AnomalyKind::StuckPending => Self::StuckPending,
            AnomalyKind::RecoveryStalled => Self::Watchdog,
            AnomalyKind::Crash | AnomalyKind::Hang | AnomalyKind::CrashLoop => Self::Failure,
        }
    }
}

/// A message for the user about a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    pub id: i64,
    pub workflow_id: Option<WorkflowId>,
    pub time: DateTime<Utc>,
    pub event: AlertEvent,
    pub severity: Severity,
    pub title: String,
    pub body: String,
}

/// One decision of the engine, executed or not, with the evidence it rested on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JournalEntry {
    pub id: i64,
    pub workflow_id: Option<WorkflowId>,
    pub time: DateTime<Utc>,
    pub decision: String,
    pub evidence: Vec<String>,
}
