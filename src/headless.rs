//! The headless frontend (`runguard run --auto`, `runguard demo`): the engine without a UI, its events
//! logged as JSON lines (or as readable lines for the demo), stopped cleanly by SIGINT/SIGTERM.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::broadcast;

use runguard_engine::config::Config;
use runguard_engine::engine::{EngineEvent, RunOutcome};
use runguard_engine::store::lock::{EngineLock, LockError};

use crate::compose::{ComposeError, Services, build_engine};

/// How the events are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventLog {
    /// One JSON object per line on stdout (through tracing).
    Json,
    /// One readable line per event on stdout.
    Human,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct HeadlessOptions {
    pub store_path: PathBuf,
    /// Apply whitelisted actions without approval.
    pub auto: bool,
    /// Stop once every workflow is completed (the demo); otherwise run until a signal.
    pub until_settled: bool,
    /// Start the simulated cluster afresh and forget the previous sim workflows (the demo).
    pub fresh_sim: bool,
    pub event_log: EventLog,
}

/// Runs the engine until a signal (or until settled); returns how it ended.
pub async fn run(config: Config, options: HeadlessOptions) -> Result<RunOutcome, ComposeError> {
    let _lock = acquire_lock(&options.store_path).await?;
    let mut engine = build_engine(
        config.clone(),
        &options.store_path,
        options.auto,
        options.fresh_sim,
    )
    .await?;
    let services = Services::start(&config, &options.store_path).await?;
    let events = engine.subscribe();
    let printer = tokio::spawn(print_events(events, options.event_log));
    let shutdown = shutdown_signal().await?;
    let outcome = engine.run(shutdown, options.until_settled).await;
    drop(engine);
    services.stop().await;
    // The engine's sender is gone; the printer drains what is left and ends.
    let _ = printer.await;
    let outcome = outcome?;
    tracing::info!(outcome = ?outcome, "engine stopped; state is in the store");
    Ok(outcome)
}

/// How long a starting engine waits for the store's lock before saying who holds it.
const LOCK_WAIT: Duration = Duration::from_secs(5);

/// The store's lock. An engine restarted at once after a crash (a supervisor's restart) can find it
/// still held for a moment by a process the dead engine was starting (between its fork and exec),
/// so a held lock is tried again for a few seconds; a live engine still refuses this one after that.
async fn acquire_lock(store: &Path) -> Result<EngineLock, ComposeError> {
    let deadline = tokio::time::Instant::now() + LOCK_WAIT;
    loop {
        match EngineLock::acquire(store) {
            Err(LockError::Held { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => return Ok(other?),
        }
    }
}

/// Resolves on the first SIGINT or SIGTERM.
async fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, ComposeError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).map_err(ComposeError::Signals)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(ComposeError::Signals)?;
    Ok(async move {
        tokio::select! {
            _ = interrupt.recv() => tracing::info!("SIGINT: stopping after the current tick"),
            _ = terminate.recv() => tracing::info!("SIGTERM: stopping after the current tick"),
        }
    })
}

async fn print_events(mut events: broadcast::Receiver<EngineEvent>, log: EventLog) {
    loop {
        match events.recv().await {
            Ok(event) => match log {
                EventLog::Json => {
                    let data = serde_json::to_string(&event).unwrap_or_default();
                    tracing::info!(target: "runguard::event", event = event.name(), data = %data);
                }
                EventLog::Human => println!("{}", describe(&event)),
            },
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!(
                    missed,
                    "event printer fell behind; the store has every event"
                );
            }
            Err(broadcast::error::RecvError::Closed) => return,
        }
    }
}

/// One readable line per event.
pub fn describe(event: &EngineEvent) -> String {
    match event {
        EngineEvent::WorkflowEnrolled {
            workflow_id,
            name,
            job_id,
        } => format!("● enrolled workflow {workflow_id} {name} (job {job_id})"),
        EngineEvent::AttemptStarted {
            workflow_id,
            attempt_index,
            job_id,
        } => format!("● workflow {workflow_id}: attempt {attempt_index} is job {job_id}"),
        EngineEvent::AttemptStateChanged {
            workflow_id,
            attempt_index,
            state_raw,
            reason,
            nodes,
            ..
        } => format!(
            "  workflow {workflow_id} attempt {attempt_index}: {state_raw}{}{}",
            reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            if nodes.is_empty() {
                String::new()
            } else {
                format!(" on {}", nodes.join(","))
            }
        ),
        EngineEvent::CheckpointSaved {
            workflow_id,
            iteration,
            ..
        } => format!("  workflow {workflow_id}: checkpoint at iteration {iteration}"),
        EngineEvent::AnomalyRaised {
            workflow_id,
            kind,
            summary,
            ..
        } => format!("▲ workflow {workflow_id}: {} — {summary}", kind.as_str()),
        EngineEvent::Attributed {
            workflow_id,
            category,
            component,
            culprit,
            confidence,
            recoverable,
            ..
        } => format!(
            "⇒ workflow {workflow_id}: {category} ({}) on {} — confidence {:.0}%, {}",
            component.as_str(),
            culprit.node.as_deref().unwrap_or("an unknown node"),
            confidence * 100.0,
            if *recoverable {
                "recoverable"
            } else {
                "not recoverable"
            }
        ),
        EngineEvent::SchedulerUnreachable {
            failures,
            retry_in_secs,
            error,
            ..
        } => format!(
            "✖ scheduler unreachable ({failures} failed calls): {error}; next try in {retry_in_secs:.0} s, no action runs meanwhile"
        ),
        EngineEvent::SchedulerReachable { down_secs } => {
            format!("✔ scheduler reachable again after {down_secs} s")
        }
        EngineEvent::ActionPlanned {
            action_id,
            kind,
            state,
            why,
            command,
            ..
        } => format!(
            "→ action {action_id} {} [{}]: {why}\n    $ {command}",
            kind.as_str(),
            state.as_str()
        ),
        EngineEvent::ActionFinished {
            action_id,
            kind,
            state,
            result,
            ..
        } => format!(
            "✓ action {action_id} {} {}: {result}",
            kind.as_str(),
            state.as_str()
        ),
        EngineEvent::WorkflowStatusChanged {
            workflow_id,
            status,
            reason,
        } => format!(
            "■ workflow {workflow_id} is {}{}",
            status.as_str(),
            reason
                .as_deref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default()
        ),
        EngineEvent::Warning { kind, message } => format!("! {kind}: {message}"),
        EngineEvent::NodeStateChanged {
            node,
            state,
            reason,
        } => format!("◆ node {node} is {}: {reason}", state.as_str()),
    }
}
