//! What the cockpit shows, read from the store in one pass: the UI never waits on the scheduler, only
//! on this local read, and the same read serves the process that runs the engine and one that only views.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use runguard_engine::model::BackendKind;
use runguard_engine::model::{
    Action, ActionState, Attempt, Attribution, Notification, Workflow, WorkflowId,
};
use runguard_engine::recover::Policy;
use runguard_engine::report::WorkflowHistory;
use runguard_engine::store::{ChangeMark, CheckpointCount, Db, Store, StoreError};

use super::app::RowOrder;

/// One row of the overview: an attempt with what the cockpit shows beside it.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRow {
    pub workflow_id: WorkflowId,
    pub workflow: String,
    pub user: String,
    pub partition: Option<String>,
    pub backend: BackendKind,
    pub attempt: Attempt,
    /// Checkpoints saved during this attempt, and the last one's time.
    pub checkpoints: u32,
    pub last_checkpoint: Option<DateTime<Utc>>,
    /// Anomalies of this attempt, one line each.
    pub anomalies: Vec<String>,
    /// The attribution of this attempt's failure, one line.
    pub attribution: Option<String>,
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
    /// Everything about the workflows the details, charts, timeline and report show.
    pub details: Vec<WorkflowHistory>,
    pub approvals: Vec<Approval>,
    /// Recently executed or failed actions, newest first (their results).
    pub recent_actions: Vec<Action>,
    pub notifications: Vec<Notification>,
    /// The node ledger, quarantined nodes first.
    pub nodes: Vec<crate::nodes::NodeView>,
    /// The capacity report, read while its pane is shown (see `panes::capacity::ensure`).
    pub capacity: Option<std::sync::Arc<runguard_engine::capacity::CapacityReport>>,
    /// Multiphase workflows with their phases (the details pane lists a phase's siblings).
    pub phases: Vec<crate::phases::MultiphaseView>,
    /// The store's change mark when this was read (see [`Snapshot::reload`]).
    pub mark: Option<ChangeMark>,
    /// The overview's order of `rows`, computed when first asked for.
    pub order: RowOrder,
}

impl Snapshot {
    /// Reads what the overview, the approvals and the notifications show, in a few whole-table reads,
    /// and everything about the workflow `focus` (the details, charts and timeline show one at a time).
    pub fn load(
        db: &Db<'_>,
        policy: &Policy,
        focus: Option<WorkflowId>,
    ) -> Result<Self, StoreError> {
        // One read transaction: the tables agree with each other, and the locks are taken once.
        db.reading(|db| Self::read(db, policy, focus))
    }

    fn read(db: &Db<'_>, policy: &Policy, focus: Option<WorkflowId>) -> Result<Self, StoreError> {
        let workflows: HashMap<WorkflowId, Workflow> =
            db.workflows()?.into_iter().map(|w| (w.id, w)).collect();
        let checkpoints: HashMap<(WorkflowId, u32), CheckpointCount> = db
            .checkpoint_counts()?
            .into_iter()
            .map(|counted| ((counted.workflow_id, counted.attempt_index), counted))
            .collect();
        let mut anomalies: HashMap<(WorkflowId, u32), Vec<String>> = HashMap::new();
        for anomaly in db.all_anomalies()? {
            anomalies
                .entry((anomaly.workflow_id, anomaly.attempt_index))
                .or_default()
                .push(format!("{}: {}", anomaly.kind.as_str(), anomaly.summary));
        }
        let mut attributions: HashMap<(WorkflowId, u32), Attribution> = HashMap::new();
        for attribution in db.all_attributions()? {
            attributions.insert(
                (attribution.workflow_id, attribution.attempt_index),
                attribution,
            );
        }
        let mut rows = Vec::new();
        for attempt in db.all_attempts()? {
            let Some(workflow) = workflows.get(&attempt.workflow_id) else {
                continue;
            };
            let key = (attempt.workflow_id, attempt.index);
            let (count, last) = checkpoints
                .get(&key)
                .map_or((0, None), |counted| (counted.count, counted.last));
            rows.push(AttemptRow {
                workflow_id: workflow.id,
                workflow: workflow.name.clone(),
                user: workflow.spec.user.clone(),
                partition: workflow.spec.partition.clone(),
                backend: workflow.backend,
                checkpoints: count,
                last_checkpoint: last,
                anomalies: anomalies.remove(&key).unwrap_or_default(),
                attribution: attributions.get(&key).map(attribution_line),
                attempt,
            });
        }
        let approvals = db
            .actions_in_state(ActionState::Proposed)?
            .into_iter()
            .map(|action| Approval {
                workflow: workflows
                    .get(&action.workflow_id)
                    .map(|w| w.name.clone())
                    .unwrap_or_default(),
                evidence: attributions
                    .get(&(action.workflow_id, action.attempt_index))
                    .map(|a| a.evidence.clone())
                    .unwrap_or_default(),
                action,
            })
            .collect();
        let mut snapshot = Snapshot {
            rows,
            details: Vec::new(),
            approvals,
            recent_actions: db.recent_finished_actions(50)?,
            notifications: db.notifications(500)?,
            nodes: load_nodes(db)?,
            capacity: None,
            phases: crate::phases::views(db)?,
            mark: None,
            order: RowOrder::default(),
        };
        if let Some(id) = focus {
            snapshot.ensure_detail(db, policy, id)?;
        }
        Ok(snapshot)
    }

