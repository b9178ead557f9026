//! Attempts: the scheduler jobs that ran a workflow.

use std::path::PathBuf;

use rusqlite::{OptionalExtension, Row, params};

use super::columns::{from_json, opt_time, to_json};
use super::db::{Db, collect};
use super::{StoreError, time_from_text, time_to_text};
use crate::model::{Attempt, JobState, WorkflowId};

const ATTEMPT_COLUMNS: &str = "workflow_id, idx, job_id, restart_count, nodes, gpus, state, state_raw, \
     reason, submit_time, start_time, end_time, exit_code, excluded_nodes, log_path, last_log_time, \
     last_iteration, updated_at, last_progress_time";

fn attempt_from_row(row: &Row<'_>) -> rusqlite::Result<Result<Attempt, StoreError>> {
    let nodes: String = row.get(4)?;
    let state: String = row.get(6)?;
    let excluded: String = row.get(13)?;
    let submit: Option<String> = row.get(9)?;
    let start: Option<String> = row.get(10)?;
    let end: Option<String> = row.get(11)?;
    let last_log: Option<String> = row.get(15)?;
    let updated: String = row.get(17)?;
    let last_progress: Option<String> = row.get(18)?;
    let log_path: Option<String> = row.get(14)?;
    let last_iteration: Option<i64> = row.get(16)?;
    let (workflow_id, index, job_id, restart_count, gpus, state_raw, reason, exit_code) = (
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(5)?,
        row.get(7)?,
        row.get(8)?,
        row.get(12)?,
    );
    Ok((|| {
        Ok(Attempt {
            workflow_id,
            index,
            job_id,
            restart_count,
            nodes: from_json(&nodes)?,
            gpus,
            state: JobState::parse(&state),
            state_raw,
            reason,
            submit_time: opt_time(submit)?,
            start_time: opt_time(start)?,
            end_time: opt_time(end)?,
            exit_code,
            excluded_nodes: from_json(&excluded)?,
            log_path: log_path.map(PathBuf::from),
            last_log_time: opt_time(last_log)?,
            last_iteration: last_iteration.map(|i| i.max(0) as u64),
            last_progress_time: opt_time(last_progress)?,
            updated_at: time_from_text(&updated)?,
        })
    })())
}

impl Db<'_> {
    /// Inserts or replaces an attempt (keyed by workflow and index), keeping its log offset and handled mark.
    pub fn save_attempt(&self, attempt: &Attempt) -> Result<(), StoreError> {
        self.conn.execute(
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

    /// A workflow's attempts, first to last.
    pub fn attempts(&self, workflow_id: WorkflowId) -> Result<Vec<Attempt>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {ATTEMPT_COLUMNS} FROM attempts WHERE workflow_id = ?1 ORDER BY idx"
        ))?;
        collect(stmt.query_map([workflow_id], attempt_from_row)?)
    }

    /// Every attempt of every workflow, by workflow and index (one read for a whole overview).
    pub fn all_attempts(&self) -> Result<Vec<Attempt>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {ATTEMPT_COLUMNS} FROM attempts ORDER BY workflow_id, idx"
        ))?;
        collect(stmt.query_map([], attempt_from_row)?)
    }

    /// The latest attempt that ran as `job_id` on `backend`.
    pub fn attempt_by_job(
        &self,
        backend: &str,
        job_id: &str,
    ) -> Result<Option<Attempt>, StoreError> {
        let columns = ATTEMPT_COLUMNS
            .split(", ")
            .map(|column| format!("a.{}", column.trim()))
            .collect::<Vec<_>>()
            .join(", ");
        self.conn
            .query_row(
                &format!(
                    "SELECT {columns} FROM attempts a JOIN workflows w ON w.id = a.workflow_id \
                     WHERE w.backend = ?1 AND a.job_id = ?2 ORDER BY a.idx DESC LIMIT 1"
                ),
                params![backend, job_id],
                attempt_from_row,
            )
            .optional()?
            .transpose()
    }

    /// Whether the engine already acted on this attempt's failure (so a restart does not act again).
    pub fn attempt_handled(&self, workflow_id: WorkflowId, index: u32) -> Result<bool, StoreError> {
        let handled: Option<bool> = self
            .conn
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
        self.conn.execute(
            "UPDATE attempts SET handled = 1 WHERE workflow_id = ?1 AND idx = ?2",
            params![workflow_id, index],
        )?;
        Ok(())
    }
}
