use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{ActionId, WorkflowId};

/// What an action does to the cluster. Each kind is allowed or not by the config's whitelist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// Put the job back in the queue (same job id), excluding nodes.
    Requeue,
    /// Submit the saved spec again as a new job, excluding nodes.
    Resubmit,
    /// Cancel the job.
    Cancel,
    /// Take a node out of scheduling.
    DrainNode,
    /// Keep a pending job from being scheduled (it stays in the queue).
    Hold,
    /// Let a held job be scheduled again.
    Release,
    /// Re-create the workload from its saved spec with a change (more /dev/shm, fewer DataLoader
    /// workers, an env var...), excluding nodes: a change to the user's run, so never whitelisted by
    /// default.
    Recreate,
    /// Change a pending job's node exclusions: add a node the ledger quarantined, or take away one
    /// runguard itself added once the node is back in service. Only a job's own exclusions change, so
    /// a user without operator rights can do it.
    UpdateExclusions,
    /// Return a node runguard drained to service, once its health check passed; a drain runguard
    /// did not set is never touched.
    ResumeNode,
    /// Ask a running job to save a checkpoint now (a signal its framework handles: SIGUSR1 for
    /// Lightning and NeMo), before a node that shows a precursor of failure takes the run down.
    CheckpointNow,
    /// Submit the next phase of a multiphase workflow as a new job, once the phase before it succeeded.
    Submit,
}

impl ActionKind {
    pub const ALL: [ActionKind; 11] = [
        Self::Requeue,
        Self::Resubmit,
        Self::Cancel,
        Self::DrainNode,
        Self::Hold,
        Self::Release,
        Self::Recreate,
        Self::UpdateExclusions,
        Self::ResumeNode,
        Self::CheckpointNow,
        Self::Submit,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Requeue => "requeue",
            Self::Resubmit => "resubmit",
            Self::Cancel => "cancel",
            Self::DrainNode => "drain_node",
            Self::Hold => "hold",
            Self::Release => "release",
            Self::Recreate => "recreate",
            Self::UpdateExclusions => "update_exclusions",
            Self::ResumeNode => "resume_node",
            Self::CheckpointNow => "checkpoint_now",
            Self::Submit => "submit",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == name)
    }

    /// The action starts the run again (a requeue or a resubmission).
    pub fn restarts_the_run(self) -> bool {
        matches!(self, Self::Requeue | Self::Resubmit | Self::Recreate)
    }
}

/// Life of an action: proposed → approved/rejected → executing → done/failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionState {
    /// Waiting for a human to approve it (the whitelist does not permit it).
    Proposed,
    /// Will be executed on the next tick.
    Approved,
    Rejected,
    /// Started; the outcome is not recorded yet. Seen after a restart, it is reconciled, not repeated.
    Executing,
    Done,
    Failed,
    /// No longer applicable (the job recovered or ended by itself before it ran).
    Superseded,
}

impl ActionState {
    const ALL: [ActionState; 7] = [
        Self::Proposed,
        Self::Approved,
        Self::Rejected,
        Self::Executing,
        Self::Done,
        Self::Failed,
        Self::Superseded,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Proposed => "proposed",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::Executing => "executing",
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Superseded => "superseded",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == name)
    }

    /// The action will not change any more.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            Self::Rejected | Self::Done | Self::Failed | Self::Superseded
        )
    }
}

/// A change to a workload's spec made when it is re-created, from the catalog's recommended fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum SpecChange {
    /// Set an environment variable in every training container.
    Env { name: String, value: String },
    /// Fewer DataLoader workers: the container's `--num-workers`-style argument, else an env var.
    DataLoaderWorkers { workers: u32 },
    /// A smaller micro-batch: halve the container's `--micro-batch-size`-style argument.
    HalveMicroBatch,
    /// Mount a memory-backed emptyDir of this size at /dev/shm.
    SharedMemory { size_limit: String },
    /// Tolerate a taint.
    Toleration {
        key: String,
        operator: String,
        value: Option<String>,
        effect: Option<String>,
    },
    /// Turn on KubeRay's GCS fault tolerance, so the Ray cluster survives its head.
    RayGcsFaultTolerance,
}

