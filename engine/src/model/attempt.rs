use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::WorkflowId;

/// A job state in the model's vocabulary; the scheduler's own word is kept beside it on the attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Pending,
    Running,
    /// Ranks are exiting; the job is not yet terminal.
    Completing,
    Suspended,
    Completed,
    Failed,
    Cancelled,
    Timeout,
    NodeFail,
    Preempted,
    OutOfMemory,
    /// The scheduler put the job back in the queue (it becomes pending again).
    Requeued,
    /// The backend does not know the job any more.
    Vanished,
    Unknown,
}

impl JobState {
    const ALL: [JobState; 14] = [
        Self::Pending,
        Self::Running,
        Self::Completing,
        Self::Suspended,
        Self::Completed,
        Self::Failed,
        Self::Cancelled,
        Self::Timeout,
        Self::NodeFail,
        Self::Preempted,
        Self::OutOfMemory,
        Self::Requeued,
        Self::Vanished,
        Self::Unknown,
    ];

    /// The model's name for the state, as stored.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Completing => "completing",
            Self::Suspended => "suspended",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
            Self::Timeout => "timeout",
            Self::NodeFail => "node_fail",
            Self::Preempted => "preempted",
            Self::OutOfMemory => "out_of_memory",
            Self::Requeued => "requeued",
            Self::Vanished => "vanished",
            Self::Unknown => "unknown",
        }
    }

    /// Parses a stored name; unknown names map to [`JobState::Unknown`].
    pub fn parse(name: &str) -> Self {
        Self::ALL
            .into_iter()
            .find(|state| state.as_str() == name)
            .unwrap_or(Self::Unknown)
    }

    /// The attempt is over (it will not write more log lines).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed
                | Self::Failed
                | Self::Cancelled
                | Self::Timeout
                | Self::NodeFail
                | Self::Preempted
                | Self::OutOfMemory
                | Self::Vanished
        )
    }

    /// The attempt ended without finishing its work.
    pub fn is_failure(self) -> bool {
        self.is_terminal() && self != Self::Completed
    }
}

/// One scheduler job that ran (or will run) a workflow: the first submission or a requeue of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// The workflow it belongs to.
    pub workflow_id: WorkflowId,
    /// 0 for the first submission, then one more per requeue or resubmission.
    pub index: u32,
    /// Scheduler job id (the same across Slurm requeues, new on resubmission).
    pub job_id: String,
    /// The scheduler's restart count for this job id when the attempt began.
    pub restart_count: u32,
    /// Allocated nodes.
    pub nodes: Vec<String>,
    /// GPUs allocated in total.
    pub gpus: u32,
    /// State in the model's vocabulary.
    pub state: JobState,
    /// State exactly as the scheduler wrote it.
    pub state_raw: String,
    /// The scheduler's reason code (`Resources`, `JobHeldUser`, ...), if any.
    pub reason: Option<String>,
    pub submit_time: Option<DateTime<Utc>>,
    pub start_time: Option<DateTime<Utc>>,
    pub end_time: Option<DateTime<Utc>>,
    /// Process exit code, when the scheduler reported one.
    pub exit_code: Option<i32>,
    /// Nodes this attempt was told to avoid.
    pub excluded_nodes: Vec<String>,
    /// Where the unified log of this attempt is written.
    pub log_path: Option<PathBuf>,
    /// Time of the last log line seen (the heartbeat).
    pub last_log_time: Option<DateTime<Utc>>,
    /// Last training iteration seen in the log.
    pub last_iteration: Option<u64>,
    /// When the iteration count last moved forward (for the progress-based hang rule).
    #[serde(default)]
    pub last_progress_time: Option<DateTime<Utc>>,
    /// Last time anything about this attempt changed.
    pub updated_at: DateTime<Utc>,
}
