//! Training throughput samples.

use rusqlite::{Row, params};

use crate::model::{ThroughputSample, WorkflowId};
use crate::store::columns::time;
use crate::store::db::{Db, FromRow};
use crate::store::{StoreError, time_to_text};

impl FromRow for ThroughputSample {
    const COLUMNS: &'static str =
        "workflow_id, attempt_index, time, iteration, tflops_per_gpu, rank, node";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        let iteration: i64 = row.get(3)?;
        Ok(Self {
            workflow_id: row.get(0)?,
            attempt_index: row.get(1)?,
            time: time(row, 2)?,
            iteration: iteration.max(0) as u64,
            tflops_per_gpu: row.get(4)?,
            rank: row.get(5)?,
            node: row.get(6)?,
        })
    }
}

impl Db<'_> {
    pub fn insert_throughput(&self, sample: &ThroughputSample) -> Result<(), StoreError> {
        self.execute(
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
            self.select(
                &format!(
                    "FROM throughput WHERE workflow_id = ?1 AND attempt_index = ?2 \
                     ORDER BY id {order} LIMIT ?3"
                ),
                params![workflow_id, attempt_index, limit as i64],
            )
        };
        let first = select("ASC", head)?;
        let mut last = select("DESC", tail)?;
        last.reverse();
        Ok((first, last))
    }

    pub fn throughput(&self, workflow_id: WorkflowId) -> Result<Vec<ThroughputSample>, StoreError> {
        self.select(
            "FROM throughput WHERE workflow_id = ?1 ORDER BY id",
            [workflow_id],
        )
    }
}
