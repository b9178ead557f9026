use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::WorkflowId;

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
}

impl AnomalyKind {
    const ALL: [AnomalyKind; 7] = [
        Self::Crash,
        Self::Hang,
        Self::ThroughputDrop,
        Self::Straggler,
        Self::CheckpointStall,
        Self::CrashLoop,
        Self::StuckPending,
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

/// A recovery step a signature recommends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Remedy {
    /// `exclude_culprit`, `drain_node`, `config_fix`, ... (see the catalog's action kinds).
    pub kind: String,
    pub description: String,
    /// Parameters, as the catalog gives them.
    #[serde(default)]
    pub params: serde_json::Value,
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

/// A message for the user about a workflow.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Notification {
    pub id: i64,
    pub workflow_id: Option<WorkflowId>,
    pub time: DateTime<Utc>,
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
