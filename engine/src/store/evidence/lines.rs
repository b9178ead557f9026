//! Notable log lines of an attempt.

use rusqlite::{Row, params};

use crate::model::{EvidenceLine, WorkflowId};
use crate::store::columns::time;
use crate::store::db::{Db, FromRow};
use crate::store::{StoreError, time_to_text};

/// Evidence lines kept per attempt; older ones are dropped so a log full of errors cannot grow the store.
const EVIDENCE_LINES_PER_ATTEMPT: i64 = 400;

impl FromRow for EvidenceLine {
    const COLUMNS: &'static str = "time, rank, text";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        Ok(Self {
            time: time(row, 0)?,
            rank: row.get(1)?,
            text: row.get(2)?,
        })
    }
}

impl Db<'_> {
    /// Keeps a notable log line of an attempt, dropping the oldest beyond the per-attempt cap.
    pub fn insert_evidence_line(
        &self,
        workflow_id: WorkflowId,
        attempt_index: u32,
        line: &EvidenceLine,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO evidence_lines (workflow_id, attempt_index, time, rank, text) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![workflow_id, attempt_index, time_to_text(line.time), line.rank, line.text],
        )?;
        let id = self.conn.last_insert_rowid();
        self.execute(
            "DELETE FROM evidence_lines WHERE workflow_id = ?1 AND attempt_index = ?2 AND id <= ?3",
            params![workflow_id, attempt_index, id - EVIDENCE_LINES_PER_ATTEMPT],
        )?;
        Ok(())
    }

    pub fn evidence_lines(
        &self,
        workflow_id: WorkflowId,
        attempt_index: u32,
    ) -> Result<Vec<EvidenceLine>, StoreError> {
        self.select(
            "FROM evidence_lines WHERE workflow_id = ?1 AND attempt_index = ?2 ORDER BY id",
            params![workflow_id, attempt_index],
        )
    }
}
