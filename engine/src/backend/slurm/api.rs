//! What the Slurm backend needs from Slurm, whichever way it is reached: the command-line tools
//! ([`super::cli::SlurmCli`]) or slurmrestd ([`super::rest`]). The backend's logic (enrolment, the
//! order of a requeue's steps, waiting for a job to settle) is written once against this trait.

use std::path::PathBuf;

use async_trait::async_trait;

use super::jobcomp::JobCompRecord;
use super::squeue::SlurmJob;
use crate::backend::{BackendError, NodeCapacity};

/// One change runguard makes to Slurm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// Put the job back in the queue, held (`scontrol requeuehold`): it keeps its job id and its
    /// processes are killed if it still runs.
    RequeueHold {
        job_id: String,
    },
    /// Replace the job's exclusion list (an empty list clears it).
    ExcludeNodes {
        job_id: String,
        nodes: Vec<String>,
    },
    /// Let a held job be scheduled.
    Release {
        job_id: String,
    },
    /// Keep a pending job from being scheduled.
    Hold {
        job_id: String,
    },
    /// Start the job as soon as resources allow, instead of the two minutes Slurm waits after a requeue.
    StartNow {
        job_id: String,
    },
    Cancel {
        job_id: String,
    },
    /// Take a node out of scheduling with a reason.
    Drain {
        node: String,
        reason: String,
    },
    /// Send a signal to a job's batch script (which passes it on, as `exec srun` does).
    Signal {
        job_id: String,
        signal: String,
    },
    /// Return a drained node to service.
    Resume {
        node: String,
    },
    /// Submit a batch script as a new job.
    Submit(Submission),
}

/// A batch job to submit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Submission {
    pub script: PathBuf,
    /// The script's own arguments.
    pub args: Vec<String>,
    pub name: String,
    pub comment: String,
    pub exclude: Vec<String>,
    pub work_dir: Option<String>,
    /// Variables added to the environment the job inherits (`--export=ALL,NAME=value`).
    pub environment: Vec<(String, String)>,
    /// More `sbatch` options, one argv element each, before the script.
    pub options: Vec<String>,
}

/// Slurm, reached one way or another.
#[async_trait]
pub trait SlurmApi: Send + Sync {
    /// Every job the controller knows (or only `job_id`), with warnings for entries that could not be read.
    async fn jobs(
        &self,
        job_id: Option<&str>,
    ) -> Result<(Vec<SlurmJob>, Vec<String>), BackendError>;

    /// Performs one operation; for [`Operation::Submit`] the answer is the new job id.
    async fn perform(&self, operation: &Operation) -> Result<String, BackendError>;

    /// The exact command or request `operation` runs, for approvals and the journal.
    fn describe(&self, operation: &Operation) -> String;

    /// The nodes of `partition` (all partitions when `None`): all of them, and those that can run jobs
    /// now (not down, drained or failing).
    async fn usable_nodes(&self, partition: Option<&str>) -> Result<NodeCapacity, BackendError>;

    /// Each of `nodes` with the controller's compact word for its state (`alloc`, `mix*`, `down*`...).
    async fn node_states(&self, nodes: &[String]) -> Result<Vec<(String, String)>, BackendError>;

    /// Each of `nodes` with its compact state and the reason an administrator or runguard set on it
    /// (empty when none).
    async fn node_reasons(
        &self,
        nodes: &[String],
    ) -> Result<Vec<(String, String, String)>, BackendError>;
    /// Every node with its partition, state and GPUs, for the capacity report; `None` when this way
    /// of reaching the controller cannot list them.
    async fn node_inventory(&self) -> Result<Option<crate::capacity::NodeListing>, BackendError> {
        Ok(None)
    }

    /// The ended attempts of a job the controller no longer lists, oldest first, from accounting
    /// (`sacct`) or the jobcomp file; `None` when the cluster keeps neither.
    async fn history(&self, job_id: &str) -> Result<Option<Vec<JobCompRecord>>, BackendError>;
}
