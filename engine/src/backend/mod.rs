//! The schedulers runguard talks to, behind one trait: the engine never knows which one it drives.

#[cfg(feature = "kubernetes")]
pub mod kube;
#[cfg(feature = "sim")]
pub mod sim;
#[cfg(feature = "slurm")]
pub mod slurm;

use std::path::PathBuf;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::model::{
    ActionKind, ActionParams, BackendKind, JobSpec, JobState, RecoveryLimits, SpecChange,
};

/// A backend operation that did not work.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The scheduler could not be reached or answered with something we cannot use.
    #[error("scheduler unavailable: {0}")]
    Unavailable(String),
    /// The scheduler refused the operation (usually missing rights); `command` is what would have run.
    #[error("refused by the scheduler: {message} (command: {command})")]
    Refused { command: String, message: String },
    /// The job is unknown to the scheduler.
    #[error("no such job: {0}")]
    NoSuchJob(String),
    /// The request itself is invalid (e.g. it would exclude every node).
    #[error("invalid request: {0}")]
    Invalid(String),
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// The scheduler refused runguard's credentials (expired token, RBAC); nothing can be watched or
    /// done until they are fixed.
    #[error("credentials refused: {0}")]
    Credentials(String),
    /// The scheduler could not be reached, with the error underneath (a command that would not start,
    /// a client that could not be built, an answer that would not decode).
    #[error("{context}: {source}")]
    Transport {
        context: String,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A step of an action could not be confirmed in time and is not retried blindly: the message says
    /// what state the job was left in and the exact command that finishes the step by hand.
    #[error("{0}")]
    Unconfirmed(String),
    /// The job was ended but cannot leave nodes that no longer answer: the scheduler keeps it on them
    /// until it declares them down (Slurm's `SlurmdTimeout`), so it cannot run again under its id
    /// before then.
    #[error(
        "job {job_id} was ended but cannot leave {} until the scheduler declares them down",
        nodes.join(",")
    )]
    StuckOnNodes { job_id: String, nodes: Vec<String> },
    /// This backend cannot do that at all (see [`Capabilities`]).
    #[error("{backend} cannot {operation}")]
    Unsupported {
        backend: String,
        operation: &'static str,
    },
}

impl BackendError {
    /// The error underneath, with what was being done.
    pub fn transport(
        context: impl Into<String>,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self::Transport {
            context: context.into(),
            source: source.into(),
        }
    }

    /// Worth trying again later: the scheduler was unreachable or slow, not opposed.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Unavailable(_) | Self::Io(_) | Self::Transport { .. }
        )
    }

    /// The scheduler refused: the command that would have run and its words.
    pub fn refusal(&self) -> Option<(&str, &str)> {
        match self {
            Self::Refused { command, message } => Some((command, message)),
            _ => None,
        }
    }
}

/// What a backend can do, as data: the policy proposes only what the backend can carry out, and the
/// approvals pane shows why another way was not offered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Put a job back in the queue under the same id.
    pub requeue: bool,
    /// Submit a job's saved spec again as a new job.
    pub resubmit: bool,
    /// Re-create a workload from its saved spec with changes (the catalog's config fixes).
    pub recreate: bool,
    /// Submit a batch job again with the catalog's fix in its arguments or environment (changes a
    /// command line can carry, [`crate::recover::overrides`]).
    pub resubmit_changed: bool,
    /// Keep a pending job from starting, and let it start again.
    pub hold: bool,
    /// Take a node out of scheduling.
    pub drain: bool,
    /// Send a signal to a running job's processes (a checkpoint request).
    pub signal: bool,
    /// Tell which nodes can run a job now and which could ever run it ([`NodeCapacity`]).
    pub usable_nodes: bool,
    /// Change which nodes a pending job must avoid.
    pub update_exclusions: bool,
}

/// One thing a backend can do, to build [`Capabilities`] from a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Can {
    Requeue,
    Resubmit,
    Recreate,
    ResubmitChanged,
    Hold,
    Drain,
    Signal,
    UsableNodes,
    UpdateExclusions,
}

