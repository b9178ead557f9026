//! What runguard knows about each node across every workflow: the incidents seen on it and the state
//! the node ledger keeps it in.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::WorkflowId;

/// Where a node stands in the ledger: healthy → suspect → quarantined → probation → healthy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    /// Nothing recent against it.
    #[default]
    Healthy,
    /// Some evidence against it, not enough to keep it out.
    Suspect,
    /// Kept out of every requeue and resubmission until a health check passes.
    Quarantined,
    /// Back in service after a passed health check; a new fault sends it back at once.
    Probation,
}

impl NodeState {
    pub const ALL: [NodeState; 4] = [
        Self::Healthy,
        Self::Suspect,
        Self::Quarantined,
        Self::Probation,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Healthy => "healthy",
            Self::Suspect => "suspect",
            Self::Quarantined => "quarantined",
            Self::Probation => "probation",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == name)
    }
}

/// Where an incident was learned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IncidentSource {
    /// A failure of a job attributed to the node.
    Attribution,
    /// A line of the node's kernel log: an event, when it happened.
    NodeSignal,
    /// A GPU status command's report (`nvidia-smi -q`, `dcgmi health`): a state, which may date from
    /// before the jobs now on the node (error counters last as long as the driver).
    GpuStatus,
    /// The scheduler said the node was dead under a job.
    Scheduler,
    /// A health check of the node failed.
    HealthCheck,
}

impl IncidentSource {
    const ALL: [IncidentSource; 5] = [
        Self::Attribution,
        Self::NodeSignal,
        Self::GpuStatus,
        Self::Scheduler,
        Self::HealthCheck,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Attribution => "attribution",
            Self::NodeSignal => "node_signal",
            Self::GpuStatus => "gpu_status",
            Self::Scheduler => "scheduler",
            Self::HealthCheck => "health_check",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|source| source.as_str() == name)
    }
}

/// One thing seen against a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeIncident {
    pub id: i64,
    pub node: String,
    pub time: DateTime<Utc>,
    pub source: IncidentSource,
    /// What it was, in the ledger's words (`xid_79`, `ecc_correctable`, `nccl_timeout`...).
    pub kind: String,
    /// How much it counts against the node, before ageing.
    pub weight: f64,
    /// A fault that takes the node out on its own (a GPU lost, an uncorrectable ECC error).
    pub fatal: bool,
    pub workflow_id: Option<WorkflowId>,
    pub attempt_index: Option<u32>,
    pub job_id: Option<String>,
    /// The lines that show it.
    pub evidence: Vec<String>,
}

/// A node's ledger entry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeRecord {
    pub node: String,
    pub state: NodeState,
    /// When it entered its state.
    pub since: DateTime<Utc>,
    /// Why, in a line.
    pub reason: String,
    /// Incidents before this time no longer count (the node passed a health check since).
    pub counted_from: Option<DateTime<Utc>>,
    /// How many times it has been quarantined.
    pub quarantines: u32,
    /// When the next health check runs (quarantined nodes).
    pub next_check_at: Option<DateTime<Utc>>,
    /// Health checks failed since it was quarantined.
    pub failed_checks: u32,
    /// When probation ends.
    pub probation_until: Option<DateTime<Utc>>,
    /// The drain reason runguard set on the node, while its drain stands: only that drain is undone.
    pub drain_reason: Option<String>,
    pub updated_at: DateTime<Utc>,
}

impl NodeRecord {
    /// A node seen for the first time.
    pub fn new(node: &str, now: DateTime<Utc>) -> Self {
        Self {
            node: node.to_string(),
            state: NodeState::Healthy,
            since: now,
            reason: String::new(),
            counted_from: None,
            quarantines: 0,
            next_check_at: None,
            failed_checks: 0,
            probation_until: None,
            drain_reason: None,
            updated_at: now,
        }
    }
}

/// A node exclusion runguard added to a pending job, so that it takes away exactly that one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddedExclusion {
    pub node: String,
    pub workflow_id: WorkflowId,
    pub job_id: String,
    pub added_at: DateTime<Utc>,
}
