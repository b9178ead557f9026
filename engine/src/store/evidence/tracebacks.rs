//! Python tracebacks of an attempt, each kept as one block.

use rusqlite::{OptionalExtension, params};

use crate::model::WorkflowId;
use crate::store::StoreError;
use crate::store::columns::{from_json, to_json};
use crate::store::db::Db;

impl Db<'_> {
    /// Keeps one Python traceback of an attempt as a block: its lines, rank and exception.
    pub fn insert_traceback(
        &self,
        workflow_id: WorkflowId,
        attempt_index: u32,
        rank: Option<u32>,
        exception: &str,
        message: &str,
        lines: &[String],
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO tracebacks (workflow_id, attempt_index, rank, exception, message, lines) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                workflow_id,
                attempt_index,
                rank,
                exception,
                message,
                to_json(&lines)?
            ],
        )?;
        Ok(())
    }

    /// The lines of the attempt's last traceback, rank-labelled, if it had one.
    pub fn last_traceback(
        &self,
        workflow_id: WorkflowId,
        attempt_index: u32,
    ) -> Result<Option<Vec<String>>, StoreError> {
        let found: Option<(Option<u32>, String)> = self
            .query_row(
                "SELECT rank, lines FROM tracebacks WHERE workflow_id = ?1 AND attempt_index = ?2 \
                 ORDER BY id DESC LIMIT 1",
                params![workflow_id, attempt_index],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()?;
        let Some((rank, lines)) = found else {
            return Ok(None);
        };
        let lines: Vec<String> = from_json(&lines)?;
        Ok(Some(
            lines
                .into_iter()
                .map(|line| match rank {
                    Some(rank) => format!("{rank}: {line}"),
                    None => line,
                })
                .collect(),
        ))
    }
}