impl Capabilities {
    /// Exactly the abilities listed.
    pub fn of(abilities: &[Can]) -> Self {
        let can = |ability| abilities.contains(&ability);
        Self {
            requeue: can(Can::Requeue),
            resubmit: can(Can::Resubmit),
            recreate: can(Can::Recreate),
            resubmit_changed: can(Can::ResubmitChanged),
            hold: can(Can::Hold),
            drain: can(Can::Drain),
            signal: can(Can::Signal),
            usable_nodes: can(Can::UsableNodes),
            update_exclusions: can(Can::UpdateExclusions),
        }
    }
}

/// What the scheduler says about one watched job right now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobSnapshot {
    pub job_id: String,
    pub name: String,
    pub user: String,
    pub state: JobState,
    /// The state exactly as the scheduler wrote it.
    pub state_raw: String,
    /// The scheduler's reason code, if any.
    pub reason: Option<String>,
    /// Why the scheduler keeps this pending job from starting until it is released, if it does (the
    /// backend reads its scheduler's words for it).
    pub hold: Option<Hold>,
    /// Allocated nodes (empty while pending).
    pub nodes: Vec<String>,
    /// GPUs allocated (or requested while pending) in total.
    pub gpus: u32,
    pub submit_time: Option<DateTime<Utc>>,
    pub start_time: Option<DateTime<Utc>>,
    pub end_time: Option<DateTime<Utc>>,
    pub exit_code: Option<i32>,
    /// How many times the scheduler has restarted this job id (Slurm's `Restarts`).
    pub restart_count: u32,
    /// Nodes the job must not run on.
    pub excluded_nodes: Vec<String>,
    /// Where the job's unified log is written.
    pub log_path: Option<PathBuf>,
    /// What is needed to submit the job again.
    pub spec: JobSpec,
    /// The job's own recovery limits (from its enrolment comment or labels).
    pub limits: RecoveryLimits,
    /// The tag runguard gave a job it submitted, linking it back to its workflow and attempt.
    pub tag: Option<String>,
}

/// Who holds a pending job. runguard releases only a requeue's own hold, never a user's or an
/// administrator's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hold {
    /// Requeued in the held state (`scontrol requeuehold`): the hold of a requeue in progress.
    Requeue,
    /// Held by its owner (`scontrol hold`, `sbatch -H`).
    User,
    /// Held by an administrator.
    Admin,
}

/// The nodes that could run one job, as its scheduler would place it. The policy stops a recovery
/// only when `fitting` (less the excluded nodes) is too small; when just `now` is, the job is restarted
/// anyway and waits in the queue for a node to come back, an autoscaler to add one or another job to end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCapacity {
    /// Nodes that can take one of the job's replicas now: up, schedulable, matching it, with room.
    pub now: Vec<String>,
    /// Nodes that match the job whatever their state now (down, drained, cordoned or busy nodes
    /// included): the most the pool could ever give it. Every node of `now` is in it.
    pub fitting: Vec<String>,
    /// The fewest nodes the job says it can run on (an elastic job's minimum), when it says so.
    pub min_nodes: Option<u32>,
}

impl NodeCapacity {
    /// How many of `now` and of `fitting` are left once `exclude` is taken out.
    pub fn left(&self, exclude: &[String]) -> (u32, u32) {
        let count = |nodes: &[String]| {
            let left = nodes.iter().filter(|node| !exclude.contains(node)).count();
            u32::try_from(left).unwrap_or(u32::MAX)
        };
        (count(&self.now), count(&self.fitting))
    }

    /// Whether `node` can take a replica of the job now.
    pub fn usable_now(&self, node: &str) -> bool {
        self.now.iter().any(|usable| usable == node)
    }
}

/// What an executed action did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionOutcome {
    /// A line for the journal and the user.
    pub detail: String,
    /// The new job id, when the action submitted a new job.
    pub new_job_id: Option<String>,
}

