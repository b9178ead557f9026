//! The journal: the engine's decisions, executed or not, with their evidence.

use chrono::{DateTime, Utc};
use rusqlite::{Row, params};

use crate::model::{JournalEntry, WorkflowId};
use crate::store::columns::{json, time, to_json};
use crate::store::db::{Db, FromRow};
use crate::store::{StoreError, time_to_text};

impl FromRow for JournalEntry {
    const COLUMNS: &'static str = "id, workflow_id, time, decision, evidence";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        Ok(Self {
            id: row.get(0)?,
            workflow_id: row.get(1)?,
            time: time(row, 2)?,
            decision: row.get(3)?,
            evidence: json(row, 4)?,
        })
    }
}

impl Db<'_> {
    /// Records a decision of the engine, executed or not, with its evidence.
    pub fn journal(
        &self,
        workflow_id: Option<WorkflowId>,
        time: DateTime<Utc>,
        decision: &str,
        evidence: &[String],
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO journal (workflow_id, time, decision, evidence) VALUES (?1, ?2, ?3, ?4)",
            params![
                workflow_id,
                time_to_text(time),
                decision,
                to_json(&evidence)?
            ],
        )?;
        Ok(())
    }

    pub fn journal_entries(
        &self,
        workflow_id: WorkflowId,
    ) -> Result<Vec<JournalEntry>, StoreError> {
        self.select(
            "FROM journal WHERE workflow_id = ?1 ORDER BY id",
            [workflow_id],
        )
    }
}
