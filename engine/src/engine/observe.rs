//! Observation: the scheduler's view of each job, and what the logs say since the last tick.
//! Nothing here acts on the cluster.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, TimeDelta, Utc};

use super::pace::Load;
use super::{Engine, EngineError, EngineEvent, set_status, with_timeout};
use crate::attribute::scan::ShapeMemory;
use crate::backend::{BackendError, JobSnapshot};
use crate::model::{
    Attempt, BackendKind, Checkpoint, JobState, ThroughputSample, Workflow, WorkflowId,
    WorkflowStatus,
};
use crate::store::{Db, LogPosition, StoreError};
use crate::telemetry::discover::LogPattern;
use crate::telemetry::pipeline::{Digester, LogDigest};
use crate::telemetry::straggler_report::StragglerReport;
use crate::telemetry::tail::{
    Chunk, Continuation, READ_STEP_BYTES, TailLimits, continuation, join_tails,
    read_new_lines_reusing,
};
use crate::telemetry::watch::absolute;

/// The tag runguard gives a job it submits, so a restarted engine finds it again.
pub(crate) fn attempt_tag(workflow_id: WorkflowId, attempt_index: u32) -> String {
    format!("runguard:workflow={workflow_id}:attempt={attempt_index}")
}

fn parse_tag(tag: &str) -> Option<(WorkflowId, u32)> {
    let rest = tag.strip_prefix("runguard:workflow=")?;
    let (workflow, attempt) = rest.split_once(":attempt=")?;
    Some((workflow.parse().ok()?, attempt.parse().ok()?))
}

fn attempt_from(
    snapshot: &JobSnapshot,
    workflow_id: WorkflowId,
    index: u32,
    now: DateTime<Utc>,
) -> Attempt {
    Attempt {
        workflow_id,
        index,
        job_id: snapshot.job_id.clone(),
        restart_count: snapshot.restart_count,
        nodes: snapshot.nodes.clone(),
        gpus: snapshot.gpus,
        state: snapshot.state,
        state_raw: snapshot.state_raw.clone(),
        reason: snapshot.reason.clone(),
        submit_time: snapshot.submit_time,
        start_time: snapshot.start_time,
        end_time: snapshot.end_time,
        exit_code: snapshot.exit_code,
        excluded_nodes: snapshot.excluded_nodes.clone(),
        log_path: snapshot.log_path.clone(),
        last_log_time: None,
        last_iteration: None,
        last_progress_time: None,
        updated_at: now,
    }
}

/// Copies what the scheduler says into an attempt; true when its state or reason changed.
fn refresh(
    attempt: &mut Attempt,
    snapshot: &JobSnapshot,
    own_dir: Option<&std::path::Path>,
    now: DateTime<Utc>,
) -> bool {
    let changed = attempt.state != snapshot.state
        || attempt.state_raw != snapshot.state_raw
        || attempt.reason != snapshot.reason
        || attempt.nodes != snapshot.nodes;
    attempt.nodes.clone_from(&snapshot.nodes);
    attempt.gpus = snapshot.gpus;
    attempt.state = snapshot.state;
    attempt.state_raw.clone_from(&snapshot.state_raw);
    attempt.reason.clone_from(&snapshot.reason);
    attempt.submit_time = snapshot.submit_time.or(attempt.submit_time);
    attempt.start_time = snapshot.start_time.or(attempt.start_time);
    attempt.end_time = snapshot.end_time.or(attempt.end_time);
    attempt.exit_code = snapshot.exit_code.or(attempt.exit_code);
    attempt.excluded_nodes.clone_from(&snapshot.excluded_nodes);
    // A file of the attempt's own, found by the configured pattern in `own_dir`, is not replaced by
    // the scheduler's output path at the next listing.
    let own = attempt
        .log_path
        .as_ref()
        .is_some_and(|path| own_dir.is_some_and(|dir| path.starts_with(dir)));
    if snapshot.log_path.is_some() && !own {
        attempt.log_path.clone_from(&snapshot.log_path);
    }
    if changed {
        attempt.updated_at = now;
    }
    changed
}

fn state_event(attempt: &Attempt) -> EngineEvent {
    EngineEvent::AttemptStateChanged {
        workflow_id: attempt.workflow_id,
        attempt_index: attempt.index,
        job_id: attempt.job_id.clone(),
        state: attempt.state,
        state_raw: attempt.state_raw.clone(),
        reason: attempt.reason.clone(),
        nodes: attempt.nodes.clone(),
    }
}