/// A new job runguard submits itself (a phase of a multiphase workflow), enrolled as it is created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewJob {
    /// The job's name on the scheduler.
    pub name: String,
    /// What it runs.
    pub job: crate::model::PhaseJob,
    /// Links the job back to its workflow and attempt (see [`JobSnapshot::tag`]): the scheduler keeps
    /// it with the job, so a restarted engine finds a submission it did not get to record.
    pub tag: String,
    /// Nodes it asks for, when the workflow file says.
    pub nodes: Option<u32>,
    /// The fewest nodes it may start (and restart) on.
    pub min_nodes: Option<u32>,
    /// Its requeue limit, carried in its enrolment.
    pub max_requeue_times: Option<u32>,
    /// Directory it starts in.
    pub work_dir: Option<PathBuf>,
    /// Variables added to its environment.
    pub env: Vec<(String, String)>,
}

/// A scheduler: what the engine observes and the actions it can take.
///
/// Implementations must be idempotent-friendly: the engine re-reads a job before acting on it, and every
/// method may be called again after the engine restarts.
#[async_trait]
pub trait Backend: Send + Sync {
    /// Which scheduler this is; stored with each workflow.
    fn kind(&self) -> BackendKind;

    /// The scheduler's name as workflows are stored and shown under it (`sim`, `slurm`, ...).
    fn name(&self) -> &'static str {
        self.kind().as_str()
    }

    /// What this backend can do.
    fn capabilities(&self) -> Capabilities;

    /// Whether this job's processes can be asked to save with a signal: the backend's capability,
    /// unless the kind of job refuses it (a Ray workload's processes end on an unhandled one).
    fn can_signal(&self, _job_id: &str) -> bool {
        self.capabilities().signal
    }

    /// Every job runguard should watch (enrolled jobs and the ones it submitted), in any state it still knows.
    async fn list_jobs(&self) -> Result<Vec<JobSnapshot>, BackendError>;

    /// One job, if the scheduler still knows it.
    async fn job(&self, job_id: &str) -> Result<Option<JobSnapshot>, BackendError>;

    /// Puts the job back in the queue under the same id, never to run on `exclude`.
    async fn requeue(
        &self,
        job_id: &str,
        exclude: &[String],
    ) -> Result<ActionOutcome, BackendError>;

    /// Submits `spec` again as a new job avoiding `exclude`; `tag` is stored with the job (see [`JobSnapshot::tag`]).
    async fn resubmit(
        &self,
        spec: &JobSpec,
        exclude: &[String],
        tag: &str,
    ) -> Result<ActionOutcome, BackendError>;

    /// Submits `spec` again as a new job avoiding `exclude`, with `changes` made to its arguments or
    /// environment ([`Capabilities::resubmit_changed`]); `tag` as for [`Backend::resubmit`].
    async fn resubmit_changed(
        &self,
        spec: &JobSpec,
        exclude: &[String],
        tag: &str,
        changes: &[SpecChange],
    ) -> Result<ActionOutcome, BackendError> {
        if changes.is_empty() {
            return self.resubmit(spec, exclude, tag).await;
        }
        Err(self.unsupported("submit a job again with a changed command line"))
    }

    /// Re-creates the workload from its saved spec with `changes`, never to run on `exclude`.
    async fn recreate(
        &self,
        job_id: &str,
        _exclude: &[String],
        _changes: &[SpecChange],
    ) -> Result<ActionOutcome, BackendError> {
        let _ = job_id;
        Err(self.unsupported("re-create a workload with a changed spec"))
    }

    /// Submits a new job, enrolled with its tag; the outcome carries the scheduler's id for it.
    async fn submit(&self, job: &NewJob) -> Result<ActionOutcome, BackendError> {
        let _ = job;
        Err(self.unsupported("submit a new job"))
    }

    /// The exact command [`Backend::submit`] runs for `job`, for approvals and the journal.
    fn submit_command(&self, job: &NewJob) -> String {
        format!("submit {} to {}", job.name, self.name())
    }

    /// Cancels the job.
    async fn cancel(&self, job_id: &str) -> Result<ActionOutcome, BackendError>;

    /// Takes a node out of scheduling with a reason.
    async fn drain_node(&self, node: &str, reason: &str) -> Result<ActionOutcome, BackendError>;

    /// Sets the nodes a pending job must not run on to `nodes` (the whole list).
    async fn set_exclusions(
        &self,
        job_id: &str,
        _nodes: &[String],
    ) -> Result<ActionOutcome, BackendError> {
        let _ = job_id;
        Err(self.unsupported("change a pending job's node exclusions"))
    }

    /// Sends `signal` (`USR1`) to a running job, for its framework to save a checkpoint.
    async fn signal_job(&self, job_id: &str, _signal: &str) -> Result<ActionOutcome, BackendError> {
        let _ = job_id;
        Err(self.unsupported("send a signal to a job"))
    }

    /// Returns `node` to service if it is drained with exactly `reason` (runguard's own drain);
    /// a drain with any other reason is left as it is, and the outcome says so.
    async fn resume_node(&self, node: &str, _reason: &str) -> Result<ActionOutcome, BackendError> {
        let _ = node;
        Err(self.unsupported("return a node to service"))
    }

    /// The exact command an action runs on this backend, for approvals and the journal.
    fn command_for(&self, kind: ActionKind, params: &ActionParams) -> String;

    /// A file holding the node's kernel log (Xid, ECC, thermal), when the backend knows one.
    fn node_log(&self, node: &str) -> Option<PathBuf>;

    /// Keeps a pending job from being scheduled.
    async fn hold(&self, job_id: &str) -> Result<ActionOutcome, BackendError> {
        let _ = job_id;
        Err(self.unsupported("hold a job"))
    }

    /// Lets a held job be scheduled again.
    async fn release(&self, job_id: &str) -> Result<ActionOutcome, BackendError> {
        let _ = job_id;
        Err(self.unsupported("release a job"))
    }

    /// The error of an operation [`Backend::capabilities`] does not offer.
    fn unsupported(&self, operation: &'static str) -> BackendError {
        BackendError::Unsupported {
            backend: self.name().to_string(),
            operation,
        }
    }

    /// Called once with the engine's waker: a backend told of changes by the scheduler (watch streams)
    /// notifies it so that the engine looks now rather than at its next poll.
    fn set_waker(&self, _waker: std::sync::Arc<tokio::sync::Notify>) {}

    /// Whether a job the backend follows changed since the last call (a watch stream saw a pod or a
    /// workload change), so that the engine lists now rather than at its next poll. Backends that
    /// learn of changes only by asking say `false`.
    fn take_jobs_changed(&self) -> bool {
        false
    }

    /// Whether a listing reads what the backend keeps in memory (watch streams, the simulator)
    /// rather than asking the scheduler: its time is runguard's own work, not a sign of a controller
    /// under load, so the slow-controller rule does not space listings out for it.
    fn lists_from_cache(&self) -> bool {
        false
    }

    /// Jobs the user asked to watch by reference (`runguard watch JOBID`), besides enrolled ones. The
    /// engine calls this before each listing with the whole current set.
    fn set_watched(&self, _job_refs: &[String]) {}

    /// Those of `nodes` the scheduler says are dead — not responding, down or failed — each with what
    /// it said in plain words (`not responding (sinfo state mix*)`); `None` when the backend cannot tell.
    async fn dead_nodes(
        &self,
        _nodes: &[String],
    ) -> Result<Option<Vec<(String, String)>>, BackendError> {
        Ok(None)
    }

    /// Every node with its partition, state and GPUs, for the capacity report, when the backend can
    /// tell (`None` when it cannot).
    async fn node_inventory(&self) -> Result<Option<crate::capacity::NodeListing>, BackendError> {
        Ok(None)
    }

    /// The nodes that could run job `job_id` (whose saved spec is `spec`) now and ever, when the
    /// backend can tell (`None` when it cannot).
    async fn usable_nodes(
        &self,
        _job_id: &str,
        _spec: &JobSpec,
    ) -> Result<Option<NodeCapacity>, BackendError> {
        Ok(None)
    }
}
