//! Deciding: which attempts failed or hang, what the failure is (attribution, read together with the
//! job's earlier failures and other jobs'), and what the pure policy does about it. The store writes
//! that record a decision are in [`super::journal`].

use std::collections::HashSet;

use chrono::{DateTime, Utc};

use super::journal::Failure;
use super::{Engine, EngineError, with_timeout};
use crate::attribute::{self, Evidence};
use crate::detect;
use crate::model::{
    AnomalyKind, Attempt, EvidenceLine, JobState, Workflow, WorkflowId, WorkflowStatus,
};
use crate::recover::decide;

impl Engine {
    /// Detection on each active workflow's latest attempt: a failed job is a crash, a running job that
    /// has been silent longer than the heartbeat timeout is a hang. Each is attributed and decided once.
    /// `only`: the workflows to look at (those whose logs a wake-up read); all when `None`.
    pub(super) async fn detect_and_decide(
        &mut self,
        now: DateTime<Utc>,
        only: Option<&HashSet<WorkflowId>>,
    ) -> Result<(), EngineError> {
        if only.is_some_and(HashSet::is_empty) {
            return Ok(());
        }
        let workflows = self.store.db().workflows()?;
        // One read for every workflow: few have asked a job to save.
        let asked_to_save = self.asked_to_save()?;
        // Running attempts looked at by a full pass: a fatal line watched on any other attempt (it
        // ended, its workflow stopped) is no longer a deadline to wake for.
        let mut running = only.is_none().then(HashSet::new);
        // Without access to the scheduler nothing is decided: the refusal is the user's to fix.
        for workflow in workflows.into_iter().filter(|w| {
            w.status.is_active()
                && w.status != WorkflowStatus::CredentialError
                && only.is_none_or(|only| only.contains(&w.id))
        }) {
            let mut attempts = self.store.db().attempts(workflow.id)?;
            let Some(attempt) = attempts.pop() else {
                continue;
            };
            if let Some(running) = running.as_mut()
                && attempt.state == JobState::Running
            {
                running.insert((workflow.id, attempt.index));
            }
            if workflow.status == WorkflowStatus::Recovering {
                self.watch_recovery(&workflow, &attempt, now)?;
            }
            if asked_to_save.contains(&workflow.id)
                && self.follow_checkpoint_request(&workflow, &attempt, now)?
            {
                continue;
            }
            // An attempt the scheduler requeued by itself (a node failure with JobRequeue=1): its end
            // was never decided on, and the next attempt waits in the queue, possibly for the same node.
            if let Some(previous) = attempts.pop()
                && previous.state == JobState::Requeued
                && !attempt.state.is_terminal()
                && !self
                    .store
                    .db()
                    .attempt_handled(workflow.id, previous.index)?
            {
                let summary = format!(
                    "job {} (attempt {}) was requeued by the scheduler itself (restart {})",
                    previous.job_id, previous.index, attempt.restart_count
                );
                let mut failed = previous;
                // Decided against the job as it is now: already requeued once more.
                failed.restart_count = attempt.restart_count;
                self.handle_failure(workflow, failed, AnomalyKind::Crash, summary, now)
                    .await?;
                continue;
            }
            if self
                .store
                .db()
                .attempt_handled(workflow.id, attempt.index)?
            {
                continue;
            }
            if attempt.state == JobState::Completed {
                self.complete(workflow, &attempt, now)?;
                continue;
            }
            if attempt.state == JobState::Cancelled {
                self.stop_cancelled(&workflow, &attempt, now)?;
                continue;
            }
            let dead = self.dead_nodes_of(&attempt, now);
            if !dead.is_empty() {
                let summary = self.record_dead_nodes(&attempt, &dead, now)?;
                self.handle_failure(workflow, attempt, AnomalyKind::Crash, summary, now)
                    .await?;
                continue;
            }
            if let Some(summary) = self.quarantined_under(&attempt)? {
                self.handle_failure(workflow, attempt, AnomalyKind::Crash, summary, now)
                    .await?;
                continue;
            }
            if let Some((kind, summary)) = self.anomaly_of(&attempt, now)? {
                self.handle_failure(workflow, attempt, kind, summary, now)
                    .await?;
                continue;
            }
            self.watch_health(&workflow, &attempt, now)?;
        }
        if let Some(running) = running {
            self.fatal_lines.retain(|key, _| running.contains(key));
        }
        Ok(())
    }

