//! How far each log has been read: an attempt's own log, and shared logs (a node's kernel log).

use std::collections::HashMap;

use rusqlite::{OptionalExtension, Params, params};

use super::StoreError;
use super::db::Db;
use crate::model::WorkflowId;

/// Where reading an attempt's log stands.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogPosition {
    /// Byte offset read up to.
    pub offset: u64,
    /// The identity of the file that offset is in.
    pub identity: Option<String>,
    /// Where the attempt's part of a shared log ends (see [`Db::log_end`]).
    pub end: Option<u64>,
}

// Statements are cached: these run for every log on every pass.
impl Db<'_> {
    /// The position of every log of a workflow still watched, by workflow and attempt index: one
    /// query for a pass over every log instead of two a log.
    pub fn log_positions(&self) -> Result<HashMap<(WorkflowId, u32), LogPosition>, StoreError> {
        let rows = self.select_rows(
            "SELECT workflow_id, idx, log_offset, log_identity, log_end FROM attempts \
             WHERE log_path IS NOT NULL \
             AND workflow_id IN (SELECT id FROM workflows WHERE status != 'completed')",
            [],
            |row| {
                let offset: i64 = row.get(2)?;
                let end: Option<i64> = row.get(4)?;
                Ok((
                    (row.get(0)?, row.get(1)?),
                    LogPosition {
                        offset: offset.max(0) as u64,
                        identity: row.get(3)?,
                        end: end.map(|end| end.max(0) as u64),
                    },
                ))
            },
        )?;
        Ok(rows.into_iter().collect())
    }

    /// Byte offset up to which the attempt's log has been read, and the identity of the file it was in.
    pub fn log_offset(
        &self,
        workflow_id: WorkflowId,
        index: u32,
    ) -> Result<(u64, Option<String>), StoreError> {
        self.offset(
            "SELECT log_offset, log_identity FROM attempts WHERE workflow_id = ?1 AND idx = ?2",
            params![workflow_id, index],
        )
    }

    pub fn set_log_offset(
        &self,
        workflow_id: WorkflowId,
        index: u32,
        offset: u64,
        identity: Option<&str>,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("UPDATE attempts SET log_offset = ?3, log_identity = ?4 WHERE workflow_id = ?1 AND idx = ?2")?
            .execute(params![workflow_id, index, offset as i64, identity])?;
        Ok(())
    }

    /// Where the attempt's part of a log it shares with other attempts of its job ends (`None`: it is
    /// the newest attempt, and reads to the end).
    pub fn log_end(&self, workflow_id: WorkflowId, index: u32) -> Result<Option<u64>, StoreError> {
        let end: Option<Option<i64>> = self
            .conn
            .prepare_cached("SELECT log_end FROM attempts WHERE workflow_id = ?1 AND idx = ?2")?
            .query_row(params![workflow_id, index], |row| row.get(0))
            .optional()?;
        Ok(end.flatten().map(|end| end.max(0) as u64))
    }

    pub fn set_log_end(
        &self,
        workflow_id: WorkflowId,
        index: u32,
        end: u64,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached("UPDATE attempts SET log_end = ?3 WHERE workflow_id = ?1 AND idx = ?2")?
            .execute(params![workflow_id, index, end as i64])?;
        Ok(())
    }

    /// The last bytes of the attempt's log read before its offset (empty when none were).
    pub fn log_tail(&self, workflow_id: WorkflowId, index: u32) -> Result<Vec<u8>, StoreError> {
        let tail: Option<Option<Vec<u8>>> = self
            .conn
            .prepare_cached("SELECT log_tail FROM attempts WHERE workflow_id = ?1 AND idx = ?2")?
            .query_row(params![workflow_id, index], |row| row.get(0))
            .optional()?;
        Ok(tail.flatten().unwrap_or_default())
    }

    pub fn set_log_tail(
        &self,
        workflow_id: WorkflowId,
        index: u32,
        tail: &[u8],
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "UPDATE attempts SET log_tail = ?3 WHERE workflow_id = ?1 AND idx = ?2",
            )?
            .execute(params![workflow_id, index, tail])?;
        Ok(())
    }

    /// Offset up to which a shared log (a node's kernel log) has been read.
    pub fn file_offset(&self, path: &str) -> Result<(u64, Option<String>), StoreError> {
        self.offset(
            "SELECT offset, identity FROM log_offsets WHERE path = ?1",
            [path],
        )
    }

    pub fn set_file_offset(
        &self,
        path: &str,
        offset: u64,
        identity: Option<&str>,
    ) -> Result<(), StoreError> {
        self.conn
            .prepare_cached(
                "INSERT INTO log_offsets (path, offset, identity) VALUES (?1, ?2, ?3) \
             ON CONFLICT (path) DO UPDATE SET offset = ?2, identity = ?3",
            )?
            .execute(params![path, offset as i64, identity])?;
        Ok(())
    }

    /// The offset and file identity `sql` selects; nothing read yet when it finds no row.
    fn offset(&self, sql: &str, params: impl Params) -> Result<(u64, Option<String>), StoreError> {
        let found: Option<(i64, Option<String>)> = self
            .conn
            .prepare_cached(sql)?
            .query_row(params, |row| Ok((row.get(0)?, row.get(1)?)))
            .optional()?;
        Ok(found.map_or((0, None), |(offset, identity)| {
            (offset.max(0) as u64, identity)
        }))
    }
}

#[cfg(test)]
mod proptests;
