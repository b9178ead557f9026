//! Typed reads and writes over one connection or transaction.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde::{Serialize, de::DeserializeOwned};

use super::{StoreError, time_from_text, time_to_text};
use crate::model::{
    Action, ActionId, ActionKind, ActionState, AlertEvent, Anomaly, AnomalyKind, Attempt,
    Attribution, Checkpoint, Component, EvidenceLine, JobState, JournalEntry, Notification,
    Severity, ThroughputSample, Workflow, WorkflowId, WorkflowStatus,
};

/// Evidence lines kept per attempt; older ones are dropped so a log full of errors cannot grow the store.
const EVIDENCE_LINES_PER_ATTEMPT: i64 = 400;

/// What another process asks the engine to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandKind {
    Approve,
    Reject,
}

impl CommandKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Reject => "reject",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        match name {
            "approve" => Some(Self::Approve),
            "reject" => Some(Self::Reject),
            _ => None,
        }
    }
}

/// A queued command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub id: i64,
    pub kind: CommandKind,
    pub action_id: ActionId,
}

/// How many checkpoints an attempt saved, and when the last one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointCount {
    pub workflow_id: WorkflowId,
    pub attempt_index: u32,
    pub count: u32,
    pub last: Option<DateTime<Utc>>,
}

/// Counts shown next to a workflow in tables.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct WorkflowSummary {
    pub checkpoints: u32,
    pub last_checkpoint_iteration: Option<u64>,
    pub anomalies: u32,
    pub pending_approvals: u32,
}

/// Queries over a connection; inside [`super::Store::write`] they all share one transaction.
pub struct Db<'c> {
    pub(super) conn: &'c Connection,
}

fn to_json<T: Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|err| StoreError::Corrupt(err.to_string()))
}

fn from_json<T: DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|err| StoreError::Corrupt(format!("{err}: {text:.200}")))
}

fn opt_time(text: Option<String>) -> Result<Option<DateTime<Utc>>, StoreError> {
    text.as_deref().map(time_from_text).transpose()
}

/// Collects rows through a fallible mapper that may fail on SQL or on content.
pub(super) fn collect<T>(
    rows: impl Iterator<Item = rusqlite::Result<Result<T, StoreError>>>,
) -> Result<Vec<T>, StoreError> {
    let mut out = Vec::new();
    for row in rows {
        out.push(row??);
    }
    Ok(out)
}

const WORKFLOW_COLUMNS: &str = "id, name, backend, spec, limits, status, status_reason, succeeded, \
     requeues_used, failures_since_checkpoint, created_at, updated_at";

fn workflow_from_row(row: &Row<'_>) -> rusqlite::Result<Result<Workflow, StoreError>> {
    let status: String = row.get(5)?;
    let spec: String = row.get(3)?;
    let limits: String = row.get(4)?;
    let created: String = row.get(10)?;
    let updated: String = row.get(11)?;
    let (id, name, backend, status_reason, succeeded, requeues_used, failures) = (
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
        row.get(9)?,
    );
    Ok((|| {
        Ok(Workflow {
            id,
            name,
            backend,
            spec: from_json(&spec)?,
            limits: from_json(&limits)?,
            status: WorkflowStatus::parse(&status)
                .ok_or_else(|| StoreError::Corrupt(format!("workflow status {status:?}")))?,
            status_reason,
            succeeded,
            requeues_used,
            failures_since_checkpoint: failures,
            created_at: time_from_text(&created)?,
            updated_at: time_from_text(&updated)?,
        })
    })())
}

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

const ACTION_COLUMNS: &str = "id, workflow_id, attempt_index, kind, params, state, permitted, why, \
     command, result, created_at, updated_at";

fn action_from_row(row: &Row<'_>) -> rusqlite::Result<Result<Action, StoreError>> {
    let kind: String = row.get(3)?;
    let params: String = row.get(4)?;
    let state: String = row.get(5)?;
    let created: String = row.get(10)?;
    let updated: String = row.get(11)?;
    let (id, workflow_id, attempt_index, permitted, why, command, result) = (
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
        row.get(9)?,
    );
    Ok((|| {
        Ok(Action {
            id,
            workflow_id,
            attempt_index,
            kind: ActionKind::parse(&kind)
                .ok_or_else(|| StoreError::Corrupt(format!("action kind {kind:?}")))?,
            params: from_json(&params)?,
            state: ActionState::parse(&state)
                .ok_or_else(|| StoreError::Corrupt(format!("action state {state:?}")))?,
            permitted,
            why,
            command,
            result,
            created_at: time_from_text(&created)?,
            updated_at: time_from_text(&updated)?,
        })
    })())
}

