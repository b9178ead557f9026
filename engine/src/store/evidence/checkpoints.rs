//! The checkpoints a run saved.

use chrono::{DateTime, Utc};
use rusqlite::params;

use crate::model::{Checkpoint, WorkflowId};
use crate::store::db::{Db, collect};
use crate::store::{StoreError, time_from_text, time_to_text};

/// How many checkpoints an attempt saved, and when the last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointCount {
    pub workflow_id: WorkflowId,
    pub attempt_index: u32,
    pub count: u32,
    pub last: Option<DateTime<Utc>>,
}

impl Db<'_> {
    pub fn insert_checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO checkpoints (workflow_id, attempt_index, iteration, time, path) \
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                checkpoint.workflow_id,
                checkpoint.attempt_index,
                checkpoint.iteration as i64,
                time_to_text(checkpoint.time),
                checkpoint.path,
            ],
        )?;
        Ok(())
    }

    pub fn checkpoints(&self, workflow_id: WorkflowId) -> Result<Vec<Checkpoint>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT workflow_id, attempt_index, iteration, time, path FROM checkpoints \
             WHERE workflow_id = ?1 ORDER BY id",
        )?;
        collect(stmt.query_map([workflow_id], |row| {
            let time: String = row.get(3)?;
            let iteration: i64 = row.get(2)?;
            let (workflow_id, attempt_index, path) = (row.get(0)?, row.get(1)?, row.get(4)?);
            Ok(time_from_text(&time).map(|time| Checkpoint {
                workflow_id,
                attempt_index,
                iteration: iteration.max(0) as u64,
                time,
                path,
            }))
        })?)
    }

    /// Per attempt: how many checkpoints, and the last one's time.
    pub fn checkpoint_counts(&self) -> Result<Vec<CheckpointCount>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT workflow_id, attempt_index, COUNT(*), MAX(time) FROM checkpoints \
             GROUP BY workflow_id, attempt_index",
        )?;
        collect(stmt.query_map([], |row| {
            let count: i64 = row.get(2)?;
            let last: Option<String> = row.get(3)?;
            let (workflow_id, attempt_index) = (row.get(0)?, row.get(1)?);
            Ok(last
                .map(|text| time_from_text(&text))
                .transpose()
                .map(|last| CheckpointCount {
                    workflow_id,
                    attempt_index,
                    count: count.max(0) as u32,
                    last,
                }))
        })?)
    }
}