    pub(super) fn anomaly_of(
        &mut self,
        attempt: &Attempt,
        now: DateTime<Utc>,
    ) -> Result<Option<(AnomalyKind, String)>, EngineError> {
        if attempt.state.is_failure() {
            let exit = attempt
                .exit_code
                .map(|code| match detect::signal_name(code - 128) {
                    Some(signal) if code > 128 => {
                        format!(", exit code {code} (killed by {signal})")
                    }
                    _ => format!(", exit code {code}"),
                })
                .unwrap_or_default();
            let reason = attempt
                .reason
                .as_deref()
                .map(|reason| format!(", reason {reason}"))
                .unwrap_or_default();
            return Ok(Some((
                AnomalyKind::Crash,
                format!(
                    "job {} (attempt {}) ended {}{exit}{reason}",
                    attempt.job_id, attempt.index, attempt.state_raw
                ),
            )));
        }
        if let Some(finding) = detect::no_progress(attempt, now, &self.config.detect) {
            return Ok(Some((finding.kind, finding.summary)));
        }
        if attempt.state != JobState::Running
            || self
                .missing_logs
                .contains(&(attempt.workflow_id, attempt.index))
        {
            // A log that cannot be found or read is a warning of its own, not a hang.
            return Ok(None);
        }
        if let Some(finding) = self.fatal_line(attempt, now)? {
            return Ok(Some((finding.kind, finding.summary)));
        }
        // Before its first line, an attempt is timed from when it was seen running: a requeued job can
        // still report the start time of its previous run.
        let Some(since) = detect::sections::silent_since(attempt) else {
            return Ok(None);
        };
        let silent = (now - since).num_seconds();
        let heartbeat = self.config.engine.heartbeat_timeout_secs;
        // The shortest bound any section can have: below it, nothing needs reading.
        if silent < (self.config.detect.step_timeout_floor_secs.min(heartbeat) as i64) {
            return Ok(None);
        }
        let bound = self.silence_bound(attempt)?;
        if silent < bound.secs as i64 {
            return Ok(None);
        }
        Ok(Some((
            AnomalyKind::Hang,
            format!(
                "job {} (attempt {}) is running but its log received nothing for {silent} s in its {} \
                 (bound {} s: {})",
                attempt.job_id,
                attempt.index,
                bound.section.as_str(),
                bound.secs,
                bound.basis
            ),
        )))
    }

    /// A fatal line the running `attempt` printed, once its progress stopped after it.
    fn fatal_line(
        &mut self,
        attempt: &Attempt,
        now: DateTime<Utc>,
    ) -> Result<Option<detect::Finding>, EngineError> {
        let key = (attempt.workflow_id, attempt.index);
        if self.config.detect.fatal_confirm_max_secs == 0 {
            self.fatal_lines.remove(&key);
            return Ok(None);
        }
        // Read on every look, even right after a progress report: a fatal line often arrives in the
        // same read as the report before it.
        let db = self.store.db();
        let lines = db.evidence_lines(attempt.workflow_id, attempt.index)?;
        if lines.is_empty() {
            // Nothing alarming read: most runs, most of the time; no progress to read either.
            self.fatal_lines.remove(&key);
            return Ok(None);
        }
        let progress = db
            .throughput_window(attempt.workflow_id, attempt.index, 0, 50)?
            .1;
        let tracker = self.fatal_lines.entry(key).or_default();
        let finding = tracker.observe(
            attempt,
            &detect::fatal_line::RunningLog {
                lines: &lines,
                progress: &progress,
            },
            &self.catalog,
            now,
            &self.config.detect,
        );
        if tracker.is_idle() {
            self.fatal_lines.remove(&key);
        }
        Ok(finding)
    }

