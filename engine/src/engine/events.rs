//! What the engine tells its frontends, on a broadcast channel.

use serde::Serialize;

use crate::model::{
    ActionId, ActionKind, ActionState, AnomalyKind, Component, Culprit, JobState, WorkflowId,
    WorkflowStatus,
};

/// One thing that happened, in the order it happened. Frontends render these; headless mode logs them.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum EngineEvent {
    WorkflowEnrolled {
        workflow_id: WorkflowId,
        name: String,
        job_id: String,
    },
    AttemptStarted {
        workflow_id: WorkflowId,
        attempt_index: u32,
        job_id: String,
    },
    AttemptStateChanged {
        workflow_id: WorkflowId,
        attempt_index: u32,
        job_id: String,
        state: JobState,
        state_raw: String,
        reason: Option<String>,
        nodes: Vec<String>,
    },
    CheckpointSaved {
        workflow_id: WorkflowId,
        attempt_index: u32,
        iteration: u64,
        path: String,
    },
    AnomalyRaised {
        workflow_id: WorkflowId,
        attempt_index: u32,
        kind: AnomalyKind,
        summary: String,
    },
    Attributed {
        workflow_id: WorkflowId,
        attempt_index: u32,
        category: String,
        component: Component,
        culprit: Culprit,
        confidence: f64,
        recoverable: bool,
    },
    ActionPlanned {
        action_id: ActionId,
        workflow_id: WorkflowId,
        kind: ActionKind,
        state: ActionState,
        permitted: bool,
        why: String,
        command: String,
    },
    ActionFinished {
        action_id: ActionId,
        workflow_id: WorkflowId,
        kind: ActionKind,
        state: ActionState,
        result: String,
    },
    WorkflowStatusChanged {
        workflow_id: WorkflowId,
        status: WorkflowStatus,
        reason: Option<String>,
    },
    /// The scheduler did not answer; the engine waits `retry_in_secs` before calling it again and runs
    /// no action meanwhile.
    SchedulerUnreachable {
        since: chrono::DateTime<chrono::Utc>,
        failures: u32,
        retry_in_secs: f64,
        error: String,
    },
    /// The scheduler answers again after an outage.
    SchedulerReachable { down_secs: i64 },
    /// Input that was skipped or a backend call that failed; the engine carries on.
    Warning { kind: String, message: String },
    /// The node ledger moved a node to another state.
    NodeStateChanged {
        node: String,
        state: crate::model::NodeState,
        reason: String,
    },
}

impl EngineEvent {
    /// A short name for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Self::WorkflowEnrolled { .. } => "workflow_enrolled",
            Self::AttemptStarted { .. } => "attempt_started",
            Self::AttemptStateChanged { .. } => "attempt_state_changed",
            Self::CheckpointSaved { .. } => "checkpoint_saved",
            Self::AnomalyRaised { .. } => "anomaly_raised",
            Self::Attributed { .. } => "attributed",
            Self::ActionPlanned { .. } => "action_planned",
            Self::ActionFinished { .. } => "action_finished",
            Self::WorkflowStatusChanged { .. } => "workflow_status_changed",
            Self::SchedulerUnreachable { .. } => "scheduler_unreachable",
            Self::SchedulerReachable { .. } => "scheduler_reachable",
            Self::Warning { .. } => "warning",
            Self::NodeStateChanged { .. } => "node_state_changed",
        }
    }
}
