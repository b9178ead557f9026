//! The journal: the engine's decisions, executed or not, with their evidence.

use chrono::{DateTime, Utc};
use rusqlite::params;

use crate::model::{JournalEntry, WorkflowId};
use crate::store::columns::{from_json, to_json};
use crate::store::db::{Db, collect};
use crate::store::{StoreError, time_from_text, time_to_text};

impl Db<'_> {
    /// Records a decision of the engine, executed or not, with its evidence.
    pub fn journal(
        &self,
        workflow_id: Option<WorkflowId>,
        time: DateTime<Utc>,
        decision: &str,
        evidence: &[String],
    ) -> Result<(), StoreError> {
        self.conn.execute(
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
        let mut stmt = self.conn.prepare(
            "SELECT id, workflow_id, time, decision, evidence FROM journal WHERE workflow_id = ?1 ORDER BY id",
        )?;
        collect(stmt.query_map([workflow_id], |row| {
            let time: String = row.get(2)?;
            let evidence: String = row.get(4)?;
            let (id, workflow_id, decision) = (row.get(0)?, row.get(1)?, row.get(3)?);
            Ok((|| {
                Ok(JournalEntry {
                    id,
                    workflow_id,
                    time: time_from_text(&time)?,
                    decision,
                    evidence: from_json(&evidence)?,
                })
            })())
        })?)
    }
}
