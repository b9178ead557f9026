use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::WorkflowId;

/// Which scheduler runguard talks to.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// The embedded simulated cluster.
    #[default]
    Sim,
    /// Slurm through its command-line tools.
    Slurm,
    /// Kubernetes workloads (Job, PyTorchJob, RayJob) through the API server.
    Kubernetes,
}

impl BackendKind {
    /// The name workflows of this backend are stored and shown under.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sim => "sim",
            Self::Slurm => "slurm",
            Self::Kubernetes => "kubernetes",
        }
    }

    /// A stored name; `None` for one no backend has.
    pub fn parse(name: &str) -> Option<Self> {
        [Self::Sim, Self::Slurm, Self::Kubernetes]
            .into_iter()
            .find(|kind| kind.as_str() == name)
    }
}

impl std::fmt::Display for BackendKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Lifecycle of a workflow as the user sees it (the TensorPool agent's status lifecycle).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkflowStatus {
    /// Enrolled; access to the job is being validated.
    Pending,
    /// Being watched.
    Enabled,
    /// The scheduler refused our credentials; fix and re-enrol.
    CredentialError,
    /// A failure was detected and a recovery is under way.
    Recovering,
    /// Finished: the run succeeded, or runguard stopped recovering it (see the stop reason).
    Completed,
}

impl WorkflowStatus {
    /// The name used in the store, the CLI and JSON output.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Enabled => "enabled",
            Self::CredentialError => "credential_error",
            Self::Recovering => "recovering",
            Self::Completed => "completed",
        }
    }

    /// Parses the store's name back; `None` for a name this version does not know.
    pub fn parse(name: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Enabled,
            Self::CredentialError,
            Self::Recovering,
            Self::Completed,
        ]
        .into_iter()
        .find(|status| status.as_str() == name)
    }

    /// Whether the engine still watches workflows in this status.
    pub fn is_active(self) -> bool {
        !matches!(self, Self::Completed)
    }
}

impl JobSpec {
    /// How many consecutive ranks run on each node (srun and torchrun lay ranks out in blocks): the
    /// scheduler's task layout when known, else one rank a GPU, else one a node.
    pub fn ranks_per_node(&self) -> u32 {
        if self.tasks_per_node > 0 {
            self.tasks_per_node
        } else {
            self.gpus_per_node.max(1)
        }
    }
}

/// What is needed to resubmit the run: enough for `sbatch` (or the sim) to start it again.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobSpec {
    /// Job name as the scheduler knows it.
    pub name: String,
    /// Submitting user.
    #[serde(default)]
    pub user: String,
    /// Number of nodes requested.
    pub nodes: u32,
    /// GPUs per node.
    pub gpus_per_node: u32,
    /// Tasks (ranks) per node as the scheduler lays them out (0: unknown; then one rank a GPU).
    #[serde(default)]
    pub tasks_per_node: u32,
    /// Partition (queue), if any.
    #[serde(default)]
    pub partition: Option<String>,
    /// The batch script or command that starts the run.
    #[serde(default)]
    pub command: Option<String>,
    /// Working directory of the run.
    #[serde(default)]
    pub work_dir: Option<String>,
    /// The job this one waits for (Slurm `--dependency=afterok:4200` → "4200"), if any.
    #[serde(default)]
    pub dependency: Option<String>,
    /// The cluster that runs it (Slurm's `ClusterName`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster: Option<String>,
    /// The reservation it runs in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservation: Option<String>,
    /// CPUs of the whole job.
    #[serde(default)]
    pub cpus: u32,
    /// Memory of the whole job as the scheduler writes it (`512G`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// Nodes the job asked to run on (`--nodelist`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub included_nodes: Vec<String>,
}

/// Per-workflow recovery limits, as the job declared them (e.g. `max_requeue_times` in the Slurm comment).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecoveryLimits {
    /// The job's own requeue limit; the effective limit is the smaller of this and the system's.
    pub max_requeue_times: Option<u32>,
    /// Auto-resume mode the job asked for (`requeue`).
    #[serde(default)]
    pub auto_resume_mode: Option<String>,
    /// The actions the job's owner allows (a Kubernetes annotation); it can only narrow the
    /// configured whitelist, never widen it. `None`: the whitelist as configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_actions: Option<Vec<crate::model::ActionKind>>,
}

/// One training run the user enrolled, followed across all its attempts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Workflow {
    /// Store identifier.
    pub id: WorkflowId,
    /// Human name (the job name).
    pub name: String,
    /// The scheduler that runs it.
    pub backend: BackendKind,
    /// What is needed to resubmit it.
    pub spec: JobSpec,
    /// The job's own recovery limits.
    pub limits: RecoveryLimits,
    /// Lifecycle status.
    pub status: WorkflowStatus,
    /// Why the workflow is in its status (e.g. why recovery stopped); `None` when nothing needs saying.
    pub status_reason: Option<String>,
    /// Whether the run finished its training successfully.
    pub succeeded: bool,
    /// Requeues (or resubmissions) runguard has performed so far.
    pub requeues_used: u32,
    /// Consecutive failed attempts since the last new checkpoint (the crash-loop counter).
    pub failures_since_checkpoint: u32,
    /// When it was enrolled.
    pub created_at: DateTime<Utc>,
    /// Last change.
    pub updated_at: DateTime<Utc>,
}

impl Workflow {
    /// A workflow enrolled now, not stored yet (`id` 0): enabled, nothing used.
    pub fn enrolled(
        name: impl Into<String>,
        backend: BackendKind,
        spec: JobSpec,
        limits: RecoveryLimits,
        now: DateTime<Utc>,
    ) -> Self {
        Self {
            id: 0,
            name: name.into(),
            backend,
            spec,
            limits,
            status: WorkflowStatus::Enabled,
            status_reason: None,
            succeeded: false,
            requeues_used: 0,
            failures_since_checkpoint: 0,
            created_at: now,
            updated_at: now,
        }
    }
}
