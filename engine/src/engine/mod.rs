//! The engine loop: observe → decide → act, once per tick, on every enrolled workflow.
//!
//! Observation reads the backend and the logs and never acts; decisions come from the pure policy in
//! [`crate::recover`]; every intent is stored before it runs, and an action found `executing` after a
//! restart is checked against the scheduler before anything is repeated.

mod act;
mod dead_nodes;
mod decide;
mod events;
mod journal;
mod ledger;
mod logs;
mod nodes;
mod observe;
mod outage;
mod pace;
mod phases;
mod proactive;
mod warnings;

pub use decide::scheduler_line;
pub use journal::apply_command;
pub(crate) use journal::{complete_workflow, set_status};
pub use ledger::release_in;
pub(crate) use observe::attempt_tag;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::broadcast;

pub use events::EngineEvent;

use crate::attribute::Catalog;
use crate::backend::{Backend, BackendError};
use crate::clock::Clock;
use crate::config::Config;
use crate::detect;
use crate::model::{ActionState, WorkflowId, WorkflowStatus};
use crate::recover::Policy;
use crate::store::{CommandKind, Store, StoreError};
use crate::telemetry::watch::LogWatcher;

/// Shortest real time between two ticks started by log changes: a line is read within a second (the
/// cockpit shows the store once a second), and a hundred jobs writing constantly cost one pass a second
/// rather than five.
const MIN_TICK_GAP: Duration = Duration::from_secs(1);

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
    /// Step timings per running (workflow, attempt), for the input-bound and slowdown warnings;
    /// rebuilt from new reports after a restart.
    step_watches: HashMap<(WorkflowId, u32), detect::steps::StepWatch>,
    /// Wakes the loop early when a followed log changes.
    log_watcher: LogWatcher,
    /// What the GPU status commands last reported.
    node_probes: nodes::NodeProbes,
    /// What the last read of each (workflow, attempt)'s log left open for the next.
    open_reads: HashMap<(WorkflowId, u32), crate::telemetry::pipeline::OpenState>,
    /// The scheduler is not answering: since when, and when to call it again.
    outage: Option<outage::Outage>,
    /// Workflows may sit in `credential_error` (a refusal, or a store from an earlier run): the
    /// next answer of the scheduler lets them be watched again.
    credentials_in_doubt: bool,
    /// When the scheduler is asked next: at most once per poll interval, less while it is slow.
    pace: pace::Pace,
    /// Nodes under running watched jobs that the scheduler last said are dead (not responding, down,
    /// failed), with its words for their state.
    dead_nodes: HashMap<String, String>,
    /// When each node of a running attempt was last heard from in its log, per (workflow, attempt).
    silence: HashMap<(WorkflowId, u32), detect::node_silence::NodeSilence>,
    /// Logs found truncated or replaced under an attempt, with when: read again only after a later
    /// listing showed no new run of the job took the file.
    log_restarts: HashMap<(WorkflowId, u32), DateTime<Utc>>,
    /// Running attempts whose log cannot be found or read: warned about, never called hung for it.
    missing_logs: std::collections::HashSet<(WorkflowId, u32)>,
    /// The length of each log last seen with an unfinished line at its end: bytes arriving without a
    /// newline (a progress bar's `\r`, block-buffered output) still show the run is alive.
    partial_lengths: HashMap<(WorkflowId, u32), u64>,
    /// Attempts whose log last announced a checkpoint save not yet confirmed: silence there is
    /// measured against the save section's bound.
    saving: std::collections::HashSet<(WorkflowId, u32)>,
    /// The fatal line each running attempt is watched for after, with when it was first read.
    fatal_lines: HashMap<(WorkflowId, u32), detect::fatal_line::FatalLineTracker>,
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
        policy.capabilities = backend.capabilities();
        let (events, _) = broadcast::channel(1024);
        let log_watcher = if config.engine.file_events {
            LogWatcher::new()
        } else {
            LogWatcher::polling_only()
        };
        // A backend that hears of changes (watch streams) starts the next tick early, as a log does.
        backend.set_waker(log_watcher.wake());
        let pace = pace::Pace::new(
            Duration::from_secs_f64(config.engine.poll_interval_secs),
            Duration::from_secs_f64(config.engine.node_poll_interval_secs),
        );
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
            step_watches: HashMap::new(),
            log_watcher,
            node_probes: nodes::NodeProbes::default(),
            open_reads: HashMap::new(),
            outage: None,
            credentials_in_doubt: true,
            pace,
            dead_nodes: HashMap::new(),
            silence: HashMap::new(),
            log_restarts: HashMap::new(),
            missing_logs: std::collections::HashSet::new(),
            partial_lengths: HashMap::new(),
            saving: std::collections::HashSet::new(),
            fatal_lines: HashMap::new(),
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
        let wake = self.log_watcher.wake();
        loop {
            let started = tokio::time::Instant::now();
            self.tick().await?;
            if until_settled && self.settled()? {
                return Ok(RunOutcome::Settled);
            }
            let wait = self.clock.real_duration(self.next_pass_in());
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

    /// The earliest moment after now at which a pass must run although no poll is due and no log
    /// changed: the end of a fatal line's confirmation window (a hung run stays silent, so nothing
    /// else would wake the engine then). A driver with its own clock (the replay) schedules a tick
    /// there.
    pub fn next_deadline(&self) -> Option<DateTime<Utc>> {
        let now = self.clock.now();
        self.fatal_lines
            .values()
            .filter_map(detect::fatal_line::FatalLineTracker::due)
            .filter(|due| *due > now)
            .min()
    }

    /// How long after now (on the engine's clock) the next pass must start unless a log wakes the
    /// engine first: the poll interval, or less when a deadline comes first. [`Engine::run`] sleeps
    /// this long; a driver of its own clock advances it by this much.
    pub fn next_pass_in(&self) -> Duration {
        let poll = Duration::from_secs_f64(self.config.engine.poll_interval_secs);
        let now = self.clock.now();
        self.next_deadline()
            .and_then(|due| (due - now).to_std().ok())
            .map_or(poll, |until| until.min(poll))
    }

    /// A deadline has passed: the next pass looks at every workflow, whatever woke it.
    fn deadline_passed(&self, now: DateTime<Utc>) -> bool {
        self.fatal_lines
            .values()
            .filter_map(detect::fatal_line::FatalLineTracker::due)
            .any(|due| due <= now)
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
        // A multiphase workflow still running has phases to submit.
        let phases_left = db
            .multiphases()?
            .iter()
            .any(|multiphase| multiphase.state == crate::model::MultiphaseState::Running);
        Ok(!workflows.is_empty()
            && !phases_left
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
        // scheduler is called again only after the backoff, and no action runs until it answers. A
        // tick started by a log change between two listings decides on what is already known.
        if self.backend.take_jobs_changed() {
            self.pace.jobs_changed(now);
        }
        let listing = !self.backing_off(now) && self.pace.listing_due(now);
        if listing {
            self.observe_jobs(now).await?;
        }
        // Once per poll interval (with every listing, and at every tick no log change started)
        // everything is read and every workflow looked at; between two, a log's wake-up reads the logs
        // that changed and decides on their workflows.
        let changed = if listing || self.pace.full_pass_due(now) || self.deadline_passed(now) {
            None
        } else {
            self.log_watcher
                .take_changed()
                .filter(|changed| !changed.is_empty())
        };
        match &changed {
            None => {
                self.pace.full_pass(now);
                // Changes seen now are read by this pass.
                let _ = self.log_watcher.take_changed();
                self.read_logs(now, None)?;
                self.read_node_logs(now)?;
                self.probe_nodes(now).await?;
                self.detect_and_decide(now, None).await?;
                self.tend_ledger(now).await?;
            }
            Some(paths) => {
                let touched = self.read_logs(now, Some(paths))?;
                self.detect_and_decide(now, Some(&touched)).await?;
            }
        }
        self.advance_phases(now)?;
        if self.outage.is_none() {
            self.execute_approved().await?;
        }
        Ok(())
    }

    /// Applies approvals and rejections queued by other processes.
    fn apply_commands(&mut self, now: DateTime<Utc>) -> Result<(), EngineError> {
        let commands = self.store.db().pending_commands()?;
        for command in commands {
            if command.kind == CommandKind::ReleaseNode {
                let node = command.node.clone().unwrap_or_default();
                let outcome = self.release_node(&node, now)?;
                self.store
                    .write(|db| db.finish_command(command.id, &outcome))?;
                continue;
            }
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
