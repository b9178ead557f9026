//! Reading the logs: what every followed log wrote since the last tick, read in steps, digested and
//! stored (evidence, tracebacks, throughput, checkpoints), with the warnings a log itself raises
//! (missing, truncated, rotated, unreadable). Nothing here acts on the cluster.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};

use super::{Engine, EngineError, EngineEvent};
use crate::attribute::scan::ShapeMemory;
use crate::model::{Attempt, Checkpoint, JobState, ThroughputSample, Workflow, WorkflowId};
use crate::store::{Db, LogPosition, StoreError};
use crate::telemetry::pipeline::{Digester, LogDigest};
use crate::telemetry::straggler_report::StragglerReport;
use crate::telemetry::tail::{Chunk, TailLimits, join_tails, read_new_lines_reusing, step_limits};
use crate::telemetry::watch::absolute;

impl Engine {
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
    /// at most [`READ_STEP_BYTES`](crate::telemetry::tail::READ_STEP_BYTES) each read, digested and
    /// stored before the next: a step's bytes are still in the core's cache while every pass goes over
    /// them. Returns whether a read held something to decide on at once (see [`Engine::read_logs`]).
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
                self.settle_open(workflow, &attempt)?;
                return Ok(false);
            }
            budget = budget.min(end - offset);
        }
        let mut touched = false;
        let mut first = true;
        // The steps of one tick's read repeat the log's line shapes.
        let mut shapes = ShapeMemory::default();
        loop {
            let step = step_limits(budget, limits.max_line_bytes);
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
                    self.settle_open(workflow, &attempt)?;
                    self.hear_partial_line(&attempt, path, offset, now)?;
                }
                *spare = chunk;
                return Ok(touched);
            }
            let left = chunk.budget_left(offset, budget);
            // The last step of a finished attempt closes what its tracebacks hold.
            let last = left.is_none();
            touched |=
                self.take_in_read(workflow, &attempt, path, &chunk, last, &mut shapes, now)?;
            let Some(left) = left else {
                *spare = chunk;
                return Ok(touched);
            };
            budget = left;
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

    /// Settles what `attempt`'s log left open once it went quiet (see
    /// [`OpenState::settle`](crate::telemetry::pipeline::OpenState::settle)).
    fn settle_open(&mut self, workflow: &Workflow, attempt: &Attempt) -> Result<(), EngineError> {
        let Some(open) = self.open_reads.get_mut(&(workflow.id, attempt.index)) else {
            return Ok(());
        };
        let now = self.clock.now();
        let (tracebacks, evidence) = open.settle(attempt.last_log_time.unwrap_or(now));
        if tracebacks.is_empty() && evidence.is_empty() {
            return Ok(());
        }
        let digest = LogDigest {
            tracebacks,
            evidence,
            ..LogDigest::default()
        };
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
        let mut open = self.open_reads.remove(&key).unwrap_or_default();
        let chunk = open.rejoin(chunk);
        let catalog = &self.catalog;
        let mut digester = Digester::new(
            |line: &str| catalog.is_notable(line),
            now,
            attempt.last_log_time,
            attempt.last_iteration,
        )
        .resume(open);
        digester.push_chunk(&chunk, &catalog.line_marks_remembering(&chunk, shapes));
        if attempt.state.is_terminal() && last {
            // The attempt writes no more: every traceback it began is as complete as it will be.
            digester.finish()
        } else {
            let (digest, open) = digester.finish_keeping();
            self.open_reads.insert(key, open);
            digest
        }
    }

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