/// A recovery is done once the latest attempt runs. (Completion waits for the detection step, after the
/// logs were read, so the last lines of a finished job are not lost.)
fn follow_attempt(
    db: &Db<'_>,
    workflow: &mut Workflow,
    attempt: &Attempt,
    now: DateTime<Utc>,
    events: &mut Vec<EngineEvent>,
) -> Result<(), StoreError> {
    let latest = db.attempts(workflow.id)?.last().map(|a| a.index) == Some(attempt.index);
    if latest
        && workflow.status == WorkflowStatus::Completed
        && !workflow.succeeded
        && !attempt.state.is_terminal()
        && attempt.index > 0
    {
        // runguard had stopped (declined, crash loop, limit) and a person started the job again
        // (a requeue under its id): their new run is watched and recovered like any other.
        let before = workflow
            .status_reason
            .clone()
            .unwrap_or_else(|| "stopped".to_string());
        let reason = format!(
            "job {} was started again (attempt {}) after runguard had stopped ({before}): watching it again",
            attempt.job_id, attempt.index
        );
        enable(db, workflow, reason, "resumed by someone else", now, events)?;
        return Ok(());
    }
    if !latest || !workflow.status.is_active() {
        return Ok(());
    }
    if attempt.state == JobState::Running
        && workflow.status == WorkflowStatus::Pending
        && attempt.log_path.is_none()
    {
        // Nothing to read: watched through the scheduler alone, and it says so.
        let reason = format!(
            "checked: job {} runs on {}; runguard knows no log of it, so only the scheduler's \
             states are watched (set telemetry.log_dir and log_pattern, or give the job an output path)",
            attempt.job_id,
            attempt.nodes.join(",")
        );
        enable(db, workflow, reason, "watching", now, events)?;
    }
    if attempt.state == JobState::Running
        && workflow.status == WorkflowStatus::Recovering
        && !db.attempt_handled(workflow.id, attempt.index)?
    {
        let reason = format!(
            "attempt {} running on {}",
            attempt.index,
            attempt.nodes.join(",")
        );
        enable(db, workflow, reason, "recovered", now, events)?;
    }
    Ok(())
}

/// Moves a workflow to `enabled` with `reason`, journaled as `what: reason`, and says so.
fn enable(
    db: &Db<'_>,
    workflow: &mut Workflow,
    reason: String,
    what: &str,
    now: DateTime<Utc>,
    events: &mut Vec<EngineEvent>,
) -> Result<(), StoreError> {
    set_status(
        db,
        workflow,
        WorkflowStatus::Enabled,
        Some(reason.clone()),
        now,
    )?;
    db.journal(Some(workflow.id), now, &format!("{what}: {reason}"), &[])?;
    events.push(EngineEvent::WorkflowStatusChanged {
        workflow_id: workflow.id,
        status: WorkflowStatus::Enabled,
        reason: Some(reason),
    });
    Ok(())
}

/// The attempt's log by the configured pattern, when the scheduler did not name it.
fn discover_log(
    search: &Option<(std::path::PathBuf, LogPattern)>,
    attempt: &Attempt,
    name: &str,
    user: &str,
) -> Option<std::path::PathBuf> {
    let (dir, pattern) = search.as_ref()?;
    // A margin for clock skew between the scheduler and the file system.
    let since = attempt
        .start_time
        .map(|start| std::time::SystemTime::from(start - TimeDelta::seconds(60)));
    pattern.find(dir, name, &attempt.job_id, user, since)
}

impl Engine {
    pub(super) async fn observe_jobs(&mut self, now: DateTime<Utc>) -> Result<(), EngineError> {
        // `runguard watch` adds jobs from another process at any time.
        let watched = self.store.db().watched_jobs(self.backend.name())?;
        self.backend.set_watched(&watched);
        let asked = std::time::Instant::now();
        let listing = with_timeout(self.backend.list_jobs()).await;
        // A listing from the backend's own memory loads no controller, however long it takes.
        let took = if self.backend.lists_from_cache() {
            std::time::Duration::ZERO
        } else {
            asked.elapsed()
        };
        let load = self.pace.listed(now, took);
        self.report_load(load, now)?;
        let snapshots = match listing {
            Ok(snapshots) => {
                self.scheduler_answered(now)?;
                snapshots
            }
            Err(err) if err.is_transient() => {
                return self.scheduler_failed(format!("listing jobs: {err}"), now);
            }
            Err(BackendError::Credentials(message)) => {
                return self.credentials_refused(message, now);
            }
            Err(err) => {
                return self.warn("backend_unavailable", format!("listing jobs: {err}"), now);
            }
        };
        for snapshot in &snapshots {
            self.observe_job(snapshot, now)?;
        }
        self.check_nodes(now).await?;
        // Attempts still in flight that the listing no longer shows: ask for them one by one.
        let listed: HashSet<&str> = snapshots.iter().map(|s| s.job_id.as_str()).collect();
        let backend = self.backend.kind();
        let workflows = self.store.db().workflows()?;
        for workflow in workflows {
            if !workflow.status.is_active() || workflow.backend != backend {
                continue;
            }
            let Some(attempt) = self.store.db().attempts(workflow.id)?.pop() else {
                continue;
            };
            if attempt.state.is_terminal() || listed.contains(attempt.job_id.as_str()) {
                continue;
            }
            match with_timeout(self.backend.job(&attempt.job_id)).await {
                Ok(Some(snapshot)) => self.observe_job(&snapshot, now)?,
                Ok(None) => {
                    let mut gone = attempt.clone();
                    gone.state = JobState::Vanished;
                    gone.state_raw = "VANISHED".to_string();
                    gone.end_time = Some(now);
                    gone.updated_at = now;
                    self.store.write(|db| db.save_attempt(&gone))?;
                    self.pending_events.push(state_event(&gone));
                    self.flush_events();
                }
                Err(err) => {
                    self.warn(
                        "backend_unavailable",
                        format!("reading job {}: {err}", attempt.job_id),
                        now,
                    )?;
                }
            }
        }
        crate::capacity::sampler::sample(&mut self.store, self.backend.as_ref(), &snapshots, now)
            .await?;
        Ok(())
    }