fn attribution_from_row(row: &Row<'_>) -> rusqlite::Result<Result<Attribution, StoreError>> {
    let component: String = row.get(4)?;
    let culprit: String = row.get(5)?;
    let evidence: String = row.get(10)?;
    let time: String = row.get(11)?;
    let remedies: String = row.get(12)?;
    let (id, workflow_id, attempt_index, category, confidence, recoverable, signature, explanation) = (
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
        row.get(9)?,
    );
    Ok((|| {
        Ok(Attribution {
            id,
            workflow_id,
            attempt_index,
            category,
            component: Component::parse(&component)
                .ok_or_else(|| StoreError::Corrupt(format!("component {component:?}")))?,
            culprit: from_json(&culprit)?,
            confidence,
            recoverable,
            signature,
            explanation,
            evidence: from_json(&evidence)?,
            time: time_from_text(&time)?,
            remedies: from_json(&remedies)?,
        })
    })())
}

fn anomaly_from_row(row: &Row<'_>) -> rusqlite::Result<Result<Anomaly, StoreError>> {
    let kind: String = row.get(3)?;
    let time: String = row.get(4)?;
    let evidence: String = row.get(6)?;
    let (id, workflow_id, attempt_index, summary) =
        (row.get(0)?, row.get(1)?, row.get(2)?, row.get(5)?);
    Ok((|| {
        Ok(Anomaly {
            id,
            workflow_id,
            attempt_index,
            kind: AnomalyKind::parse(&kind)
                .ok_or_else(|| StoreError::Corrupt(format!("anomaly kind {kind:?}")))?,
            time: time_from_text(&time)?,
            summary,
            evidence: from_json(&evidence)?,
        })
    })())
}

impl<'c> Db<'c> {
    pub(super) fn new(conn: &'c Connection) -> Self {
        Self { conn }
    }

    // ---- workflows ----

