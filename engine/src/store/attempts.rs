//! Attempts: the scheduler jobs that ran a workflow.

use std::path::PathBuf;

use rusqlite::{OptionalExtension, Row, params};

use super::columns::{json, opt_time, time, to_json};
use super::db::{Db, FromRow};
use chrono::{DateTime, Utc};

use super::{StoreError, time_to_text};
use crate::model::{Attempt, JobState, WorkflowId};

impl FromRow for Attempt {
    const COLUMNS: &'static str = "workflow_id, idx, job_id, restart_count, nodes, gpus, state, \
         state_raw, reason, submit_time, start_time, end_time, exit_code, excluded_nodes, log_path, \
         last_log_time, last_iteration, updated_at, last_progress_time";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        let state: String = row.get(6)?;
        let log_path: Option<String> = row.get(14)?;
        let last_iteration: Option<i64> = row.get(16)?;
        Ok(Self {
            workflow_id: row.get(0)?,
            index: row.get(1)?,
            job_id: row.get(2)?,
            restart_count: row.get(3)?,
            nodes: json(row, 4)?,
            gpus: row.get(5)?,
            state: JobState::parse(&state),
            state_raw: row.get(7)?,
            reason: row.get(8)?,
            submit_time: opt_time(row, 9)?,
            start_time: opt_time(row, 10)?,
            end_time: opt_time(row, 11)?,
            exit_code: row.get(12)?,
            excluded_nodes: json(row, 13)?,
            log_path: log_path.map(PathBuf::from),
            last_log_time: opt_time(row, 15)?,
            last_iteration: last_iteration.map(|i| i.max(0) as u64),
            updated_at: time(row, 17)?,
            last_progress_time: opt_time(row, 18)?,
        })
    }
}

impl Db<'_> {
    /// Inserts or replaces an attempt (keyed by workflow and index), keeping its log offset and handled mark.
    pub fn save_attempt(&self, attempt: &Attempt) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO attempts (workflow_id, idx, job_id, restart_count, nodes, gpus, state, state_raw, \
             reason, submit_time, start_time, end_time, exit_code, excluded_nodes, log_path, last_log_time, \
             last_iteration, updated_at, last_progress_time) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19) \
             ON CONFLICT (workflow_id, idx) DO UPDATE SET job_id = ?3, restart_count = ?4, nodes = ?5, \
             gpus = ?6, state = ?7, state_raw = ?8, reason = ?9, submit_time = ?10, start_time = ?11, \
             end_time = ?12, exit_code = ?13, excluded_nodes = ?14, log_path = ?15, last_log_time = ?16, \
             last_iteration = ?17, updated_at = ?18, last_progress_time = ?19",
            params![
                attempt.workflow_id,
                attempt.index,
                attempt.job_id,
                attempt.restart_count,
                to_json(&attempt.nodes)?,
                attempt.gpus,
                attempt.state.as_str(),
                attempt.state_raw,
                attempt.reason,
                attempt.submit_time.map(time_to_text),
                attempt.start_time.map(time_to_text),
                attempt.end_time.map(time_to_text),
                attempt.exit_code,
                to_json(&attempt.excluded_nodes)?,
                attempt
                    .log_path
                    .as_ref()
                    .map(|path| path.to_string_lossy().into_owned()),
                attempt.last_log_time.map(time_to_text),
                attempt.last_iteration.map(|i| i as i64),
                time_to_text(attempt.updated_at),
                attempt.last_progress_time.map(time_to_text),
            ],
        )?;
        Ok(())
    }

    /// What reading an attempt's log told: when a line last arrived (`heard`), and the iteration it
    /// reached, which moves the progress clock to `now` only when it is beyond the one stored. One
    /// narrow update: it runs for every log read, every pass.
    pub fn note_log_activity(
        &self,
        workflow_id: WorkflowId,
        index: u32,
        heard: Option<DateTime<Utc>>,
        iteration: Option<u64>,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        if heard.is_none() && iteration.is_none() {
            return Ok(());
        }
        // SQLite evaluates every SET against the row as it was, so the comparison reads the old
        // iteration in both places.
        self.execute(
            "UPDATE attempts SET last_log_time = COALESCE(?3, last_log_time), \
             last_progress_time = CASE WHEN ?4 IS NOT NULL AND (last_iteration IS NULL OR ?4 > last_iteration) \
             THEN ?5 ELSE last_progress_time END, \
             last_iteration = CASE WHEN ?4 IS NOT NULL AND (last_iteration IS NULL OR ?4 > last_iteration) \
             THEN ?4 ELSE last_iteration END \
             WHERE workflow_id = ?1 AND idx = ?2",
            params![
                workflow_id,
                index,
                heard.map(time_to_text),
                iteration.map(|i| i as i64),
                time_to_text(now),
            ],
        )?;
        Ok(())
    }

    /// A workflow's attempts, first to last.
    pub fn attempts(&self, workflow_id: WorkflowId) -> Result<Vec<Attempt>, StoreError> {
        self.select(
            "FROM attempts WHERE workflow_id = ?1 ORDER BY idx",
            [workflow_id],
        )
    }

    /// Every attempt of every workflow still watched (not completed), by workflow and index: one read
    /// for a pass over the logs.
    pub fn active_attempts(&self) -> Result<Vec<Attempt>, StoreError> {
        self.select(
            "FROM attempts WHERE workflow_id IN (SELECT id FROM workflows WHERE status != 'completed') \
             ORDER BY workflow_id, idx",
            [],
        )
    }

    /// Every attempt of every workflow, by workflow and index (one read for a whole overview).
    pub fn all_attempts(&self) -> Result<Vec<Attempt>, StoreError> {
        self.select("FROM attempts ORDER BY workflow_id, idx", [])
    }

    /// The latest attempt that ran as `job_id` on `backend`.
    pub fn attempt_by_job(
        &self,
        backend: &str,
        job_id: &str,
    ) -> Result<Option<Attempt>, StoreError> {
        self.select_one(
            "FROM (SELECT a.* FROM attempts a JOIN workflows w ON w.id = a.workflow_id \
             WHERE w.backend = ?1 AND a.job_id = ?2 ORDER BY a.idx DESC LIMIT 1)",
            params![backend, job_id],
        )
    }

    /// Whether the engine already acted on this attempt's failure (so a restart does not act again).
    pub fn attempt_handled(&self, workflow_id: WorkflowId, index: u32) -> Result<bool, StoreError> {
        let handled: Option<bool> = self
            .query_row(
                "SELECT handled FROM attempts WHERE workflow_id = ?1 AND idx = ?2",
                params![workflow_id, index],
                |row| row.get(0),
            )
            .optional()?;
        Ok(handled.unwrap_or(false))
    }

    pub fn mark_attempt_handled(
        &self,
        workflow_id: WorkflowId,
        index: u32,
    ) -> Result<(), StoreError> {
        self.execute(
            "UPDATE attempts SET handled = 1 WHERE workflow_id = ?1 AND idx = ?2",
            params![workflow_id, index],
        )?;
        Ok(())
    }
}
