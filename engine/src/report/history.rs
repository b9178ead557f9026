//! Everything recorded about one workflow, read from the store in one go: what the report, the
//! downtime arithmetic and the cockpit's detail panes work from.

use chrono::{DateTime, Utc};

use crate::model::{
    Action, Anomaly, Attempt, Attribution, Checkpoint, JournalEntry, Narrative, ThroughputSample,
    Workflow, WorkflowId,
};
use crate::recover::Policy;
use crate::store::{Db, StoreError};

/// One workflow with its attempts and everything the engine learned and decided about it.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkflowHistory {
    pub workflow: Workflow,
    /// min(system, job) requeues.
    pub requeue_limit: u32,
    pub attempts: Vec<Attempt>,
    pub checkpoints: Vec<Checkpoint>,
    pub throughput: Vec<ThroughputSample>,
    pub anomalies: Vec<Anomaly>,
    pub attributions: Vec<Attribution>,
    pub actions: Vec<Action>,
    pub journal: Vec<JournalEntry>,
    /// Narratives a language model wrote for its failures (never used for a decision).
    pub narratives: Vec<Narrative>,
    /// The node ledger's failure rate for a job of this size (per second), with its basis: what the
    /// checkpoint advisor uses until the run has failed itself.
    pub ledger_rate: Option<(f64, String)>,
}

impl WorkflowHistory {
    /// Reads the workflow `id`; `None` when the store has no such workflow.
    pub fn load(db: &Db<'_>, policy: &Policy, id: WorkflowId) -> Result<Option<Self>, StoreError> {
        let Some(workflow) = db.workflow(id)? else {
            return Ok(None);
        };
        Ok(Some(Self {
            requeue_limit: policy.requeue_limit(&workflow),
            attempts: db.attempts(id)?,
            checkpoints: db.checkpoints(id)?,
            throughput: db.throughput(id)?,
            anomalies: db.anomalies(id)?,
            attributions: db.attributions(id)?,
            actions: db.actions(id)?,
            journal: db.journal_entries(id)?,
            narratives: db.narratives(id)?,
            ledger_rate: ledger_rate(db, workflow.spec.nodes)?,
            workflow,
        }))
    }

    /// The latest time anything about the workflow was recorded.
    pub fn latest_record(&self) -> Option<DateTime<Utc>> {
        let attempts = self.attempts.iter().map(|a| a.updated_at);
        let checkpoints = self.checkpoints.iter().map(|c| c.time);
        let throughput = self.throughput.iter().map(|s| s.time);
        let anomalies = self.anomalies.iter().map(|a| a.time);
        let actions = self.actions.iter().map(|a| a.updated_at);
        std::iter::once(self.workflow.updated_at)
            .chain(attempts)
            .chain(checkpoints)
            .chain(throughput)
            .chain(anomalies)
            .chain(actions)
            .max()
    }
}

/// The ledger's failure rate for a job of `nodes` nodes, as of its latest incident.
fn ledger_rate(db: &Db<'_>, nodes: u32) -> Result<Option<(f64, String)>, StoreError> {
    let known = db.node_records()?.len();
    let Some(latest) = db.node_records()?.iter().map(|r| r.updated_at).max() else {
        return Ok(None);
    };
    let incidents = db.node_incidents_since(latest - chrono::TimeDelta::days(30))?;
    Ok(super::advisor::ledger_rate(
        &incidents, known, nodes, latest,
    ))
}