    /// A slow controller is asked less often, and the user is told once per slow spell.
    fn report_load(&mut self, load: Load, now: DateTime<Utc>) -> Result<(), EngineError> {
        match load {
            Load::Steady => Ok(()),
            Load::Slow(gap) => self.warn(
                "scheduler_slow",
                format!(
                    "the scheduler answered slowly; it is asked every {} s until it is fast again",
                    gap.as_secs()
                ),
                now,
            ),
            Load::Recovered => {
                tracing::info!("the scheduler answers promptly again");
                Ok(())
            }
        }
    }

    fn observe_job(
        &mut self,
        snapshot: &JobSnapshot,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        // A state the backend could not read is never recorded or acted on: the attempt keeps the
        // last state that was understood until the scheduler says something readable again.
        if snapshot.state == JobState::Unknown {
            return self.warn(
                "not_understood",
                format!(
                    "job {}: the scheduler's state {:?} is not understood; nothing is decided on it",
                    snapshot.job_id, snapshot.state_raw
                ),
                now,
            );
        }
        let backend = self.backend.kind();
        let existing = self
            .store
            .db()
            .attempt_by_job(backend.as_str(), &snapshot.job_id)?;
        let tagged = snapshot.tag.as_deref().and_then(parse_tag);
        let log_search = self.config.telemetry.log_dir.clone().and_then(|dir| {
            LogPattern::new(&self.config.telemetry.log_pattern)
                .ok()
                .map(|pattern| (dir, pattern))
        });
        let mut events = Vec::new();
        self.store.write(|db| {
            let attempt = match existing {
                Some(mut attempt) if snapshot.restart_count > attempt.restart_count => {
                    // Requeued under the same job id: the previous attempt is over, a new one begins.
                    if !attempt.state.is_terminal() {
                        attempt.state = JobState::Requeued;
                        attempt.state_raw = "REQUEUED".to_string();
                        attempt.end_time = Some(now);
                        attempt.updated_at = now;
                        db.save_attempt(&attempt)?;
                        events.push(state_event(&attempt));
                    }
                    let next = attempt_from(snapshot, attempt.workflow_id, attempt.index + 1, now);
                    db.save_attempt(&next)?;
                    share_log(db, &attempt, &next, now)?;
                    db.journal(
                        Some(next.workflow_id),
                        now,
                        &format!(
                            "attempt {} of job {} began (restart {})",
                            next.index, next.job_id, next.restart_count
                        ),
                        &[],
                    )?;
                    events.push(EngineEvent::AttemptStarted {
                        workflow_id: next.workflow_id,
                        attempt_index: next.index,
                        job_id: next.job_id.clone(),
                    });
                    next
                }
                Some(mut attempt) => {
                    let before = attempt.clone();
                    let own_dir = log_search.as_ref().map(|(dir, _)| dir.as_path());
                    if refresh(&mut attempt, snapshot, own_dir, now) {
                        events.push(state_event(&attempt));
                    }
                    if attempt.log_path != before.log_path {
                        // Another file: read from its start.
                        db.set_log_offset(attempt.workflow_id, attempt.index, 0, None)?;
                    }
                    // Most listings change nothing: a write per job per tick is what a thousand
                    // watched jobs would cost.
                    if attempt != before {
                        db.save_attempt(&attempt)?;
                    }
                    attempt
                }
                None => {
                    let resubmitted = match tagged {
                        Some((workflow_id, index)) => {
                            db.workflow(workflow_id)?.map(|_| (workflow_id, index))
                        }
                        None => None,
                    };
                    let (workflow_id, index) = match resubmitted {
                        Some(found) => found,
                        None => (enrol(db, backend, snapshot, now, &mut events)?, 0),
                    };
                    let attempt = attempt_from(snapshot, workflow_id, index, now);
                    db.save_attempt(&attempt)?;
                    events.push(EngineEvent::AttemptStarted {
                        workflow_id,
                        attempt_index: index,
                        job_id: attempt.job_id.clone(),
                    });
                    attempt
                }
            };
            let mut attempt = attempt;
            if let Some(found) = own_log(db, &log_search, &attempt, snapshot)? {
                attempt.log_path = Some(found);
                db.save_attempt(&attempt)?;
                // A file of its own: read from its start, whatever was read of the output path.
                db.set_log_offset(attempt.workflow_id, attempt.index, 0, None)?;
            }
            if let Some(mut workflow) = db.workflow(attempt.workflow_id)? {
                follow_attempt(db, &mut workflow, &attempt, now, &mut events)?;
            }
            Ok(())
        })?;
        self.pending_events.extend(events);
        self.flush_events();
        Ok(())
    }