    /// How long `attempt` may stay silent in the section it is in, learned from its workflow's
    /// recent progress reports, saves and earlier start-ups.
    fn silence_bound(&self, attempt: &Attempt) -> Result<detect::sections::Bound, EngineError> {
        let db = self.store.db();
        let attempts = db.attempts(attempt.workflow_id)?;
        let mut throughput = Vec::new();
        for earlier in attempts.iter().filter(|a| a.index < attempt.index) {
            throughput.extend(
                db.throughput_window(attempt.workflow_id, earlier.index, 1, 0)?
                    .0,
            );
        }
        throughput.extend(
            db.throughput_window(attempt.workflow_id, attempt.index, 0, 200)?
                .1,
        );
        let checkpoints = db.checkpoints(attempt.workflow_id)?;
        Ok(detect::sections::silence_bound(
            attempt,
            &detect::sections::RunHistory {
                attempts: &attempts,
                throughput: &throughput,
                checkpoints: &checkpoints,
            },
            self.saving.contains(&(attempt.workflow_id, attempt.index)),
            &self.config.detect,
            self.config.engine.heartbeat_timeout_secs,
        ))
    }

    /// Attributes a failure, decides, and stores the anomaly, the attribution, the intents and the
    /// workflow's new status in one transaction: the intent exists before anything runs.
    pub(super) async fn handle_failure(
        &mut self,
        workflow: Workflow,
        attempt: Attempt,
        kind: AnomalyKind,
        summary: String,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let mut lines = self.store.db().evidence_lines(workflow.id, attempt.index)?;
        let usable_nodes = self.usable_nodes(&workflow, &attempt.job_id, now).await?;
        // The scheduler's own verdict is evidence too (NODE_FAIL, OUT_OF_MEMORY, PREEMPTED...).
        let scheduler_requeued = attempt.state == JobState::Requeued;
        if attempt.state.is_terminal() || scheduler_requeued {
            lines.push(EvidenceLine {
                time: attempt.end_time.unwrap_or(now),
                rank: None,
                text: scheduler_line(&attempt),
            });
        }
        // After a node failure, the node the scheduler now keeps out of scheduling is the culprit.
        if (attempt.state == JobState::NodeFail || scheduler_requeued)
            && let Some(usable) = &usable_nodes
        {
            for node in attempt.nodes.iter().filter(|node| !usable.usable_now(node)) {
                lines.push(EvidenceLine {
                    time: now,
                    rank: None,
                    text: format!(
                        "scheduler: node {node} of job {} is no longer usable (down, drained or not responding)",
                        attempt.job_id
                    ),
                });
            }
        }
        let ranks_per_node = workflow.spec.ranks_per_node();
        let mut attribution = attribute::attribute(
            &self.catalog,
            &Evidence {
                workflow_id: workflow.id,
                attempt_index: attempt.index,
                anomaly: kind,
                lines: &lines,
                nodes: &attempt.nodes,
                ranks_per_node,
                exit_code: attempt.exit_code,
                now,
            },
        );
        if let Some(folded) = self.correlate(&workflow, &attempt, &attribution, now)? {
            attribution = folded;
        }
        let mut decision = {
            let policy = self.policy_for(&workflow)?;
            decide(
                &workflow,
                &attempt,
                kind,
                &attribution,
                &policy,
                usable_nodes.as_ref(),
            )
        };
        if scheduler_requeued {
            for intent in &mut decision.intents {
                intent.params.scheduler_requeued = true;
            }
        }
        // A crash is shown with the last error block of its log; a hang with what attribution found.
        let anomaly_evidence = match self.store.db().last_traceback(workflow.id, attempt.index)? {
            Some(block) if kind == AnomalyKind::Crash => block,
            _ if kind == AnomalyKind::Crash && !lines.is_empty() => {
                detect::last_error_block(&lines)
            }
            _ => attribution.evidence.clone(),
        };
        let incident = Self::attribution_incident(&attempt, &attribution);
        self.journal_failure(
            workflow,
            &attempt,
            Failure {
                kind,
                summary,
                evidence: anomaly_evidence,
            },
            attribution,
            decision,
            now,
        )?;
        self.note_incidents(incident.into_iter().collect(), now)
    }

