//! Workflows: the training runs the user enrolled.

use rusqlite::{Row, params};
use serde::Serialize;

use super::columns::{json, named, time, to_json};
use super::db::{Db, FromRow};
use super::{StoreError, time_to_text};
use crate::model::{BackendKind, Workflow, WorkflowId, WorkflowStatus};

/// Counts shown next to a workflow in tables.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WorkflowSummary {
    pub checkpoints: u32,
    pub last_checkpoint_iteration: Option<u64>,
    pub anomalies: u32,
    pub pending_approvals: u32,
}

impl FromRow for Workflow {
    const COLUMNS: &'static str = "id, name, backend, spec, limits, status, status_reason, \
         succeeded, requeues_used, failures_since_checkpoint, created_at, updated_at";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        Ok(Self {
            id: row.get(0)?,
            name: row.get(1)?,
            backend: named(row, 2, "backend", BackendKind::parse)?,
            spec: json(row, 3)?,
            limits: json(row, 4)?,
            status: named(row, 5, "workflow status", WorkflowStatus::parse)?,
            status_reason: row.get(6)?,
            succeeded: row.get(7)?,
            requeues_used: row.get(8)?,
            failures_since_checkpoint: row.get(9)?,
            created_at: time(row, 10)?,
            updated_at: time(row, 11)?,
        })
    }
}

impl Db<'_> {
    /// Stores a new workflow and returns its id (the `id` field of `workflow` is ignored).
    pub fn insert_workflow(&self, workflow: &Workflow) -> Result<WorkflowId, StoreError> {
        self.execute(
            "INSERT INTO workflows (name, backend, spec, limits, status, status_reason, succeeded, \
             requeues_used, failures_since_checkpoint, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                workflow.name,
                workflow.backend.as_str(),
                to_json(&workflow.spec)?,
                to_json(&workflow.limits)?,
                workflow.status.as_str(),
                workflow.status_reason,
                workflow.succeeded,
                workflow.requeues_used,
                workflow.failures_since_checkpoint,
                time_to_text(workflow.created_at),
                time_to_text(workflow.updated_at),
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn update_workflow(&self, workflow: &Workflow) -> Result<(), StoreError> {
        let changed = self.execute(
            "UPDATE workflows SET name = ?2, spec = ?3, limits = ?4, status = ?5, status_reason = ?6, \
             succeeded = ?7, requeues_used = ?8, failures_since_checkpoint = ?9, updated_at = ?10 \
             WHERE id = ?1",
            params![
                workflow.id,
                workflow.name,
                to_json(&workflow.spec)?,
                to_json(&workflow.limits)?,
                workflow.status.as_str(),
                workflow.status_reason,
                workflow.succeeded,
                workflow.requeues_used,
                workflow.failures_since_checkpoint,
                time_to_text(workflow.updated_at),
            ],
        )?;
        if changed == 0 {
            return Err(StoreError::NotFound {
                what: "workflow",
                id: workflow.id.to_string(),
            });
        }
        Ok(())
    }

    pub fn workflow(&self, id: WorkflowId) -> Result<Option<Workflow>, StoreError> {
        self.select_one("FROM workflows WHERE id = ?1", [id])
    }

    /// Every workflow, oldest first.
    pub fn workflows(&self) -> Result<Vec<Workflow>, StoreError> {
        self.select("FROM workflows ORDER BY id", [])
    }

    /// Forgets every workflow of a backend (a fresh demo replaces the previous demo's records).
    pub fn delete_workflows_of_backend(&self, backend: &str) -> Result<usize, StoreError> {
        Ok(self
            .conn
            .execute("DELETE FROM workflows WHERE backend = ?1", [backend])?)
    }

    pub fn workflow_summary(&self, id: WorkflowId) -> Result<WorkflowSummary, StoreError> {
        let (checkpoints, last): (u32, Option<i64>) = self.query_row(
            "SELECT COUNT(*), MAX(iteration) FROM checkpoints WHERE workflow_id = ?1",
            [id],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        let anomalies: u32 = self.query_row(
            "SELECT COUNT(*) FROM anomalies WHERE workflow_id = ?1",
            [id],
            |row| row.get(0),
        )?;
        let pending_approvals: u32 = self.query_row(
            "SELECT COUNT(*) FROM actions WHERE workflow_id = ?1 AND state = 'proposed'",
            [id],
            |row| row.get(0),
        )?;
        Ok(WorkflowSummary {
            checkpoints,
            last_checkpoint_iteration: last.map(|i| i.max(0) as u64),
            anomalies,
            pending_approvals,
        })
    }
}
