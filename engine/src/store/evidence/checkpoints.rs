//! The checkpoints a run saved.

use chrono::{DateTime, Utc};
use rusqlite::{Row, params};

use crate::model::{Checkpoint, WorkflowId};
use crate::store::columns::{opt_time, time};
use crate::store::db::{Db, FromRow};
use crate::store::{StoreError, time_to_text};

/// How many checkpoints an attempt saved, and when the last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointCount {
    pub workflow_id: WorkflowId,
    pub attempt_index: u32,
    pub count: u32,
    pub last: Option<DateTime<Utc>>,
}

/// One row of the per-attempt aggregate over the checkpoints table.
impl FromRow for CheckpointCount {
    const COLUMNS: &'static str = "workflow_id, attempt_index, COUNT(*), MAX(time)";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        let count: i64 = row.get(2)?;
        Ok(Self {
            workflow_id: row.get(0)?,
            attempt_index: row.get(1)?,
            count: count.max(0) as u32,
            last: opt_time(row, 3)?,
        })
    }
}

impl FromRow for Checkpoint {
    const COLUMNS: &'static str = "workflow_id, attempt_index, iteration, time, path";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        let iteration: i64 = row.get(2)?;
        Ok(Self {
            workflow_id: row.get(0)?,
            attempt_index: row.get(1)?,
            iteration: iteration.max(0) as u64,
            time: time(row, 3)?,
            path: row.get(4)?,
        })
    }
}

impl Db<'_> {
    pub fn insert_checkpoint(&self, checkpoint: &Checkpoint) -> Result<(), StoreError> {
        self.execute(
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
        self.select(
            "FROM checkpoints WHERE workflow_id = ?1 ORDER BY id",
            [workflow_id],
        )
    }

    /// Per attempt: how many checkpoints, and the last one's time.
    pub fn checkpoint_counts(&self) -> Result<Vec<CheckpointCount>, StoreError> {
        self.select("FROM checkpoints GROUP BY workflow_id, attempt_index", [])
    }
}