impl SpecChange {
    /// One line for approvals and the journal.
    pub fn describe(&self) -> String {
        match self {
            Self::Env { name, value } => format!("env {name}={value}"),
            Self::DataLoaderWorkers { workers } => format!("DataLoader workers → {workers}"),
            Self::HalveMicroBatch => "micro-batch size halved".to_string(),
            Self::SharedMemory { size_limit } => {
                format!("/dev/shm as a memory emptyDir of {size_limit}")
            }
            Self::Toleration {
                key,
                operator,
                effect,
                ..
            } => format!(
                "tolerate {key} ({operator}{})",
                effect
                    .as_deref()
                    .map(|e| format!(", {e}"))
                    .unwrap_or_default()
            ),
            Self::RayGcsFaultTolerance => "Ray GCS fault tolerance on".to_string(),
        }
    }

    /// The command-line flags that carry this change, in the spellings training scripts use; empty
    /// for a change that is not an argument.
    pub fn flags(&self) -> &'static [&'static str] {
        match self {
            Self::DataLoaderWorkers { .. } => &[
                "--num-workers",
                "--num_workers",
                "--dataloader-num-workers",
                "--workers",
            ],
            Self::HalveMicroBatch => &[
                "--micro-batch-size",
                "--micro_batch_size",
                "--per_device_train_batch_size",
            ],
            _ => &[],
        }
    }

    /// A flag's new value, given its old one.
    pub fn new_flag_value(&self, old: &str) -> String {
        match self {
            Self::DataLoaderWorkers { workers } => workers.to_string(),
            Self::HalveMicroBatch => old
                .parse::<u64>()
                .map(|n| (n / 2).max(1).to_string())
                .unwrap_or_else(|_| old.to_string()),
            _ => old.to_string(),
        }
    }

    /// The environment variable set instead when the command has none of [`Self::flags`] (the job
    /// reads it, or the change is an environment variable to begin with).
    pub fn environment(&self) -> Option<(String, String)> {
        match self {
            Self::Env { name, value } => Some((name.clone(), value.clone())),
            Self::DataLoaderWorkers { workers } => {
                Some(("DATALOADER_NUM_WORKERS".to_string(), workers.to_string()))
            }
            Self::HalveMicroBatch => {
                Some(("MICRO_BATCH_SIZE_FACTOR".to_string(), "0.5".to_string()))
            }
            _ => None,
        }
    }

    /// Whether the change can be made to a command line and its environment alone (a batch job's
    /// resubmission), rather than to a pod spec.
    pub fn fits_a_command(&self) -> bool {
        self.environment().is_some()
    }
}

/// Parameters of an action; which fields matter depends on the kind.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionParams {
    /// The scheduler job the action targets.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_id: Option<String>,
    /// Nodes the next attempt must avoid (requeue, resubmit).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exclude_nodes: Vec<String>,
    /// The node to drain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// Reason recorded with the scheduler (drain) or shown to the user.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The job's restart count when the action was planned, so a restarted engine can tell whether it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_count: Option<u32>,
    /// The scheduler had already requeued the job by itself (a node failure with `JobRequeue=1`): the
    /// requeue only sets the exclusion and starts it now.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub scheduler_requeued: bool,
    /// The signal a checkpoint request sends (`USR1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// The newest checkpoint's iteration when a checkpoint request was planned: a later one is the
    /// save it asked for (a save line seldom carries a time of its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after_checkpoint: Option<u64>,
    /// Changes to the spec a re-creation makes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changes: Vec<SpecChange>,
}

/// A recovery action, proposed or executed, with why and whether the whitelist permits it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Action {
    pub id: ActionId,
    pub workflow_id: WorkflowId,
    /// The attempt whose failure prompted it.
    pub attempt_index: u32,
    pub kind: ActionKind,
    pub params: ActionParams,
    pub state: ActionState,
    /// Whether the configured whitelist allows running it without approval.
    pub permitted: bool,
    /// Why the engine wants it.
    pub why: String,
    /// The exact command it runs (or ran), for display.
    pub command: Option<String>,
    /// What happened when it ran (output, error, new job id).
    pub result: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}