    /// Reads what every attempt of every active workflow wrote since the last tick — or, given
    /// `changed` (absolute paths), only the logs among them. Returns the workflows whose reads held
    /// something to decide on at once (an error line, a traceback, a checkpoint); progress lines wait
    /// for the pass of the poll interval.
    pub(super) fn read_logs(
        &mut self,
        now: DateTime<Utc>,
        changed: Option<&HashSet<std::path::PathBuf>>,
    ) -> Result<HashSet<WorkflowId>, EngineError> {
        let mut touched = HashSet::new();
        let limits = TailLimits {
            max_line_bytes: self.config.telemetry.max_line_bytes,
            max_read_bytes: self.config.telemetry.max_read_bytes_per_tick,
        };
        // What every log needs, in one read transaction: a pass reads every log a second, and a
        // query a log (with its file locks) cost more than reading the logs.
        let (workflows, attempts, positions) = self
            .store
            .db()
            .reading(|db| Ok((db.workflows()?, db.active_attempts()?, db.log_positions()?)))?;
        let mut by_workflow: HashMap<WorkflowId, Vec<Attempt>> = HashMap::new();
        for attempt in attempts {
            by_workflow
                .entry(attempt.workflow_id)
                .or_default()
                .push(attempt);
        }
        let mut followed = Vec::new();
        // One read's memory serves the next; it is dropped at the end of the tick.
        let mut spare = Chunk::default();
        for workflow in workflows.into_iter().filter(|w| w.status.is_active()) {
            let attempts = by_workflow.remove(&workflow.id).unwrap_or_default();
            if let Some(path) = attempts.last().and_then(|latest| latest.log_path.clone()) {
                followed.push(path);
            }
            for attempt in attempts {
                let Some(path) = attempt.log_path.clone() else {
                    continue;
                };
                if changed.is_some_and(|changed| !changed.contains(&absolute(&path))) {
                    continue;
                }
                let position = positions
                    .get(&(workflow.id, attempt.index))
                    .cloned()
                    .unwrap_or_default();
                if self.read_attempt_log(
                    &workflow, attempt, &path, position, limits, now, &mut spare,
                )? {
                    touched.insert(workflow.id);
                }
            }
        }
        if changed.is_none() {
            self.log_watcher
                .follow(followed.iter().map(|path| path.as_path()));
        }
        Ok(touched)
    }

    /// Reads what `attempt`'s log holds past `position`, up to the tick's budget (`limits`), in steps of
    /// at most [`READ_STEP_BYTES`] each read, digested and stored before the next: a step's bytes are
    /// still in the core's cache while every pass goes over them. Returns whether a read held something
    /// to decide on at once (see [`Engine::read_logs`]).
    #[allow(clippy::too_many_arguments)]
    fn read_attempt_log(
        &mut self,
        workflow: &Workflow,
        mut attempt: Attempt,
        path: &std::path::Path,
        position: LogPosition,
        limits: TailLimits,
        now: DateTime<Utc>,
        spare: &mut Chunk,
    ) -> Result<bool, EngineError> {
        let LogPosition {
            mut offset,
            mut identity,
            end,
        } = position;
        let mut budget = limits.max_read_bytes;
        if let Some(end) = end {
            // A newer attempt of the job writes the rest of this file.
            if offset >= end {
                self.settle_tracebacks(workflow, &attempt)?;
                return Ok(false);
            }
            budget = budget.min(end - offset);
        }
        let mut touched = false;
        let mut first = true;
        // The steps of one tick's read repeat the log's line shapes.
        let mut shapes = ShapeMemory::default();
        loop {
            let step = TailLimits {
                // A line the cap keeps whole fits in one step.
                max_read_bytes: budget.min(READ_STEP_BYTES.max(limits.max_line_bytes as u64 + 1)),
                ..limits
            };
            let chunk = match read_new_lines_reusing(
                path,
                offset,
                identity.as_deref(),
                step,
                std::mem::take(spare),
            ) {
                Ok(chunk) => chunk,
                Err(err) => {
                    self.warn("log_unreadable", format!("{}: {err}", path.display()), now)?;
                    return Ok(touched);
                }
            };
            if (chunk.restarted || chunk.rotated)
                && !self.log_restart_confirmed(workflow, &attempt, end)
            {
                // Truncated or replaced: by a new run of the job (requeued under its id), whose
                // lines are not this attempt's, or by a log rotation. The next listing tells.
                *spare = chunk;
                return Ok(touched);
            }
            if chunk.restarted {
                self.warn(
                    "log_truncated",
                    format!("{} shrank; reading it again from the start", path.display()),
                    now,
                )?;
            }
            if chunk.rotated {
                self.warn(
                    "log_rotated",
                    format!(
                        "{} was replaced; reading the new file from its start",
                        path.display()
                    ),
                    now,
                )?;
            }
            if first {
                self.note_log_presence(workflow, &attempt, path, chunk.missing, now)?;
            }
            if chunk.spans.is_empty() && chunk.next_offset == offset && chunk.identity == identity {
                if first {
                    // The log went quiet: a traceback whose exception line came is complete.
                    self.settle_tracebacks(workflow, &attempt)?;
                    self.hear_partial_line(&attempt, path, offset, now)?;
                }
                *spare = chunk;
                return Ok(touched);
            }
            let read_from = if chunk.restarted || chunk.rotated {
                0
            } else {
                offset
            };
            let consumed = chunk.next_offset.saturating_sub(read_from);
            // The last step of a finished attempt closes what its tracebacks hold.
            let last = !chunk.more || consumed == 0 || consumed >= budget;
            touched |=
                self.take_in_read(workflow, &attempt, path, &chunk, last, &mut shapes, now)?;
            if last {
                *spare = chunk;
                return Ok(touched);
            }
            budget -= consumed;
            offset = chunk.next_offset;
            identity.clone_from(&chunk.identity);
            *spare = chunk;
            first = false;
            // What the step stored (the last stamp's time, the iteration) is what the next continues.
            let stored = self.store.db().reading(|db| {
                Ok(db
                    .attempts(workflow.id)?
                    .into_iter()
                    .find(|a| a.index == attempt.index))
            })?;
            match stored {
                Some(stored) => attempt = stored,
                None => return Ok(touched),
            }
        }
    }