    /// The nodes that could run the workflow's job now and ever, when the backend can tell; a
    /// scheduler that cannot answer leaves the decision to the other rules.
    pub(super) async fn usable_nodes(
        &mut self,
        workflow: &Workflow,
        job_id: &str,
        now: DateTime<Utc>,
    ) -> Result<Option<crate::backend::NodeCapacity>, EngineError> {
        if self.outage.is_some() {
            return Ok(None);
        }
        match with_timeout(self.backend.usable_nodes(job_id, &workflow.spec)).await {
            Ok(nodes) => self.with_phase_minimum(workflow.id, nodes),
            Err(err) => {
                self.warn(
                    "backend_unavailable",
                    format!("listing usable nodes: {err}"),
                    now,
                )?;
                Ok(None)
            }
        }
    }

    /// Reads this failure together with the job's earlier failures and other jobs' recent ones.
    pub(super) fn correlate(
        &self,
        workflow: &Workflow,
        attempt: &Attempt,
        attribution: &crate::model::Attribution,
        now: DateTime<Utc>,
    ) -> Result<Option<crate::model::Attribution>, EngineError> {
        use crate::attribute::correlate::{self, OtherFailure, PastFailure};
        let db = self.store.db();
        let attempts = db.attempts(workflow.id)?;
        let earlier_attributions = db.attributions(workflow.id)?;
        let earlier: Vec<PastFailure<'_>> = earlier_attributions
            .iter()
            .filter_map(|past| {
                attempts
                    .iter()
                    .find(|a| a.index == past.attempt_index)
                    .map(|a| PastFailure {
                        attempt: a,
                        attribution: past,
                    })
            })
            .collect();
        let mut folded = correlate::across_attempts(attempt, attribution, &earlier);
        let recent = db.attributions_since(now - correlate::NODE_WINDOW)?;
        let mut other_nodes = Vec::new();
        for other in recent.iter().filter(|a| a.workflow_id != workflow.id) {
            if let Some(failed) = db
                .attempts(other.workflow_id)?
                .into_iter()
                .find(|a| a.index == other.attempt_index)
            {
                other_nodes.push((other, failed.nodes));
            }
        }
        let others: Vec<OtherFailure<'_>> = other_nodes
            .iter()
            .map(|(other, nodes)| OtherFailure {
                workflow_id: other.workflow_id,
                nodes,
                time: other.time,
                category: &other.category,
                component: other.component,
            })
            .collect();
        let base = folded.clone().unwrap_or_else(|| attribution.clone());
        if let Some(node_fault) = correlate::across_jobs(attempt, &base, &others, now) {
            folded = Some(node_fault);
        }
        Ok(folded)
    }
}

/// The scheduler's verdict on an attempt as one evidence line, in the form signatures match:
/// `scheduler: job 4201 NODE_FAIL reason=NodeDown exit_code=1`.
pub fn scheduler_line(attempt: &Attempt) -> String {
    let mut line = format!("scheduler: job {} {}", attempt.job_id, attempt.state_raw);
    if attempt.state == JobState::Requeued {
        line.push_str(" by the scheduler");
    }
    if let Some(reason) = &attempt.reason {
        line.push_str(&format!(" reason={reason}"));
    }
    if let Some(code) = attempt.exit_code {
        line.push_str(&format!(" exit_code={code}"));
    }
    line
}
