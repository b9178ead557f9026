//! The engine loop: observe → decide → act, once per tick, on every enrolled workflow.
//!
//! Observation reads the backend and the logs and never acts; decisions come from the pure policy in
//! [`crate::recover`]; every intent is stored before it runs, and an action found `executing` after a
//! restart is checked against the scheduler before anything is repeated.

mod act;
mod events;
mod nodes;
mod observe;
mod outage;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::broadcast;

pub use events::EngineEvent;

use crate::attribute::{self, Catalog, Evidence};
use crate::backend::{Backend, BackendError};
use crate::clock::Clock;
use crate::config::Config;
use crate::detect;
use crate::model::{
    Action, ActionState, AlertEvent, Anomaly, AnomalyKind, Attempt, JobState, Notification,
    Severity, Workflow, WorkflowId, WorkflowStatus,
};
use crate::recover::{Policy, decide};
use crate::store::{CommandKind, Store, StoreError};
use crate::telemetry::watch::LogWatcher;

/// Shortest real time between two ticks started by log changes.
const MIN_TICK_GAP: Duration = Duration::from_millis(200);

/// Longest a single backend call may take before it counts as the scheduler being down.
const BACKEND_CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// What stops the engine.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The store failed: the engine cannot keep its promises without it, so it stops.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// How the engine runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineOptions {
    /// Apply whitelisted actions without asking (`--auto`); otherwise every action waits for approval.
    pub auto: bool,
}

/// Why [`Engine::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunOutcome {
    /// Asked to stop (signal, frontend).
    Shutdown,
    /// Every workflow is completed and no action is waiting to run.
    Settled,
}

/// The recovery engine over one backend and one store.
pub struct Engine {
    store: Store,
    backend: Arc<dyn Backend>,
    clock: Arc<dyn Clock>,
    config: Config,
    catalog: Catalog,
    policy: Policy,
    events: broadcast::Sender<EngineEvent>,
    /// Events of the current step, sent once its transaction committed.
    pending_events: Vec<EngineEvent>,
    /// Straggler streaks per (workflow, attempt); rebuilt from new reports after a restart.
    stragglers: HashMap<(WorkflowId, u32), detect::StragglerTracker>,
    /// Wakes the loop early when a followed log changes.
    log_watcher: LogWatcher,
    /// What the GPU status commands last reported.
    node_probes: nodes::NodeProbes,
    /// Tracebacks still open at the end of a read, per (workflow, attempt).
    tracebacks: HashMap<(WorkflowId, u32), crate::telemetry::traceback::TracebackAssembler>,
    /// The scheduler is not answering: since when, and when to call it again.
    outage: Option<outage::Outage>,
    /// Workflows may sit in `credential_error` (a refusal, or a store from an earlier run): the
    /// next answer of the scheduler lets them be watched again.
    credentials_in_doubt: bool,
}

impl Engine {
    pub fn new(
        store: Store,
        backend: Arc<dyn Backend>,
        clock: Arc<dyn Clock>,
        config: Config,
        catalog: Catalog,
        options: EngineOptions,
    ) -> Self {
        let mut policy = Policy::from_config(&config.recovery, !options.auto);
        policy.can_change_spec = backend.can_recreate();
        let (events, _) = broadcast::channel(1024);
        let log_watcher = if config.engine.file_events {
            LogWatcher::new()
        } else {
            LogWatcher::polling_only()
        };
        // A backend that hears of changes (watch streams) starts the next tick early, as a log does.
        backend.set_waker(log_watcher.wake());
        Self {
            store,
            backend,
            clock,
            config,
            catalog,
            policy,
            events,
            pending_events: Vec::new(),
            stragglers: HashMap::new(),
            log_watcher,
            node_probes: nodes::NodeProbes::default(),
            tracebacks: HashMap::new(),
            outage: None,
            credentials_in_doubt: true,
        }
    }

