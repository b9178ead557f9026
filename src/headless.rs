//! The headless frontend (`runguard run --auto`, `runguard demo`): the engine without a UI, its events
//! logged as JSON lines (or as readable lines for the demo), stopped cleanly by SIGINT/SIGTERM.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;

use crate::attribute::{Catalog, CatalogError};
use crate::backend::Backend;
use crate::backend::sim::{Scenario, SimCluster, SimError, SimOptions, timeline};
use crate::backend::slurm::api::SlurmApi;
use crate::backend::slurm::backend::{SlurmBackend, SlurmOptions};
use crate::backend::slurm::cli::SlurmCli;
use crate::backend::slurm::rest::{RestEndpoint, RestOptions, SlurmRest};
use crate::backend::slurm::via_rest::SlurmViaRest;
use crate::clock::Clock;
use crate::config::{BackendKind, Config, SlurmApiKind, SlurmConfig};
use crate::engine::{Engine, EngineError, EngineEvent, EngineOptions, RunOutcome};
use crate::store::lock::{EngineLock, LockError};
use crate::store::{Store, StoreError};

/// Why the headless engine could not start or stopped early.
#[derive(Debug, thiserror::Error)]
pub enum HeadlessError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("cannot listen for signals: {0}")]
    Signals(std::io::Error),
    #[error("slurm: {0}")]
    Slurm(String),
    #[error(transparent)]
    Alert(#[from] crate::alert::AlertError),
    #[error("metrics endpoint: {0}")]
    Metrics(String),
    #[error("kubernetes: {0}")]
    Kubernetes(String),
}