    /// Digests one read of `attempt`'s log and stores what it taught; `last` says whether the
    /// tick reads no more of it. Returns whether the read held something to decide on at once.
    #[allow(clippy::too_many_arguments)]
    fn take_in_read(
        &mut self,
        workflow: &Workflow,
        attempt: &Attempt,
        path: &std::path::Path,
        chunk: &Chunk,
        last: bool,
        shapes: &mut ShapeMemory,
        now: DateTime<Utc>,
    ) -> Result<bool, EngineError> {
        let mut digest = self.digest(attempt, chunk, last, shapes, now);
        match digest.saving {
            Some(true) => {
                self.saving.insert((workflow.id, attempt.index));
            }
            Some(false) => {
                self.saving.remove(&(workflow.id, attempt.index));
            }
            None => {}
        }
        self.hear_ranks(workflow, attempt, &digest.ranks_heard, now);
        let notable = !digest.tracebacks.is_empty()
            || !digest.evidence.is_empty()
            || !digest.checkpoints.is_empty();
        if !attempt.state.is_terminal()
            && (!digest.tracebacks.is_empty() || !digest.evidence.is_empty())
        {
            self.pace.expedite(now);
        }
        let reports = std::mem::take(&mut digest.straggler_reports);
        let steps: Vec<_> = std::mem::take(&mut digest.step_timings)
            .into_iter()
            .map(|(_, step)| step)
            .collect();
        let loader_waits: Vec<f64> = std::mem::take(&mut digest.readings)
            .iter()
            .filter_map(crate::telemetry::readings::Reading::data_wait)
            .collect();
        let mut events = Vec::new();
        let (truncated, invalid) = (chunk.truncated_lines, chunk.invalid_utf8_lines);
        let display = path.display().to_string();
        self.store.write(|db| {
            store_digest(db, workflow, attempt, digest, now, &mut events)?;
            db.set_log_offset(
                workflow.id,
                attempt.index,
                chunk.next_offset,
                chunk.identity.as_deref(),
            )?;
            let tail = if chunk.restarted || chunk.rotated {
                chunk.tail.clone()
            } else {
                join_tails(&db.log_tail(workflow.id, attempt.index)?, &chunk.tail)
            };
            db.set_log_tail(workflow.id, attempt.index, &tail)?;
            db.add_warnings("line_truncated", truncated, &display, now)?;
            db.add_warnings("invalid_utf8", invalid, &display, now)?;
            Ok(())
        })?;
        self.pending_events.extend(events);
        self.flush_events();
        self.watch_stragglers(workflow, attempt, &reports, now)?;
        self.watch_steps(workflow, attempt, &steps, &loader_waits, now)?;
        Ok(notable)
    }

    /// Whether a log found truncated or replaced under `attempt` may be read again from its start: not
    /// for an attempt a newer one took the file from, and for the newest only once a listing after the
    /// change showed that no new run of the job began (then it was the user or a log rotation).
    fn log_restart_confirmed(
        &mut self,
        workflow: &Workflow,
        attempt: &Attempt,
        end: Option<u64>,
    ) -> bool {
        let key = (workflow.id, attempt.index);
        if end.is_some() {
            self.log_restarts.remove(&key);
            return false;
        }
        // This tick's listing came after the run could have been requeued: a requeued job waits in the
        // queue for seconds before its new run truncates the file, and the listing shows it requeued.
        let now = self.clock.now();
        let listed_at = self.pace.listed_at();
        if listed_at == Some(now) && !self.log_restarts.contains_key(&key) {
            return true;
        }
        match self.log_restarts.get(&key) {
            Some(&seen_at) if listed_at.is_some_and(|listed| listed > seen_at) => {
                self.log_restarts.remove(&key);
                true
            }
            Some(_) => false,
            None => {
                self.log_restarts.insert(key, now);
                false
            }
        }
    }

