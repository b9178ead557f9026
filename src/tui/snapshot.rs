//! What the cockpit shows, read from the store in one pass: the UI never waits on the scheduler, only
//! on this local read, and the same read serves the process that runs the engine and one that only views.

use chrono::{DateTime, Utc};

use crate::model::{
    Action, ActionState, Anomaly, Attempt, Attribution, Checkpoint, JournalEntry, Notification,
    ThroughputSample, Workflow, WorkflowId,
};
use crate::recover::Policy;
use crate::store::{Db, StoreError};

/// One row of the overview: an attempt with what the cockpit shows beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRow {
    pub workflow_id: WorkflowId,
    pub workflow: String,
    pub user: String,
    pub partition: Option<String>,
    pub backend: String,
    pub attempt: Attempt,
    /// Checkpoints saved during this attempt, and the last one's time.
    pub checkpoints: u32,
    pub last_checkpoint: Option<DateTime<Utc>>,
    /// Anomalies of this attempt, one line each.
    pub anomalies: Vec<String>,
    /// The attribution of this attempt's failure, one line.
    pub attribution: Option<String>,
}

/// Everything known about one workflow, for the details, charts and timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowDetail {
    pub workflow: Workflow,
    pub requeue_limit: u32,
    pub attempts: Vec<Attempt>,
    pub checkpoints: Vec<Checkpoint>,
    pub throughput: Vec<ThroughputSample>,
    pub anomalies: Vec<Anomaly>,
    pub attributions: Vec<Attribution>,
    pub actions: Vec<Action>,
    pub journal: Vec<JournalEntry>,
}

/// A proposed action waiting for a human.
#[derive(Debug, Clone, PartialEq)]
pub struct Approval {
    pub action: Action,
    pub workflow: String,
    /// The evidence of the failure it answers.
    pub evidence: Vec<String>,
}

/// The store as the cockpit shows it at one moment.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Snapshot {
    pub rows: Vec<AttemptRow>,
    pub details: Vec<WorkflowDetail>,
    pub approvals: Vec<Approval>,
    /// Recently executed or failed actions, newest first (their results).
    pub recent_actions: Vec<Action>,
    pub notifications: Vec<Notification>,
    pub loaded_at: Option<DateTime<Utc>>,
}

impl Snapshot {
    /// Reads everything the cockpit shows.
    pub fn load(db: &Db<'_>, policy: &Policy, now: DateTime<Utc>) -> Result<Self, StoreError> {
        let mut snapshot = Snapshot {
            loaded_at: Some(now),
            ..Snapshot::default()
        };
        for workflow in db.workflows()? {
            let detail = WorkflowDetail {
                requeue_limit: policy.requeue_limit(&workflow),
                attempts: db.attempts(workflow.id)?,
                checkpoints: db.checkpoints(workflow.id)?,
                throughput: db.throughput(workflow.id)?,
                anomalies: db.anomalies(workflow.id)?,
                attributions: db.attributions(workflow.id)?,
                actions: db.actions(workflow.id)?,
                journal: db.journal_entries(workflow.id)?,
                workflow,
            };
            for attempt in &detail.attempts {
                snapshot.rows.push(row(&detail, attempt));
            }
            for action in &detail.actions {
                match action.state {
                    ActionState::Proposed => snapshot.approvals.push(Approval {
                        action: action.clone(),
                        workflow: detail.workflow.name.clone(),
                        evidence: detail
                            .attributions
                            .iter()
                            .rev()
                            .find(|a| a.attempt_index == action.attempt_index)
                            .map(|a| a.evidence.clone())
                            .unwrap_or_default(),
                    }),
                    ActionState::Done | ActionState::Failed | ActionState::Rejected => {
                        snapshot.recent_actions.push(action.clone())
                    }
                    _ => {}
                }
            }
            snapshot.details.push(detail);
        }
        snapshot
            .recent_actions
            .sort_by_key(|action| std::cmp::Reverse(action.updated_at));
        snapshot.recent_actions.truncate(50);
        snapshot.notifications = db.notifications(500)?;
        Ok(snapshot)
    }

    pub fn detail(&self, workflow_id: WorkflowId) -> Option<&WorkflowDetail> {
        self.details.iter().find(|d| d.workflow.id == workflow_id)
    }
}

fn row(detail: &WorkflowDetail, attempt: &Attempt) -> AttemptRow {
    let checkpoints: Vec<&Checkpoint> = detail
        .checkpoints
        .iter()
        .filter(|c| c.attempt_index == attempt.index)
        .collect();
    AttemptRow {
        workflow_id: detail.workflow.id,
        workflow: detail.workflow.name.clone(),
        user: detail.workflow.spec.user.clone(),
        partition: detail.workflow.spec.partition.clone(),
        backend: detail.workflow.backend.clone(),
        checkpoints: checkpoints.len() as u32,
        last_checkpoint: checkpoints.iter().map(|c| c.time).max(),
        anomalies: detail
            .anomalies
            .iter()
            .filter(|a| a.attempt_index == attempt.index)
            .map(|a| format!("{}: {}", a.kind.as_str(), a.summary))
            .collect(),
        attribution: detail
            .attributions
            .iter()
            .rev()
            .find(|a| a.attempt_index == attempt.index)
            .map(|a| match &a.culprit.node {
                Some(node) => format!("{} on {node} ({:.0}%)", a.category, a.confidence * 100.0),
                None => format!("{} ({:.0}%)", a.category, a.confidence * 100.0),
            }),
        attempt: attempt.clone(),
    }
}