    /// Reads the store again, as the cockpit does once a second, unless nothing in it changed since
    /// this snapshot was read: then only the workflow `focus` is read if it is not yet. The capacity
    /// report is kept either way (its pane reads it when shown). Whether the store was read.
    pub fn reload(
        &mut self,
        store: &Store,
        policy: &Policy,
        focus: Option<WorkflowId>,
    ) -> Result<bool, StoreError> {
        // Taken before the read: a change committed during the read moves it, and the next reload reads.
        let mark = store.change_mark()?;
        if self.mark == Some(mark) {
            if let Some(id) = focus {
                self.ensure_detail(&store.db(), policy, id)?;
            }
            return Ok(false);
        }
        let mut fresh = Self::load(&store.db(), policy, focus)?;
        fresh.mark = Some(mark);
        fresh.capacity = self.capacity.take();
        *self = fresh;
        Ok(true)
    }

    /// Reads everything about one workflow, unless it is read already.
    pub fn ensure_detail(
        &mut self,
        db: &Db<'_>,
        policy: &Policy,
        workflow_id: WorkflowId,
    ) -> Result<(), StoreError> {
        if self.detail(workflow_id).is_some() {
            return Ok(());
        }
        if let Some(history) = WorkflowHistory::load(db, policy, workflow_id)? {
            self.details.push(history);
        }
        Ok(())
    }

    pub fn detail(&self, workflow_id: WorkflowId) -> Option<&WorkflowHistory> {
        self.details.iter().find(|d| d.workflow.id == workflow_id)
    }
}

/// The ledger's nodes, scored as of its last change (the engine's clock, simulated or real).
fn load_nodes(db: &Db<'_>) -> Result<Vec<crate::nodes::NodeView>, StoreError> {
    let latest = db
        .node_records()?
        .iter()
        .map(|record| record.updated_at)
        .max();
    match latest {
        Some(now) => crate::nodes::report(db, now),
        None => Ok(Vec::new()),
    }
}

/// An attribution as one line of the overview.
fn attribution_line(attribution: &Attribution) -> String {
    match &attribution.culprit.node {
        Some(node) => format!(
            "{} on {node} ({:.0}%)",
            attribution.category,
            attribution.confidence * 100.0
        ),
        None => format!(
            "{} ({:.0}%)",
            attribution.category,
            attribution.confidence * 100.0
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runguard_engine::config::Config;
    use runguard_engine::model::{BackendKind, JobSpec, JobState, RecoveryLimits};

    fn attempt(workflow_id: WorkflowId, index: u32, at: DateTime<Utc>) -> Attempt {
        Attempt {
            workflow_id,
            index,
            job_id: format!("{}", 100 + index),
            restart_count: index,
            nodes: vec!["n1".into()],
            gpus: 8,
            state: JobState::Running,
            state_raw: "RUNNING".into(),
            reason: None,
            submit_time: Some(at),
            start_time: Some(at),
            end_time: None,
            exit_code: None,
            excluded_nodes: Vec::new(),
            log_path: None,
            last_log_time: None,
            last_iteration: None,
            last_progress_time: None,
            updated_at: at,
        }
    }

    #[test]
    fn a_reload_reads_the_store_only_after_a_change_by_another_connection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("runguard.sqlite");
        let mut engine = Store::open(&path).unwrap();
        let cockpit = Store::open(&path).unwrap();
        let now = Utc::now();
        let id = engine
            .write(|db| {
                let id = db.insert_workflow(&Workflow::enrolled(
                    "run",
                    BackendKind::Sim,
                    JobSpec::default(),
                    RecoveryLimits::default(),
                    now,
                ))?;
                db.save_attempt(&attempt(id, 0, now))?;
                Ok(id)
            })
            .unwrap();
        let policy = Policy::from_config(&Config::default().recovery, true);
        let mut snapshot = Snapshot::load(&cockpit.db(), &policy, None).unwrap();
        assert!(
            snapshot.reload(&cockpit, &policy, None).unwrap(),
            "no mark yet"
        );
        assert!(!snapshot.reload(&cockpit, &policy, Some(id)).unwrap());
        assert!(
            snapshot.detail(id).is_some(),
            "the focus is read all the same"
        );
        engine
            .write(|db| db.save_attempt(&attempt(id, 1, now)))
            .unwrap();
        assert!(snapshot.reload(&cockpit, &policy, None).unwrap());
        assert_eq!(snapshot.rows.len(), 2);
        assert!(!snapshot.reload(&cockpit, &policy, None).unwrap());
    }
}