    fn settle_tracebacks(
        &mut self,
        workflow: &Workflow,
        attempt: &Attempt,
    ) -> Result<(), EngineError> {
        let Some(assembler) = self.tracebacks.get_mut(&(workflow.id, attempt.index)) else {
            return Ok(());
        };
        let blocks = assembler.settle();
        if blocks.is_empty() {
            return Ok(());
        }
        let digest = LogDigest {
            tracebacks: blocks,
            ..LogDigest::default()
        };
        let now = self.clock.now();
        self.store
            .write(|db| store_digest(db, workflow, attempt, digest, now, &mut Vec::new()))?;
        Ok(())
    }

    fn watch_stragglers(
        &mut self,
        workflow: &Workflow,
        attempt: &Attempt,
        reports: &[StragglerReport],
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let ranks_per_node = workflow.spec.ranks_per_node();
        let mut findings = Vec::new();
        let tracker = self
            .stragglers
            .entry((workflow.id, attempt.index))
            .or_default();
        for report in reports {
            findings.extend(tracker.observe(
                report,
                &attempt.nodes,
                ranks_per_node,
                &self.config.detect,
            ));
        }
        for finding in findings {
            self.raise_warning(workflow, attempt, finding, now)?;
        }
        Ok(())
    }

    /// The input-bound and slowdown warnings of a running attempt, from the step times its progress
    /// lines report.
    fn watch_steps(
        &mut self,
        workflow: &Workflow,
        attempt: &Attempt,
        steps: &[crate::telemetry::step_timing::StepTiming],
        loader_waits: &[f64],
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let key = (workflow.id, attempt.index);
        if attempt.state.is_terminal() {
            self.step_watches.remove(&key);
            return Ok(());
        }
        let finding = self.step_watches.entry(key).or_default().observe(
            steps,
            loader_waits,
            &self.config.detect,
        );
        match finding {
            Some(finding) => self.raise_warning(workflow, attempt, finding, now),
            None => Ok(()),
        }
    }

    /// `last`: the tick reads no more of the log (a finished attempt's tracebacks are then closed).
    fn digest(
        &mut self,
        attempt: &Attempt,
        chunk: &Chunk,
        last: bool,
        shapes: &mut ShapeMemory,
        now: DateTime<Utc>,
    ) -> LogDigest {
        let key = (attempt.workflow_id, attempt.index);
        let assembler = self.tracebacks.remove(&key).unwrap_or_default();
        let catalog = &self.catalog;
        let mut digester = Digester::new(
            |line: &str| catalog.is_notable(line),
            now,
            attempt.last_log_time,
            attempt.last_iteration,
        )
        .resume_tracebacks(assembler);
        let chunk = crate::attribute::rejoin::rejoin_wrapped(chunk);
        digester.push_chunk(&chunk, &catalog.candidate_lines_remembering(&chunk, shapes));
        if attempt.state.is_terminal() && last {
            // The attempt writes no more: every traceback it began is as complete as it will be.
            digester.finish()
        } else {
            let (digest, assembler) = digester.finish_keeping();
            self.tracebacks.insert(key, assembler);
            digest
        }
    }
}

/// A file of the attempt's own found by the configured pattern (`telemetry.log_dir`), when it has none
/// yet or only the scheduler's output path: one file per attempt (AJR's `{name}_{jobid}_{datetime}.log`)
/// is what a requeued job writes to, whatever Slurm names. Looked for once the attempt runs (a pending
/// requeued job may still report its previous run's start time), never a file an earlier attempt read.
fn own_log(
    db: &Db<'_>,
    search: &Option<(std::path::PathBuf, LogPattern)>,
    attempt: &Attempt,
    snapshot: &JobSnapshot,
) -> Result<Option<std::path::PathBuf>, StoreError> {
    if search.is_none()
        || attempt.state == JobState::Pending
        || (attempt.log_path.is_some() && attempt.log_path != snapshot.log_path)
    {
        return Ok(None);
    }
    let Some(found) = discover_log(search, attempt, &snapshot.spec.name, &snapshot.user) else {
        return Ok(None);
    };
    if attempt.log_path.as_ref() == Some(&found) {
        return Ok(None);
    }
    let taken = db
        .attempts(attempt.workflow_id)?
        .iter()
        .any(|earlier| earlier.index < attempt.index && earlier.log_path.as_ref() == Some(&found));
    Ok((!taken).then_some(found))
}

