//! Multiphase workflows: ordered phases (pretrain → long-context → fine-tune → eval), each a job of its
//! own that runguard submits only once the phase before it succeeded.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::{BackendKind, WorkflowId};

/// Store-assigned identifier of a multiphase workflow.
pub type MultiphaseId = i64;

/// What a phase runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum PhaseJob {
    /// A Slurm batch script with its arguments and extra `sbatch` options (each one argv element).
    Batch {
        script: PathBuf,
        #[serde(default)]
        args: Vec<String>,
        #[serde(default)]
        sbatch_args: Vec<String>,
    },
    /// A Kubernetes manifest (one workload) created as it is, with runguard's enrolment label added.
    Manifest { path: PathBuf },
}

/// One phase as the workflow file declares it, paths resolved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PhaseSpec {
    pub name: String,
    pub job: PhaseJob,
    /// Nodes the phase asks for (`sbatch --nodes`); `None`: as the script or manifest says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    /// The fewest nodes a restart of the phase may run on (Cerebras' `min_num_csx`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_nodes: Option<u32>,
    /// Restarts allowed without a new checkpoint of this phase before it fails for good (the count
    /// starts again at each new checkpoint); `None`: the configured crash-loop threshold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_failures: Option<u32>,
    /// Where this phase saves and resumes its checkpoints, given to its job as
    /// `RUNGUARD_CHECKPOINT_DIR`, so that a restart never resumes from another phase's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_dir: Option<PathBuf>,
    /// Directory the job starts in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub work_dir: Option<PathBuf>,
}

/// Where a phase is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PhaseState {
    /// An earlier phase has not succeeded yet.
    Waiting,
    /// Its submission is recorded (and may wait for approval) but no job id is known yet.
    Submitting,
    /// Its job is submitted; runguard watches and recovers it as any enrolled run.
    Running,
    Succeeded,
    /// It failed for good (recovery stopped, or its submission failed or was rejected).
    Failed,
    /// An earlier phase failed for good: it never starts.
    Skipped,
}

impl PhaseState {
    const ALL: [PhaseState; 6] = [
        Self::Waiting,
        Self::Submitting,
        Self::Running,
        Self::Succeeded,
        Self::Failed,
        Self::Skipped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Waiting => "waiting",
            Self::Submitting => "submitting",
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|state| state.as_str() == name)
    }

    /// The phase will not change any more.
    pub fn is_final(self) -> bool {
        matches!(self, Self::Succeeded | Self::Failed | Self::Skipped)
    }
}

/// One phase of a multiphase workflow, with the run that carries it out once submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Phase {
    pub multiphase_id: MultiphaseId,
    /// 0 for the first phase.
    pub index: u32,
    pub spec: PhaseSpec,
    pub state: PhaseState,
    /// The workflow that follows its job (its attempts, failures, checkpoints), once submitted.
    pub workflow_id: Option<WorkflowId>,
    /// The scheduler's id of its job, once known.
    pub job_id: Option<String>,
    /// Why it is in its state, when that needs saying (why it failed or was skipped).
    pub reason: Option<String>,
    pub updated_at: DateTime<Utc>,
}

/// How a multiphase workflow as a whole stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MultiphaseState {
    Running,
    Succeeded,
    Failed,
}

impl MultiphaseState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        [Self::Running, Self::Succeeded, Self::Failed]
            .into_iter()
            .find(|state| state.as_str() == name)
    }
}

/// Ordered phases submitted one after the other, each only once the one before it succeeded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Multiphase {
    pub id: MultiphaseId,
    pub name: String,
    pub backend: BackendKind,
    /// The workflow file it was submitted from.
    pub source: Option<PathBuf>,
    pub state: MultiphaseState,
    pub reason: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}