    /// Events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<EngineEvent> {
        self.events.subscribe()
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Starts the next tick early when notified, as a changed log does: a frontend in the same process
    /// uses it after queueing a command, so an approval runs at once instead of at the next poll.
    pub fn waker(&self) -> Arc<tokio::sync::Notify> {
        self.log_watcher.wake()
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// Runs ticks until `shutdown` resolves or, with `until_settled`, until nothing is left to do.
    /// A tick always completes before the engine stops, so its state is committed.
    pub async fn run(
        &mut self,
        shutdown: impl Future<Output = ()>,
        until_settled: bool,
    ) -> Result<RunOutcome, EngineError> {
        tokio::pin!(shutdown);
        self.reconcile()?;
        let poll = Duration::from_secs_f64(self.config.engine.poll_interval_secs);
        let wake = self.log_watcher.wake();
        loop {
            let started = tokio::time::Instant::now();
            self.tick().await?;
            if until_settled && self.settled()? {
                return Ok(RunOutcome::Settled);
            }
            let wait = self.clock.real_duration(poll);
            // A log change starts the next tick early, but not more often than MIN_TICK_GAP: a job that
            // writes constantly must not turn the loop into a busy one.
            let woken = async {
                wake.notified().await;
                tokio::time::sleep_until(started + MIN_TICK_GAP).await;
            };
            tokio::select! {
                () = &mut shutdown => return Ok(RunOutcome::Shutdown),
                () = tokio::time::sleep(wait) => {}
                () = woken => {}
            }
        }
    }

    /// After a restart: an action left `executing` may or may not have run. It goes back to `approved`,
    /// and the executor's pre-check (re-reading the job) tells which, so nothing runs twice.
    pub fn reconcile(&mut self) -> Result<(), EngineError> {
        let now = self.clock.now();
        self.store.write(|db| {
            for mut action in db.actions_in_state(ActionState::Executing)? {
                action.state = ActionState::Approved;
                action.updated_at = now;
                db.update_action(&action)?;
                db.journal(
                    Some(action.workflow_id),
                    now,
                    &format!(
                        "action {} ({}) was executing when the engine stopped: re-checking the job before deciding whether it ran",
                        action.id,
                        action.kind.as_str()
                    ),
                    &[],
                )?;
            }
            Ok(())
        })?;
        Ok(())
    }

    /// Every workflow is completed and no action is approved or executing.
    pub fn settled(&self) -> Result<bool, EngineError> {
        let db = self.store.db();
        let workflows = db.workflows()?;
        let busy = !db.actions_in_state(ActionState::Approved)?.is_empty()
            || !db.actions_in_state(ActionState::Executing)?.is_empty();
        Ok(!workflows.is_empty()
            && workflows
                .iter()
                .all(|workflow| workflow.status == WorkflowStatus::Completed)
            && !busy)
    }

    /// One pass of observe → decide → act.
    pub async fn tick(&mut self) -> Result<(), EngineError> {
        let now = self.clock.now();
        self.apply_commands(now)?;
        // While the scheduler is down the logs are still read and failures still decided, but the
        // scheduler is called again only after the backoff, and no action runs until it answers.
        if !self.backing_off(now) {
            self.observe_jobs(now).await?;
        }
        self.read_logs(now)?;
        self.read_node_logs(now)?;
        self.probe_nodes(now).await?;
        self.detect_and_decide(now).await?;
        if self.outage.is_none() {
            self.execute_approved().await?;
        }
        Ok(())
    }

    /// Applies approvals and rejections queued by other processes.
    fn apply_commands(&mut self, now: DateTime<Utc>) -> Result<(), EngineError> {
        let commands = self.store.db().pending_commands()?;
        for command in commands {
            let mut events = Vec::new();
            self.store.write(|db| {
                let outcome = apply_command(db, command.kind, command.action_id, now, &mut events)?;
                db.finish_command(command.id, &outcome)?;
                Ok(())
            })?;
            self.pending_events.extend(events);
            self.flush_events();
        }
        Ok(())
    }

    /// Detection on each active workflow's latest attempt: a failed job is a crash, a running job that
    /// has been silent longer than the heartbeat timeout is a hang. Each is attributed and decided once.
    async fn detect_and_decide(&mut self, now: DateTime<Utc>) -> Result<(), EngineError> {
        let workflows = self.store.db().workflows()?;
        // Without access to the scheduler nothing is decided: the refusal is the user's to fix.
        for workflow in workflows
            .into_iter()
            .filter(|w| w.status.is_active() && w.status != WorkflowStatus::CredentialError)
        {
            let mut attempts = self.store.db().attempts(workflow.id)?;
            let Some(attempt) = attempts.pop() else {
                continue;
            };
            if workflow.status == WorkflowStatus::Recovering {
                self.watch_recovery(&workflow, &attempt, now)?;
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
            if let Some((kind, summary)) = self.anomaly_of(&attempt, now) {
                self.handle_failure(workflow, attempt, kind, summary, now)
                    .await?;
                continue;
            }
            self.watch_health(&workflow, &attempt, now)?;
        }
        Ok(())
    }

    /// The rules that warn without stopping the run: throughput drop, checkpoint stall, stuck pending.
    fn watch_health(
        &mut self,
        workflow: &Workflow,
        attempt: &Attempt,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let config = &self.config.detect;
        let mut findings = Vec::new();
        if attempt.state == JobState::Running {
            let head = config.throughput_warmup_samples + config.throughput_baseline_samples;
            let (first, last) = self.store.db().throughput_window(
                workflow.id,
                attempt.index,
                head,
                config.throughput_drop_samples,
            )?;
            findings.extend(detect::throughput_drop(&first, &last, config));
            let checkpoints = self.store.db().checkpoints(workflow.id)?;
            findings.extend(detect::checkpoint_stall(attempt, &checkpoints, now, config));
        }
        findings.extend(detect::stuck_pending(attempt, now, config));
        findings.extend(self.blocked_upstream(workflow, attempt)?);
        for finding in findings {
            self.raise_warning(workflow, attempt, finding, now)?;
        }
        Ok(())
    }

    /// The recovery watchdog: a workflow still recovering long after its failure needs a person.
    fn watch_recovery(
        &mut self,
        workflow: &Workflow,
        attempt: &Attempt,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let limit = self.config.recovery.watchdog_secs;
        if limit == 0 {
            return Ok(());
        }
        let failure = self
            .store
            .db()
            .anomalies(workflow.id)?
            .into_iter()
            .rev()
            .find(|anomaly| {
                matches!(
                    anomaly.kind,
                    AnomalyKind::Crash | AnomalyKind::Hang | AnomalyKind::CrashLoop
                )
            });
        let Some(failure) = failure else {
            return Ok(());
        };
        let waited = now - failure.time;
        if waited.num_seconds() < i64::try_from(limit).unwrap_or(i64::MAX) {
            return Ok(());
        }
        let actions = self.store.db().actions(workflow.id)?;
        let waiting_for_approval: Vec<String> = actions
            .iter()
            .filter(|action| {
                action.attempt_index == failure.attempt_index
                    && action.state == ActionState::Proposed
                    && action.kind.restarts_the_run()
            })
            .map(|action| format!("action {} ({})", action.id, action.kind.as_str()))
            .collect();
        let stuck_at = if !waiting_for_approval.is_empty() {
            format!("{} waits for approval", waiting_for_approval.join(", "))
        } else if attempt.index > failure.attempt_index {
            format!(
                "attempt {} (job {}) is {}{}",
                attempt.index,
                attempt.job_id,
                attempt.state_raw.to_lowercase(),
                attempt
                    .reason
                    .as_deref()
                    .map(|reason| format!(" ({reason})"))
                    .unwrap_or_default()
            )
        } else {
            "no new attempt has started".to_string()
        };
        let finding = detect::Finding {
            kind: AnomalyKind::RecoveryStalled,
            summary: format!(
                "recovering for {} min since the {} of attempt {} and the run is not back: {stuck_at}",
                waited.num_minutes(),
                failure.kind.as_str(),
                failure.attempt_index
            ),
            evidence: vec![failure.summary.clone()],
            node: None,
        };
        self.raise_warning(workflow, attempt, finding, now)
    }

    /// A pending job whose upstream dependency failed waits forever: the upstream failure is the cause,
    /// escalated with the upstream job's own attribution.
    fn blocked_upstream(
        &self,
        workflow: &Workflow,
        attempt: &Attempt,
    ) -> Result<Option<detect::Finding>, EngineError> {
        let waiting_on_dependency = attempt.state == JobState::Pending
            && attempt
                .reason
                .as_deref()
                .is_some_and(|reason| reason.contains("Dependency"));
        let Some(upstream_job) = workflow.spec.dependency.as_deref() else {
            return Ok(None);
        };
        if !waiting_on_dependency {
            return Ok(None);
        }
        let db = self.store.db();
        let Some(upstream) = db.attempt_by_job(&workflow.backend, upstream_job)? else {
            return Ok(None);
        };
        if !upstream.state.is_failure() {
            return Ok(None);
        }
        let cause = db
            .attributions(upstream.workflow_id)?
            .into_iter()
            .rev()
            .find(|a| a.attempt_index == upstream.index);
        let what = cause
            .as_ref()
            .map(|a| {
                format!(
                    "{}{}",
                    a.category,
                    a.culprit
                        .node
                        .as_deref()
                        .map(|n| format!(" on {n}"))
                        .unwrap_or_default()
                )
            })
            .unwrap_or_else(|| upstream.state_raw.clone());
        Ok(Some(detect::Finding {
            kind: AnomalyKind::StuckPending,
            summary: format!(
                "job {} waits on job {upstream_job}, which failed ({what}); it will not start until that \
                 is fixed (scheduler reason {})",
                attempt.job_id,
                attempt.reason.as_deref().unwrap_or("-")
            ),
            evidence: cause.map(|a| a.evidence).unwrap_or_default(),
            node: None,
        }))
    }

    /// Records a finding that needs the user's attention but no recovery; once per attempt and kind.
    pub(super) fn raise_warning(
        &mut self,
        workflow: &Workflow,
        attempt: &Attempt,
        finding: detect::Finding,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let raised = self.store.write(|db| {
            if db.anomaly_raised(workflow.id, attempt.index, finding.kind)? {
                return Ok(false);
            }
            db.insert_anomaly(&Anomaly {
                id: 0,
                workflow_id: workflow.id,
                attempt_index: attempt.index,
                kind: finding.kind,
                time: now,
                summary: finding.summary.clone(),
                evidence: finding.evidence.clone(),
            })?;
            db.journal(
                Some(workflow.id),
                now,
                &format!(
                    "attempt {} {}: {} (no recovery action: the run continues)",
                    attempt.index,
                    finding.kind.as_str(),
                    finding.summary
                ),
                &finding.evidence,
            )?;
            db.insert_notification(&Notification {
                id: 0,
                workflow_id: Some(workflow.id),
                time: now,
                event: AlertEvent::of_warning(finding.kind),
                severity: if finding.kind == AnomalyKind::RecoveryStalled {
                    Severity::Critical
                } else {
                    Severity::Warning
                },
                title: format!(
                    "{}: {}{}",
                    workflow.name,
                    finding.kind.as_str().replace('_', " "),
                    finding
                        .node
                        .as_deref()
                        .map(|node| format!(" on {node}"))
                        .unwrap_or_default()
                ),
                body: finding.summary.clone(),
            })?;
            Ok(true)
        })?;
        if raised {
            self.pending_events.push(EngineEvent::AnomalyRaised {
                workflow_id: workflow.id,
                attempt_index: attempt.index,
                kind: finding.kind,
                summary: finding.summary,
            });
            self.flush_events();
        }
        Ok(())
    }

    fn anomaly_of(&self, attempt: &Attempt, now: DateTime<Utc>) -> Option<(AnomalyKind, String)> {
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
            return Some((
                AnomalyKind::Crash,
                format!(
                    "job {} (attempt {}) ended {}{exit}{reason}",
                    attempt.job_id, attempt.index, attempt.state_raw
                ),
            ));
        }
        if let Some(finding) = detect::no_progress(attempt, now, &self.config.detect) {
            return Some((finding.kind, finding.summary));
        }
        if attempt.state == JobState::Running {
            // Before its first line, an attempt is timed from when it was seen running: a requeued
            // job can still report the start time of its previous run.
            let since = attempt
                .last_log_time
                .or(attempt.start_time.max(Some(attempt.updated_at)))?;
            let silent = (now - since).num_seconds();
            if silent >= self.config.engine.heartbeat_timeout_secs as i64 {
                return Some((
                    AnomalyKind::Hang,
                    format!(
                        "job {} (attempt {}) is running but wrote no log line for {silent} s (heartbeat timeout {} s)",
                        attempt.job_id, attempt.index, self.config.engine.heartbeat_timeout_secs
                    ),
                ));
            }
        }
        None
    }

    /// The run finished its training: the workflow is done.
    fn complete(
        &mut self,
        mut workflow: Workflow,
        attempt: &Attempt,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let reason = format!(
            "job {} completed (attempt {})",
            attempt.job_id, attempt.index
        );
        workflow.succeeded = true;
        self.end_workflow(workflow, attempt, reason, now)
    }

    fn stop_cancelled(
        &mut self,
        workflow: &Workflow,
        attempt: &Attempt,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let reason = format!(
            "job {} was cancelled outside runguard ({}); not recovering",
            attempt.job_id, attempt.state_raw
        );
        self.end_workflow(workflow.clone(), attempt, reason, now)
    }

    /// Completes a workflow for `reason` (its run finished, or recovery ends), journaled once.
    fn end_workflow(
        &mut self,
        mut workflow: Workflow,
        attempt: &Attempt,
        reason: String,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let mut events = Vec::new();
        self.store.write(|db| {
            db.mark_attempt_handled(workflow.id, attempt.index)?;
            db.journal(Some(workflow.id), now, &reason, &[])?;
            complete_workflow(db, &mut workflow, reason, now, &mut events)
        })?;
        self.pending_events.extend(events);
        self.flush_events();
        Ok(())
    }

    /// The nodes of the workflow's partition that can run jobs now, when the backend can tell; a
    /// scheduler that cannot answer leaves the decision to the other rules.
    async fn usable_nodes(
        &mut self,
        workflow: &Workflow,
        now: DateTime<Utc>,
    ) -> Result<Option<Vec<String>>, EngineError> {
        if self.outage.is_some() {
            return Ok(None);
        }
        let partition = workflow.spec.partition.as_deref();
        match with_timeout(self.backend.usable_nodes(partition)).await {
            Ok(nodes) => Ok(nodes),
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

    /// Attributes a failure, decides, and stores the anomaly, the attribution, the intents and the
    /// workflow's new status in one transaction: the intent exists before anything runs.
    async fn handle_failure(
        &mut self,
        mut workflow: Workflow,
        attempt: Attempt,
        kind: AnomalyKind,
        summary: String,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let mut lines = self.store.db().evidence_lines(workflow.id, attempt.index)?;
        let usable_nodes = self.usable_nodes(&workflow, now).await?;
        // The scheduler's own verdict is evidence too (NODE_FAIL, OUT_OF_MEMORY, PREEMPTED...).
        let scheduler_requeued = attempt.state == JobState::Requeued;
        if attempt.state.is_terminal() || scheduler_requeued {
            lines.push(crate::model::EvidenceLine {
                time: attempt.end_time.unwrap_or(now),
                rank: None,
                text: scheduler_line(&attempt),
            });
        }
        // After a node failure, the node the scheduler now keeps out of scheduling is the culprit.
        if (attempt.state == JobState::NodeFail || scheduler_requeued)
            && let Some(usable) = &usable_nodes
        {
            for node in attempt.nodes.iter().filter(|node| !usable.contains(node)) {
                lines.push(crate::model::EvidenceLine {
                    time: now,
                    rank: None,
                    text: format!(
                        "scheduler: node {node} of job {} is no longer usable (down, drained or not responding)",
                        attempt.job_id
                    ),
                });
            }
        }
        let ranks_per_node = workflow.spec.gpus_per_node.max(1);
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
        let mut decision = decide(
            &workflow,
            &attempt,
            kind,
            &attribution,
            &self.policy,
            usable_nodes.as_deref(),
        );
        if scheduler_requeued {
            for intent in &mut decision.intents {
                intent.params.scheduler_requeued = true;
            }
        }
        let backend = Arc::clone(&self.backend);
        let mut events = Vec::new();
        let evidence_quote = attribution.evidence.clone();
        // A crash is shown with the last error block of its log; a hang with what attribution found.
        let anomaly_evidence = match self.store.db().last_traceback(workflow.id, attempt.index)? {
            Some(block) if kind == AnomalyKind::Crash => block,
            _ if kind == AnomalyKind::Crash && !lines.is_empty() => {
                detect::last_error_block(&lines)
            }
            _ => evidence_quote.clone(),
        };
        self.store.write(|db| {
            let anomaly = Anomaly {
                id: 0,
                workflow_id: workflow.id,
                attempt_index: attempt.index,
                kind,
                time: now,
                summary: summary.clone(),
                evidence: anomaly_evidence.clone(),
            };
            db.insert_anomaly(&anomaly)?;
            events.push(EngineEvent::AnomalyRaised {
                workflow_id: workflow.id,
                attempt_index: attempt.index,
                kind,
                summary: summary.clone(),
            });
            attribution.id = db.insert_attribution(&attribution)?;
            events.push(EngineEvent::Attributed {
                workflow_id: workflow.id,
                attempt_index: attempt.index,
                category: attribution.category.clone(),
                component: attribution.component,
                culprit: attribution.culprit.clone(),
                confidence: attribution.confidence,
                recoverable: attribution.recoverable,
            });
            if decision.crash_loop {
                db.insert_anomaly(&Anomaly {
                    id: 0,
                    workflow_id: workflow.id,
                    attempt_index: attempt.index,
                    kind: AnomalyKind::CrashLoop,
                    time: now,
                    summary: decision.stop_reason.clone().unwrap_or_default(),
                    evidence: Vec::new(),
                })?;
            }
            for intent in &decision.intents {
                let command = backend.command_for(intent.kind, &intent.params);
                let state = if intent.auto_approved {
                    ActionState::Approved
                } else {
                    ActionState::Proposed
                };
                let mut action = Action {
                    id: 0,
                    workflow_id: workflow.id,
                    attempt_index: attempt.index,
                    kind: intent.kind,
                    params: intent.params.clone(),
                    state,
                    permitted: intent.permitted,
                    why: intent.why.clone(),
                    command: Some(command.clone()),
                    result: None,
                    created_at: now,
                    updated_at: now,
                };
                action.id = db.insert_action(&action)?;
                let verdict = match (intent.permitted, intent.auto_approved) {
                    (_, true) => "approved by the whitelist",
                    (true, false) => "proposed: the engine runs without --auto",
                    (false, _) => "proposed: not in the whitelist; waiting for approval",
                };
                db.journal(
                    Some(workflow.id),
                    now,
                    &format!(
                        "action {} {}: {} ({verdict}); command: {command}",
                        action.id,
                        intent.kind.as_str(),
                        intent.why
                    ),
                    &evidence_quote,
                )?;
                if state == ActionState::Proposed {
                    db.insert_notification(&Notification {
                        id: 0,
                        workflow_id: Some(workflow.id),
                        time: now,
                        event: AlertEvent::ApprovalNeeded,
                        severity: Severity::Warning,
                        title: format!(
                            "{}: action {} waits for approval",
                            workflow.name, action.id
                        ),
                        body: format!(
                            "{}\nwould run: {command}\napprove with `runguard approve {}`",
                            intent.why, action.id
                        ),
                    })?;
                }
                events.push(EngineEvent::ActionPlanned {
                    action_id: action.id,
                    workflow_id: workflow.id,
                    kind: intent.kind,
                    state,
                    permitted: intent.permitted,
                    why: intent.why.clone(),
                    command,
                });
            }
            workflow.failures_since_checkpoint = decision.failures_since_checkpoint;
            set_status(
                db,
                &mut workflow,
                decision.status,
                decision.stop_reason.clone(),
                now,
            )?;
            db.mark_attempt_handled(workflow.id, attempt.index)?;
            db.journal(Some(workflow.id), now, &decision.summary, &evidence_quote)?;
            let culprit = attribution
                .culprit
                .node
                .as_deref()
                .map(|node| format!(" on {node}"))
                .unwrap_or_default();
            db.insert_notification(&Notification {
                id: 0,
                workflow_id: Some(workflow.id),
                time: now,
                event: AlertEvent::Failure,
                severity: Severity::Critical,
                title: format!(
                    "{}: {} attributed to {}{culprit}",
                    workflow.name,
                    kind.as_str(),
                    attribution.category
                ),
                body: decision.summary.clone(),
            })?;
            events.push(EngineEvent::WorkflowStatusChanged {
                workflow_id: workflow.id,
                status: decision.status,
                reason: decision.stop_reason.clone(),
            });
            Ok(())
        })?;
        self.pending_events.extend(events);
        self.flush_events();
        Ok(())
    }

    /// Reads this failure together with the job's earlier failures and other jobs' recent ones.
    fn correlate(
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
                other_nodes.push((other.workflow_id, failed.nodes, other.time));
            }
        }
        let others: Vec<OtherFailure<'_>> = other_nodes
            .iter()
            .map(|(workflow_id, nodes, time)| OtherFailure {
                workflow_id: *workflow_id,
                nodes,
                time: *time,
            })
            .collect();
        let base = folded.clone().unwrap_or_else(|| attribution.clone());
        if let Some(node_fault) = correlate::across_jobs(attempt, &base, &others, now) {
            folded = Some(node_fault);
        }
        Ok(folded)
    }

    fn flush_events(&mut self) {
        for event in self.pending_events.drain(..) {
            // Nobody listening is fine: the store holds the truth.
            let _ = self.events.send(event);
        }
    }

    /// Counts a problem the engine carried on from, and tells the frontends.
    fn warn(&mut self, kind: &str, message: String, now: DateTime<Utc>) -> Result<(), EngineError> {
        self.store.db().count_warning(kind, &message, now)?;
        tracing::warn!(kind, %message, "engine warning");
        self.pending_events.push(EngineEvent::Warning {
            kind: kind.to_string(),
            message,
        });
        self.flush_events();
        Ok(())
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

/// Applies one approve/reject to a stored action; returns the outcome text for the command table.
/// The engine runs it for queued commands; the CLI runs it directly when no engine holds the store.
pub fn apply_command(
    db: &crate::store::Db<'_>,
    kind: CommandKind,
    action_id: crate::model::ActionId,
    now: DateTime<Utc>,
    events: &mut Vec<EngineEvent>,
) -> Result<String, StoreError> {
    let Some(mut action) = db.action(action_id)? else {
        return Ok(format!("no action {action_id}"));
    };
    if action.state != ActionState::Proposed {
        return Ok(format!(
            "action {action_id} is {}, not proposed; nothing to do",
            action.state.as_str()
        ));
    }
    action.state = match kind {
        CommandKind::Approve => ActionState::Approved,
        CommandKind::Reject => ActionState::Rejected,
    };
    action.updated_at = now;
    db.update_action(&action)?;
    let outcome = format!("action {action_id} {}", action.state.as_str());
    db.journal(
        Some(action.workflow_id),
        now,
        &format!(
            "{outcome} by the user: {} ({})",
            action.kind.as_str(),
            action.why
        ),
        &[],
    )?;
    events.push(EngineEvent::ActionFinished {
        action_id,
        workflow_id: action.workflow_id,
        kind: action.kind,
        state: action.state,
        result: outcome.clone(),
    });
    // Rejecting the recovery itself ends the workflow's recovery.
    if action.state == ActionState::Rejected
        && action.kind.restarts_the_run()
        && let Some(mut workflow) = db.workflow(action.workflow_id)?
        && workflow.status == WorkflowStatus::Recovering
    {
        let reason = format!("recovery rejected by the user (action {action_id})");
        complete_workflow(db, &mut workflow, reason, now, events)?;
    }
    Ok(outcome)
}

/// Changes a workflow's status and leaves a notification when it really changed.
pub(crate) fn set_status(
    db: &crate::store::Db<'_>,
    workflow: &mut Workflow,
    status: WorkflowStatus,
    reason: Option<String>,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let previous = workflow.status;
    let changed = previous != status;
    workflow.status = status;
    if reason.is_some() || changed {
        workflow.status_reason = reason;
    }
    workflow.updated_at = now;
    db.update_workflow(workflow)?;
    if changed {
        let (event, severity, title) = match status {
            WorkflowStatus::Completed if workflow.succeeded => (
                AlertEvent::Completed,
                Severity::Info,
                format!("{}: completed", workflow.name),
            ),
            WorkflowStatus::Completed => (
                AlertEvent::Stopped,
                Severity::Critical,
                format!("{}: recovery stopped", workflow.name),
            ),
            WorkflowStatus::Recovering => (
                AlertEvent::Recovering,
                Severity::Warning,
                format!("{}: recovering", workflow.name),
            ),
            WorkflowStatus::Enabled if previous == WorkflowStatus::Recovering => (
                AlertEvent::Recovered,
                Severity::Info,
                format!("{}: recovered", workflow.name),
            ),
            WorkflowStatus::Enabled => (
                AlertEvent::Notice,
                Severity::Info,
                format!("{}: watching", workflow.name),
            ),
            WorkflowStatus::Pending => (
                AlertEvent::Notice,
                Severity::Info,
                format!("{}: enrolling", workflow.name),
            ),
            WorkflowStatus::CredentialError => (
                AlertEvent::CredentialError,
                Severity::Critical,
                format!("{}: credential error", workflow.name),
            ),
        };
        db.insert_notification(&Notification {
            id: 0,
            workflow_id: Some(workflow.id),
            time: now,
            event,
            severity,
            title,
            body: workflow.status_reason.clone().unwrap_or_default(),
        })?;
    }
    Ok(())
}

/// Ends a workflow's recovery (or its run) with a reason, and says so on the event channel.
pub(crate) fn complete_workflow(
    db: &crate::store::Db<'_>,
    workflow: &mut Workflow,
    reason: String,
    now: DateTime<Utc>,
    events: &mut Vec<EngineEvent>,
) -> Result<(), StoreError> {
    set_status(
        db,
        workflow,
        WorkflowStatus::Completed,
        Some(reason.clone()),
        now,
    )?;
    events.push(EngineEvent::WorkflowStatusChanged {
        workflow_id: workflow.id,
        status: WorkflowStatus::Completed,
        reason: Some(reason),
    });
    Ok(())
}

/// Wraps a backend call in the engine's timeout.
async fn with_timeout<T>(
    call: impl Future<Output = Result<T, BackendError>>,
) -> Result<T, BackendError> {
    match tokio::time::timeout(BACKEND_CALL_TIMEOUT, call).await {
        Ok(result) => result,
        Err(_) => Err(BackendError::Unavailable(format!(
            "no answer within {} s",
            BACKEND_CALL_TIMEOUT.as_secs()
        ))),
    }
}