    /// Stores a new workflow and returns its id (the `id` field of `workflow` is ignored).
    pub fn insert_workflow(&self, workflow: &Workflow) -> Result<WorkflowId, StoreError> {
        self.conn.execute(
            "INSERT INTO workflows (name, backend, spec, limits, status, status_reason, succeeded, \
             requeues_used, failures_since_checkpoint, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                workflow.name,
                workflow.backend,
                to_json(&workflow.spec)?,
                to_json(&workflow.limits)?,
                workflow.status.as_str(),
                workflow.status_reason,
                workflow.succeeded,
                workflow.requeues_used,
                workflow.failures_since_checkpoint,
                time_to_text(workflow.created_at),
                time_to_text(workflow.updated_at),
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn update_workflow(&self, workflow: &Workflow) -> Result<(), StoreError> {
        let changed = self.conn.execute(
            "UPDATE workflows SET name = ?2, spec = ?3, limits = ?4, status = ?5, status_reason = ?6, \
             succeeded = ?7, requeues_used = ?8, failures_since_checkpoint = ?9, updated_at = ?10 \
             WHERE id = ?1",
            params![
                workflow.id,
                workflow.name,
                to_json(&workflow.spec)?,
                to_json(&workflow.limits)?,
                workflow.status.as_str(),
                workflow.status_reason,
                workflow.succeeded,
                workflow.requeues_used,
                workflow.failures_since_checkpoint,
                time_to_text(workflow.updated_at),
            ],
        )?;
        if changed == 0 {
            return Err(StoreError::NotFound {
                what: "workflow",
                id: workflow.id.to_string(),
            });
        }
        Ok(())
    }

    pub fn workflow(&self, id: WorkflowId) -> Result<Option<Workflow>, StoreError> {
        self.conn
            .query_row(
                &format!("SELECT {WORKFLOW_COLUMNS} FROM workflows WHERE id = ?1"),
                [id],
                workflow_from_row,
            )
            .optional()?
            .transpose()
    }

    /// Every workflow, oldest first.
    pub fn workflows(&self) -> Result<Vec<Workflow>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {WORKFLOW_COLUMNS} FROM workflows ORDER BY id"
        ))?;
        collect(stmt.query_map([], workflow_from_row)?)
    }

    /// Forgets every workflow of a backend (a fresh demo replaces the previous demo's records).
    pub fn delete_workflows_of_backend(&self, backend: &str) -> Result<usize, StoreError> {
        Ok(self
            .conn
            .execute("DELETE FROM workflows WHERE backend = ?1", [backend])?)
    }

    pub fn workflow_summary(&self, id: WorkflowId) -> Result<WorkflowSummary, StoreError> {
        let (checkpoints, last): (u32, Option<i64>) = self.conn.query_row(
            "SELECT COUNT(*), MAX(iteration) FROM checkpoints WHERE workflow_id = ?1",
            [id],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        let anomalies: u32 = self.conn.query_row(
            "SELECT COUNT(*) FROM anomalies WHERE workflow_id = ?1",
            [id],
            |row| row.get(0),
        )?;
        let pending_approvals: u32 = self.conn.query_row(
            "SELECT COUNT(*) FROM actions WHERE workflow_id = ?1 AND state = 'proposed'",
            [id],
            |row| row.get(0),
        )?;
        Ok(WorkflowSummary {
            checkpoints,
            last_checkpoint_iteration: last.map(|i| i.max(0) as u64),
            anomalies,
            pending_approvals,
        })
    }

    // ---- attempts ----

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

    /// Byte offset up to which the attempt's log has been read, and the identity of the file it was in.
    pub fn log_offset(
        &self,
        workflow_id: WorkflowId,
        index: u32,
    ) -> Result<(u64, Option<String>), StoreError> {
        let found: Option<(i64, Option<String>)> = self
            .conn
            .query_row(
                "SELECT log_offset, log_identity FROM attempts WHERE workflow_id = ?1 AND idx = ?2",
                params![workflow_id, index],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()?;
        Ok(found.map_or((0, None), |(offset, identity)| {
            (offset.max(0) as u64, identity)
        }))
    }

    pub fn set_log_offset(
        &self,
        workflow_id: WorkflowId,
        index: u32,
        offset: u64,
        identity: Option<&str>,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE attempts SET log_offset = ?3, log_identity = ?4 WHERE workflow_id = ?1 AND idx = ?2",
            params![workflow_id, index, offset as i64, identity],
        )?;
        Ok(())
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

    /// Offset up to which a shared log (a node's kernel log) has been read.
    pub fn file_offset(&self, path: &str) -> Result<(u64, Option<String>), StoreError> {
        let found: Option<(i64, Option<String>)> = self
            .conn
            .query_row(
                "SELECT offset, identity FROM log_offsets WHERE path = ?1",
                [path],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .optional()?;
        Ok(found.map_or((0, None), |(offset, identity)| {
            (offset.max(0) as u64, identity)
        }))
    }

    pub fn set_file_offset(
        &self,
        path: &str,
        offset: u64,
        identity: Option<&str>,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO log_offsets (path, offset, identity) VALUES (?1, ?2, ?3) \
             ON CONFLICT (path) DO UPDATE SET offset = ?2, identity = ?3",
            params![path, offset as i64, identity],
        )?;
        Ok(())
    }

    // ---- progress ----

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

    /// Every attempt of every workflow, by workflow and index (one read for a whole overview).
    pub fn all_attempts(&self) -> Result<Vec<Attempt>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {ATTEMPT_COLUMNS} FROM attempts ORDER BY workflow_id, idx"
        ))?;
        collect(stmt.query_map([], attempt_from_row)?)
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

    /// Every anomaly, oldest first.
    pub fn all_anomalies(&self) -> Result<Vec<Anomaly>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, workflow_id, attempt_index, kind, time, summary, evidence FROM anomalies ORDER BY id",
        )?;
        collect(stmt.query_map([], anomaly_from_row)?)
    }

    /// Every attribution, oldest first.
    pub fn all_attributions(&self) -> Result<Vec<Attribution>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, workflow_id, attempt_index, category, component, culprit, confidence, recoverable, \
             signature, explanation, evidence, time, remedies FROM attributions ORDER BY id",
        )?;
        collect(stmt.query_map([], attribution_from_row)?)
    }

    /// Every action, oldest first.
    pub fn all_actions(&self) -> Result<Vec<Action>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT {ACTION_COLUMNS} FROM actions ORDER BY id"))?;
        collect(stmt.query_map([], action_from_row)?)
    }

    /// The latest `limit` actions that ended (done, failed, rejected), newest first.
    pub fn recent_finished_actions(&self, limit: u32) -> Result<Vec<Action>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {ACTION_COLUMNS} FROM actions WHERE state IN ('done', 'failed', 'rejected') \
             ORDER BY updated_at DESC, id DESC LIMIT ?1"
        ))?;
        collect(stmt.query_map([limit], action_from_row)?)
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

    // ---- evidence ----

    /// Keeps a notable log line of an attempt, dropping the oldest beyond the per-attempt cap.
    pub fn insert_evidence_line(
        &self,
        workflow_id: WorkflowId,
        attempt_index: u32,
        line: &EvidenceLine,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO evidence_lines (workflow_id, attempt_index, time, rank, text) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![workflow_id, attempt_index, time_to_text(line.time), line.rank, line.text],
        )?;
        let id = self.conn.last_insert_rowid();
        self.conn.execute(
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
        let mut stmt = self.conn.prepare(
            "SELECT time, rank, text FROM evidence_lines WHERE workflow_id = ?1 AND attempt_index = ?2 ORDER BY id",
        )?;
        collect(stmt.query_map(params![workflow_id, attempt_index], |row| {
            let time: String = row.get(0)?;
            let (rank, text) = (row.get(1)?, row.get(2)?);
            Ok(time_from_text(&time).map(|time| EvidenceLine { time, rank, text }))
        })?)
    }

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
        self.conn.execute(
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
            .conn
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

    pub fn insert_anomaly(&self, anomaly: &Anomaly) -> Result<i64, StoreError> {
        self.conn.execute(
            "INSERT INTO anomalies (workflow_id, attempt_index, kind, time, summary, evidence) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                anomaly.workflow_id,
                anomaly.attempt_index,
                anomaly.kind.as_str(),
                time_to_text(anomaly.time),
                anomaly.summary,
                to_json(&anomaly.evidence)?,
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn anomalies(&self, workflow_id: WorkflowId) -> Result<Vec<Anomaly>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, workflow_id, attempt_index, kind, time, summary, evidence FROM anomalies \
             WHERE workflow_id = ?1 ORDER BY id",
        )?;
        collect(stmt.query_map([workflow_id], anomaly_from_row)?)
    }

    /// Whether an anomaly of `kind` was already raised on this attempt (detectors raise each once).
    pub fn anomaly_raised(
        &self,
        workflow_id: WorkflowId,
        attempt_index: u32,
        kind: AnomalyKind,
    ) -> Result<bool, StoreError> {
        let count: i64 = self.conn.query_row(
            "SELECT COUNT(*) FROM anomalies WHERE workflow_id = ?1 AND attempt_index = ?2 AND kind = ?3",
            params![workflow_id, attempt_index, kind.as_str()],
            |row| row.get(0),
        )?;
        Ok(count > 0)
    }

    pub fn insert_attribution(&self, attribution: &Attribution) -> Result<i64, StoreError> {
        self.conn.execute(
            "INSERT INTO attributions (workflow_id, attempt_index, category, component, culprit, confidence, \
             recoverable, signature, explanation, evidence, time, remedies) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                attribution.workflow_id,
                attribution.attempt_index,
                attribution.category,
                attribution.component.as_str(),
                to_json(&attribution.culprit)?,
                attribution.confidence,
                attribution.recoverable,
                attribution.signature,
                attribution.explanation,
                to_json(&attribution.evidence)?,
                time_to_text(attribution.time),
                to_json(&attribution.remedies)?,
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Attributions of every workflow made at or after `since`.
    pub fn attributions_since(&self, since: DateTime<Utc>) -> Result<Vec<Attribution>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, workflow_id, attempt_index, category, component, culprit, confidence, recoverable, \
             signature, explanation, evidence, time, remedies FROM attributions WHERE time >= ?1 ORDER BY id",
        )?;
        collect(stmt.query_map([time_to_text(since)], attribution_from_row)?)
    }

    pub fn attributions(&self, workflow_id: WorkflowId) -> Result<Vec<Attribution>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, workflow_id, attempt_index, category, component, culprit, confidence, recoverable, \
             signature, explanation, evidence, time, remedies FROM attributions WHERE workflow_id = ?1 ORDER BY id",
        )?;
        collect(stmt.query_map([workflow_id], attribution_from_row)?)
    }

    // ---- actions ----

    pub fn insert_action(&self, action: &Action) -> Result<ActionId, StoreError> {
        self.conn.execute(
            "INSERT INTO actions (workflow_id, attempt_index, kind, params, state, permitted, why, command, \
             result, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                action.workflow_id,
                action.attempt_index,
                action.kind.as_str(),
                to_json(&action.params)?,
                action.state.as_str(),
                action.permitted,
                action.why,
                action.command,
                action.result,
                time_to_text(action.created_at),
                time_to_text(action.updated_at),
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn update_action(&self, action: &Action) -> Result<(), StoreError> {
        let changed = self.conn.execute(
            "UPDATE actions SET state = ?2, command = ?3, result = ?4, updated_at = ?5, params = ?6 WHERE id = ?1",
            params![
                action.id,
                action.state.as_str(),
                action.command,
                action.result,
                time_to_text(action.updated_at),
                to_json(&action.params)?,
            ],
        )?;
        if changed == 0 {
            return Err(StoreError::NotFound {
                what: "action",
                id: action.id.to_string(),
            });
        }
        Ok(())
    }

    pub fn action(&self, id: ActionId) -> Result<Option<Action>, StoreError> {
        self.conn
            .query_row(
                &format!("SELECT {ACTION_COLUMNS} FROM actions WHERE id = ?1"),
                [id],
                action_from_row,
            )
            .optional()?
            .transpose()
    }

    pub fn actions(&self, workflow_id: WorkflowId) -> Result<Vec<Action>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {ACTION_COLUMNS} FROM actions WHERE workflow_id = ?1 ORDER BY id"
        ))?;
        collect(stmt.query_map([workflow_id], action_from_row)?)
    }

    pub fn actions_in_state(&self, state: ActionState) -> Result<Vec<Action>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {ACTION_COLUMNS} FROM actions WHERE state = ?1 ORDER BY id"
        ))?;
        collect(stmt.query_map([state.as_str()], action_from_row)?)
    }

    // ---- notifications, journal, warnings ----

    pub fn insert_notification(&self, notification: &Notification) -> Result<i64, StoreError> {
        self.conn.execute(
            "INSERT INTO notifications (workflow_id, time, severity, title, body, event) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                notification.workflow_id,
                time_to_text(notification.time),
                notification.severity.as_str(),
                notification.title,
                notification.body,
                notification.event.as_str(),
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// The newest `limit` notifications, newest first.
    pub fn notifications(&self, limit: u32) -> Result<Vec<Notification>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {NOTIFICATION_COLUMNS} FROM notifications ORDER BY id DESC LIMIT ?1"
        ))?;
        collect(stmt.query_map([limit], notification_from_row)?)
    }

    /// Notifications after `after_id`, oldest first, at most `limit`.
    pub fn notifications_after(
        &self,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<Notification>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE id > ?1 ORDER BY id LIMIT ?2"
        ))?;
        collect(stmt.query_map(params![after_id, limit], notification_from_row)?)
    }

    /// The highest notification id, 0 when there is none.
    pub fn last_notification_id(&self) -> Result<i64, StoreError> {
        Ok(self.conn.query_row(
            "SELECT COALESCE(MAX(id), 0) FROM notifications",
            [],
            |row| row.get(0),
        )?)
    }

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

    /// Counts a skipped input (a bad line, an unreadable answer) so it is visible without flooding the log.
    pub fn count_warning(
        &self,
        kind: &str,
        message: &str,
        time: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO warnings (kind, count, last_message, last_time) VALUES (?1, 1, ?2, ?3) \
             ON CONFLICT (kind) DO UPDATE SET count = count + 1, last_message = ?2, last_time = ?3",
            params![kind, message, time_to_text(time)],
        )?;
        Ok(())
    }

    /// Add `count` to a warning counter in one go.
    pub fn add_warnings(
        &self,
        kind: &str,
        count: u64,
        message: &str,
        time: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        if count == 0 {
            return Ok(());
        }
        self.conn.execute(
            "INSERT INTO warnings (kind, count, last_message, last_time) VALUES (?1, ?4, ?2, ?3) \
             ON CONFLICT (kind) DO UPDATE SET count = count + ?4, last_message = ?2, last_time = ?3",
            params![kind, message, time_to_text(time), count as i64],
        )?;
        Ok(())
    }

    /// Warning counters: (kind, count, last message).
    pub fn warnings(&self) -> Result<Vec<(String, u64, String)>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT kind, count, last_message FROM warnings ORDER BY kind")?;
        let rows = stmt.query_map([], |row| {
            let count: i64 = row.get(1)?;
            Ok((row.get(0)?, count.max(0) as u64, row.get(2)?))
        })?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    // ---- jobs watched by reference ----

    /// Adds a job to watch; false when it was watched already.
    pub fn add_watched(
        &self,
        backend: &str,
        job_ref: &str,
        time: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let added = self.conn.execute(
            "INSERT OR IGNORE INTO watched_jobs (backend, job_ref, added_at) VALUES (?1, ?2, ?3)",
            params![backend, job_ref, time_to_text(time)],
        )?;
        Ok(added > 0)
    }

    /// Stops watching a job by reference; false when it was not watched.
    pub fn remove_watched(&self, backend: &str, job_ref: &str) -> Result<bool, StoreError> {
        let removed = self.conn.execute(
            "DELETE FROM watched_jobs WHERE backend = ?1 AND job_ref = ?2",
            params![backend, job_ref],
        )?;
        Ok(removed > 0)
    }

    /// The jobs watched by reference on `backend`, oldest first.
    pub fn watched_jobs(&self, backend: &str) -> Result<Vec<String>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT job_ref FROM watched_jobs WHERE backend = ?1 ORDER BY added_at, job_ref",
        )?;
        let rows = stmt.query_map([backend], |row| row.get(0))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    }

    // ---- commands from other processes ----

    pub fn push_command(
        &self,
        kind: CommandKind,
        action_id: ActionId,
        time: DateTime<Utc>,
    ) -> Result<i64, StoreError> {
        self.conn.execute(
            "INSERT INTO commands (time, kind, action_id) VALUES (?1, ?2, ?3)",
            params![time_to_text(time), kind.as_str(), action_id],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn pending_commands(&self) -> Result<Vec<Command>, StoreError> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, kind, action_id FROM commands WHERE done = 0 ORDER BY id")?;
        collect(stmt.query_map([], |row| {
            let kind: String = row.get(1)?;
            let (id, action_id) = (row.get(0)?, row.get(2)?);
            Ok(CommandKind::parse(&kind)
                .map(|kind| Command {
                    id,
                    kind,
                    action_id,
                })
                .ok_or_else(|| StoreError::Corrupt(format!("command kind {kind:?}"))))
        })?)
    }

    /// The outcome of a command once the engine applied it.
    pub fn command_outcome(&self, id: i64) -> Result<Option<String>, StoreError> {
        let outcome: Option<Option<String>> = self
            .conn
            .query_row(
                "SELECT outcome FROM commands WHERE id = ?1 AND done = 1",
                [id],
                |row| row.get(0),
            )
            .optional()?;
        Ok(outcome.flatten())
    }

    pub fn finish_command(&self, id: i64, outcome: &str) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE commands SET done = 1, outcome = ?2 WHERE id = ?1",
            params![id, outcome],
        )?;
        Ok(())
    }
}

const NOTIFICATION_COLUMNS: &str = "id, workflow_id, time, severity, title, body, event";

fn notification_from_row(
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<Result<Notification, StoreError>> {
    let time: String = row.get(2)?;
    let severity: String = row.get(3)?;
    let event: String = row.get(6)?;
    let (id, workflow_id, title, body) = (row.get(0)?, row.get(1)?, row.get(4)?, row.get(5)?);
    Ok((|| {
        Ok(Notification {
            id,
            workflow_id,
            time: time_from_text(&time)?,
            // An event name written by a newer version reads as a plain notice.
            event: AlertEvent::parse(&event).unwrap_or(AlertEvent::Notice),
            severity: Severity::parse(&severity)
                .ok_or_else(|| StoreError::Corrupt(format!("severity {severity:?}")))?,
            title,
            body,
        })
    })())
}