/// A job requeued under its id writes its new run to the output file of the previous one: each line
/// belongs to exactly one attempt. Appended to, the new attempt starts where the file ends now and the
/// previous one reads no further; truncated or replaced, the new attempt reads it from the start and
/// the previous one keeps what it had read.
fn share_log(
    db: &Db<'_>,
    previous: &Attempt,
    next: &Attempt,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let (Some(path), Some(next_path)) = (&previous.log_path, &next.log_path) else {
        return Ok(());
    };
    if path != next_path {
        return Ok(());
    }
    let (offset, identity) = db.log_offset(previous.workflow_id, previous.index)?;
    let tail = db.log_tail(previous.workflow_id, previous.index)?;
    let split = match continuation(path, offset, identity.as_deref(), &tail) {
        Ok(split) => split,
        Err(err) => {
            // Unreadable now: the new attempt starts where the previous one stopped reading, so no
            // line is read twice; what the previous run wrote after that is left to the new one.
            tracing::warn!(path = %path.display(), %err, "splitting a shared log between attempts");
            Continuation {
                start: offset,
                previous_end: offset,
                restarted: false,
                identity,
            }
        }
    };
    db.set_log_end(previous.workflow_id, previous.index, split.previous_end)?;
    db.set_log_offset(
        next.workflow_id,
        next.index,
        split.start,
        split.identity.as_deref(),
    )?;
    db.journal(
        Some(next.workflow_id),
        now,
        &if split.restarted {
            format!(
                "attempt {} writes {} from its start (truncated or replaced); attempt {} keeps the {} bytes it read",
                next.index,
                path.display(),
                previous.index,
                split.previous_end
            )
        } else {
            format!(
                "attempt {} appends to {} from byte {}; attempt {} ends there",
                next.index,
                path.display(),
                split.start,
                previous.index
            )
        },
        &[],
    )?;
    Ok(())
}

/// What a workflow's check says of runguard's right to act on the job: a job of another user may be
/// changed only by an operator or an administrator of the scheduler, so its actions may be refused
/// (and are then recorded as what runguard would have done).
fn access_note(job_user: &str, runner: Option<&str>) -> Option<String> {
    let runner = runner.filter(|runner| !runner.is_empty() && *runner != "root")?;
    (!job_user.is_empty() && job_user != runner).then(|| {
        format!(
            "; the job is {job_user}'s and runguard runs as {runner}: the scheduler refuses its \
             actions unless {runner} is an operator or administrator there"
        )
    })
}

/// A job seen for the first time becomes a workflow.
fn enrol(
    db: &Db<'_>,
    backend: BackendKind,
    snapshot: &JobSnapshot,
    now: DateTime<Utc>,
    events: &mut Vec<EngineEvent>,
) -> Result<WorkflowId, StoreError> {
    let mut workflow = Workflow::enrolled(
        snapshot.name.clone(),
        backend,
        snapshot.spec.clone(),
        snapshot.limits.clone(),
        now,
    );
    // Enabled once runguard has seen the job run and read its log.
    workflow.status = WorkflowStatus::Pending;
    workflow.status_reason = Some(format!(
        "checking: job {} is listed; its log is read once it runs",
        snapshot.job_id
    ));
    let id = db.insert_workflow(&workflow)?;
    db.journal(
        Some(id),
        now,
        &format!(
            "enrolled job {} ({}) on {backend}: max requeues {}",
            snapshot.job_id,
            snapshot.name,
            snapshot
                .limits
                .max_requeue_times
                .map_or("system default".to_string(), |n| n.to_string())
        ),
        &[],
    )?;
    events.push(EngineEvent::WorkflowEnrolled {
        workflow_id: id,
        name: snapshot.name.clone(),
        job_id: snapshot.job_id.clone(),
    });
    Ok(id)
}

fn store_digest(
    db: &Db<'_>,
    workflow: &Workflow,
    attempt: &Attempt,
    digest: LogDigest,
    now: DateTime<Utc>,
    events: &mut Vec<EngineEvent>,
) -> Result<(), StoreError> {
    for line in &digest.evidence {
        db.insert_evidence_line(workflow.id, attempt.index, line)?;
    }
    for block in &digest.tracebacks {
        // The root cause of a chain comes first, then what it led to.
        let mut lines: Vec<String> = block
            .earlier
            .iter()
            .map(|raised| format!("caused by {}: {}", raised.exception, raised.message))
            .collect();
        lines.extend(block.lines.iter().cloned());
        db.insert_traceback(
            workflow.id,
            attempt.index,
            block.rank,
            &block.exception,
            &block.message,
            &lines,
        )?;
    }
    let ranks_per_node = workflow.spec.ranks_per_node();
    for (time, iteration, tflops, rank) in &digest.samples {
        db.insert_throughput(&ThroughputSample {
            workflow_id: workflow.id,
            attempt_index: attempt.index,
            time: *time,
            iteration: *iteration,
            tflops_per_gpu: *tflops,
            rank: *rank,
            node: rank
                .and_then(|rank| attempt.nodes.get((rank / ranks_per_node) as usize).cloned()),
        })?;
    }
    let known = if digest.checkpoints.is_empty() {
        Vec::new()
    } else {
        db.checkpoints(workflow.id)?
    };
    let mut newest = known.iter().map(|c| c.iteration).max();
    let mut progressed = false;
    for (iteration, path, time) in digest.checkpoints {
        let duplicate = known
            .iter()
            .any(|c| c.attempt_index == attempt.index && c.iteration == iteration);
        if duplicate {
            continue;
        }
        db.insert_checkpoint(&Checkpoint {
            workflow_id: workflow.id,
            attempt_index: attempt.index,
            iteration,
            time,
            path: path.clone(),
        })?;
        if newest.is_none_or(|newest| iteration > newest) {
            progressed = true;
            newest = Some(iteration);
        }
        events.push(EngineEvent::CheckpointSaved {
            workflow_id: workflow.id,
            attempt_index: attempt.index,
            iteration,
            path,
        });
    }
    // Re-read: observation earlier in this tick may have changed the stored rows.
    if progressed
        && let Some(mut current) = db.workflow(workflow.id)?
        && current.failures_since_checkpoint != 0
    {
        current.failures_since_checkpoint = 0;
        db.update_workflow(&current)?;
        db.journal(
            Some(workflow.id),
            digest.last_time.unwrap_or(current.updated_at),
            "a new checkpoint landed: the crash-loop count is reset",
            &[],
        )?;
    }
    // The heartbeat and progress clocks run on arrival time, not on the lines' own stamps: a node
    // whose clock jumped ahead (or behind) must not hide a hang or fake one.
    db.note_log_activity(
        workflow.id,
        attempt.index,
        (digest.lines > 0).then_some(now),
        digest.last_iteration,
        now,
    )?;
    Ok(())
}