/// What runs beside the engine of this process: alert delivery and the metrics endpoint. Only the
/// process that holds the engine lock runs them.
pub struct Services {
    stop: tokio::sync::watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Services {
    /// Starts what the config asks for; call after the engine is built (a fresh demo forgets old
    /// notifications first).
    pub async fn start(config: &Config, store_path: &Path) -> Result<Self, HeadlessError> {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        if let Some(dispatcher) = crate::alert::Dispatcher::new(config, store_path)? {
            tasks.push(tokio::spawn(dispatcher.run(stopped.clone())));
        }
        if let Some(listen) = &config.metrics.listen {
            let address = listen
                .parse()
                .map_err(|err| HeadlessError::Metrics(format!("{listen:?}: {err}")))?;
            let policy = crate::recover::Policy::from_config(&config.recovery, false);
            let server = crate::metrics::serve(address, store_path.to_path_buf(), policy, stopped)
                .await
                .map_err(|err| HeadlessError::Metrics(err.to_string()))?;
            tasks.push(server);
        }
        Ok(Self { stop, tasks })
    }

    /// Stops them; alerts still undelivered get `alerts.flush_on_exit_secs` to go out.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// The way to Slurm the config asks for.
fn slurm_api(config: &SlurmConfig) -> Result<Arc<dyn SlurmApi>, HeadlessError> {
    let cli = SlurmCli::new(
        Duration::from_secs(config.command_timeout_secs),
        config.listing,
    )
    .with_jobcomp(config.jobcomp_path.clone())
    .with_slurm_conf(config.slurm_conf.clone());
    match config.api {
        SlurmApiKind::Cli => Ok(Arc::new(cli)),
        SlurmApiKind::Rest => {
            let Some(endpoint) = config.rest_endpoint.as_deref() else {
                return Err(HeadlessError::Slurm(
                    "slurm.api = \"rest\" needs slurm.rest_endpoint (unix:/path or http://host:port)"
                        .into(),
                ));
            };
            let endpoint = match endpoint.strip_prefix("unix:") {
                Some(path) => RestEndpoint::Unix(path.into()),
                None => RestEndpoint::Http(endpoint.to_string()),
            };
            let mut options = RestOptions::new(endpoint);
            options.timeout = Duration::from_secs(config.command_timeout_secs);
            if matches!(options.endpoint, RestEndpoint::Http(_)) {
                options.token = std::env::var(&config.rest_token_env).ok();
                options.user_name = config
                    .rest_user
                    .clone()
                    .or_else(|| std::env::var("USER").ok());
            }
            let rest =
                SlurmRest::new(options).map_err(|err| HeadlessError::Slurm(err.to_string()))?;
            Ok(Arc::new(SlurmViaRest::new(rest, cli)))
        }
    }
}

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

/// The sim's directory: the configured one, else `sim/` beside the store file.
pub fn sim_dir(config: &Config, store_path: &Path) -> PathBuf {
    config.sim.dir.clone().unwrap_or_else(|| {
        store_path
            .parent()
            .map(|dir| dir.join("sim"))
            .unwrap_or_else(|| PathBuf::from("sim"))
    })
}

/// The user's signature files: `signatures/` in the config directory.
pub fn catalog() -> Result<Catalog, CatalogError> {
    match crate::paths::default_config_file()
        .and_then(|file| file.parent().map(|d| d.join("signatures")))
    {
        Some(dir) => Catalog::with_overrides(&dir),
        None => Catalog::builtin(),
    }
}

/// Builds the engine the config describes over the store at `store_path`; the caller holds the lock.
pub async fn build_engine(
    config: Config,
    store_path: &Path,
    auto: bool,
    fresh_sim: bool,
) -> Result<Engine, HeadlessError> {
    let mut store = Store::open(store_path)?;
    let (backend, clock): (Arc<dyn Backend>, Arc<dyn Clock>) = match config.backend.kind {
        BackendKind::Sim => {
            let dir = sim_dir(&config, store_path);
            if fresh_sim {
                SimCluster::reset(&dir)?;
                let forgotten = store.write(|db| db.delete_workflows_of_backend("sim"))?;
                if forgotten > 0 {
                    tracing::info!(
                        forgotten,
                        "a fresh demo replaces the previous demo's workflows"
                    );
                }
            }
            let clock: Arc<dyn Clock> = Arc::new(timeline(&dir, config.sim.speed)?);
            let scenario = Scenario::resolve(&config.sim.scenario)?;
            let sim = SimCluster::open(
                SimOptions {
                    dir,
                    scenario,
                    seed: config.sim.seed,
                    nodes: 16,
                },
                Arc::clone(&clock),
            )?;
            (Arc::new(sim), clock)
        }
        BackendKind::Slurm => {
            let api = slurm_api(&config.slurm)?;
            let backend = SlurmBackend::new(
                SlurmOptions {
                    partitions: config.slurm.partitions.clone(),
                    watched: config.slurm.watch.clone(),
                    settle_timeout: Duration::from_secs(config.slurm.settle_timeout_secs),
                },
                api,
            );
            let clock: Arc<dyn Clock> = Arc::new(crate::clock::RealClock);
            (Arc::new(backend), clock)
        }
        BackendKind::Kubernetes => {
            let data_dir = config
                .kubernetes
                .data_dir
                .clone()
                .unwrap_or_else(|| crate::backend::kube::backend::default_data_dir(store_path));
            let backend = crate::backend::kube::KubeBackend::connect(&config.kubernetes, data_dir)
                .await
                .map_err(|err| HeadlessError::Kubernetes(err.to_string()))?;
            let clock: Arc<dyn Clock> = Arc::new(crate::clock::RealClock);
            (Arc::new(backend), clock)
        }
    };
    Ok(Engine::new(
        store,
        backend,
        clock,
        config,
        catalog()?,
        EngineOptions { auto },
    ))
}

/// Runs the engine until a signal (or until settled); returns how it ended.
pub async fn run(config: Config, options: HeadlessOptions) -> Result<RunOutcome, HeadlessError> {
    let _lock = EngineLock::acquire(&options.store_path)?;
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

/// Resolves on the first SIGINT or SIGTERM.
async fn shutdown_signal() -> Result<impl std::future::Future<Output = ()>, HeadlessError> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).map_err(HeadlessError::Signals)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(HeadlessError::Signals)?;
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
    }
}
