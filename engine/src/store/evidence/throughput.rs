//! Training throughput samples.

use rusqlite::{Row, params};

use crate::model::{ThroughputSample, WorkflowId};
use crate::store::db::{Db, collect};
use crate::store::{StoreError, time_from_text, time_to_text};

/// A row of `SELECT workflow_id, attempt_index, time, iteration, tflops_per_gpu, rank, node`.
fn throughput_from_row(row: &Row<'_>) -> rusqlite::Result<Result<ThroughputSample, StoreError>> {
    let time: String = row.get(2)?;
    let iteration: i64 = row.get(3)?;
    let (workflow_id, attempt_index, tflops_per_gpu, rank, node) = (
        row.get(0)?,
        row.get(1)?,
        row.get(4)?,
        row.get(5)?,
        row.get(6)?,
    );
    Ok(time_from_text(&time).map(|time| ThroughputSample {
        workflow_id,
        attempt_index,
        time,
        iteration: iteration.max(0) as u64,
        tflops_per_gpu,
        rank,
        node,
    }))
}

impl Db<'_> {
    pub fn insert_throughput(&self, sample: &ThroughputSample) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO throughput (workflow_id, attempt_index, time, iteration, tflops_per_gpu, rank, node) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                sample.workflow_id,
                sample.attempt_index,
                time_to_text(sample.time),
                sample.iteration as i64,
                sample.tflops_per_gpu,
                sample.rank,
                sample.node,
            ],
        )?;
        Ok(())
    }

    /// The first `head` and the last `tail` throughput samples of one attempt, each in time order:
    /// enough for a baseline and a recent window without reading a long run's whole history.
    pub fn throughput_window(
        &self,
        workflow_id: WorkflowId,
        attempt_index: u32,
        head: usize,
        tail: usize,
    ) -> Result<(Vec<ThroughputSample>, Vec<ThroughputSample>), StoreError> {
        let select = |order: &str, limit: usize| -> Result<Vec<ThroughputSample>, StoreError> {
            let mut stmt = self.conn.prepare(&format!(
                "SELECT workflow_id, attempt_index, time, iteration, tflops_per_gpu, rank, node \
                 FROM throughput WHERE workflow_id = ?1 AND attempt_index = ?2 ORDER BY id {order} LIMIT ?3"
            ))?;
            collect(stmt.query_map(
                params![workflow_id, attempt_index, limit as i64],
                throughput_from_row,
            )?)
        };
        let first = select("ASC", head)?;
        let mut last = select("DESC", tail)?;
        last.reverse();
        Ok((first, last))
    }

    pub fn throughput(&self, workflow_id: WorkflowId) -> Result<Vec<ThroughputSample>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT workflow_id, attempt_index, time, iteration, tflops_per_gpu, rank, node \
             FROM throughput WHERE workflow_id = ?1 ORDER BY id",
        )?;
        collect(stmt.query_map([workflow_id], throughput_from_row)?)
    }
}