impl Engine {
    /// A running attempt's log that cannot be found is a warning (once, with an alert), not a hang:
    /// the run may be fine and only its output elsewhere.
    fn note_log_presence(
        &mut self,
        workflow: &crate::model::Workflow,
        attempt: &crate::model::Attempt,
        path: &std::path::Path,
        missing: bool,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let key = (workflow.id, attempt.index);
        if !missing && attempt.state == JobState::Running {
            self.checked(workflow.id, attempt, path, now)?;
        }
        if !missing || attempt.state != JobState::Running {
            self.missing_logs.remove(&key);
            return Ok(());
        }
        if !self.missing_logs.insert(key) {
            return Ok(());
        }
        let message = format!(
            "{}: the log of job {} (attempt {}) cannot be found; runguard cannot tell whether it \
             hangs (set telemetry.log_dir or the job's output path)",
            path.display(),
            attempt.job_id,
            attempt.index
        );
        self.store.write(|db| {
            db.insert_notification(&crate::model::Notification {
                id: 0,
                workflow_id: Some(workflow.id),
                time: now,
                event: crate::model::AlertEvent::Notice,
                severity: crate::model::Severity::Warning,
                title: format!("{}: log not found", workflow.name),
                body: message.clone(),
            })
        })?;
        self.warn("log_missing", message, now)
    }

    /// A pending workflow whose job runs and whose log was read is enabled: watched in full.
    fn checked(
        &mut self,
        workflow_id: crate::model::WorkflowId,
        attempt: &crate::model::Attempt,
        path: &std::path::Path,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let mut events = Vec::new();
        self.store.write(|db| {
            let Some(mut workflow) = db.workflow(workflow_id)? else {
                return Ok(());
            };
            if workflow.status != WorkflowStatus::Pending {
                return Ok(());
            }
            let on = if attempt.nodes.is_empty() {
                String::new()
            } else {
                format!(" on {}", attempt.nodes.join(","))
            };
            let runner = std::env::var("USER")
                .or_else(|_| std::env::var("LOGNAME"))
                .ok();
            let reason = format!(
                "checked: job {} runs{on} and its log {} is read{}",
                attempt.job_id,
                path.display(),
                access_note(&workflow.spec.user, runner.as_deref()).unwrap_or_default()
            );
            enable(db, &mut workflow, reason, "watching", now, &mut events)
        })?;
        self.pending_events.extend(events);
        Ok(())
    }

    /// Bytes written after the last complete line (no newline yet) count as a sign of life.
    fn hear_partial_line(
        &mut self,
        attempt: &crate::model::Attempt,
        path: &std::path::Path,
        offset: u64,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let key = (attempt.workflow_id, attempt.index);
        let Ok(length) = std::fs::metadata(path).map(|meta| meta.len()) else {
            return Ok(());
        };
        if length <= offset {
            self.partial_lengths.remove(&key);
            return Ok(());
        }
        let previous = self.partial_lengths.insert(key, length);
        if previous.is_some_and(|previous| previous == length) {
            return Ok(());
        }
        self.store.write(|db| {
            if let Some(mut stored) = db
                .attempts(attempt.workflow_id)?
                .into_iter()
                .find(|a| a.index == attempt.index)
            {
                stored.last_log_time = Some(now);
                db.save_attempt(&stored)?;
            }
            Ok(())
        })?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::access_note;

    #[test]
    fn a_job_of_another_user_is_noted_as_possibly_refused_unless_runguard_is_root() {
        assert_eq!(access_note("alice", Some("alice")), None);
        assert_eq!(access_note("alice", Some("root")), None);
        assert_eq!(access_note("alice", None), None);
        assert_eq!(access_note("", Some("bob")), None);
        let note = access_note("alice", Some("bob")).unwrap_or_default();
        assert!(
            note.contains("the job is alice's and runguard runs as bob"),
            "{note}"
        );
    }
}
