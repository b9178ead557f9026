//! The composition root: builds an engine, its backend and the services beside it from a config. The
//! cockpit and headless mode both start the engine through here.

use std::path::{Path, PathBuf};
use std::sync::Arc;
#[cfg(feature = "slurm")]
use std::time::Duration;

use runguard_engine::attribute::{Catalog, CatalogError};
use runguard_engine::backend::Backend;
#[cfg(feature = "sim")]
use runguard_engine::backend::sim::{Scenario, SimCluster, SimError, SimOptions, timeline};
#[cfg(feature = "slurm")]
use runguard_engine::backend::slurm::{
    api::SlurmApi,
    backend::{SlurmBackend, SlurmOptions},
    cli::SlurmCli,
    rest::{ApiVersion, RestEndpoint, RestOptions, SlurmRest},
    token::TokenSource,
    via_rest::SlurmViaRest,
};
use runguard_engine::clock::{Clock, RealClock};
use runguard_engine::config::{BackendKind, Config};
#[cfg(feature = "slurm")]
use runguard_engine::config::{SlurmApiKind, SlurmConfig};
use runguard_engine::engine::{Engine, EngineError, EngineOptions};
use runguard_engine::store::lock::LockError;
use runguard_engine::store::{Store, StoreError};

/// Why the headless engine could not start or stopped early.
#[derive(Debug, thiserror::Error)]
pub enum ComposeError {
    #[error(transparent)]
    Lock(#[from] LockError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[cfg(feature = "sim")]
    #[error(transparent)]
    Sim(#[from] SimError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error("cannot listen for signals: {0}")]
    Signals(std::io::Error),
    #[error("slurm: {0}")]
    Slurm(String),
    #[error(transparent)]
    Alert(#[from] runguard_engine::alert::AlertError),
    #[error("metrics endpoint: {0}")]
    Metrics(String),
    #[error("kubernetes: {0}")]
    Kubernetes(String),
    /// The config names a backend this build of runguard was made without.
    #[error("backend.kind = \"{0}\" is not in this build (cargo feature `{1}`)")]
    NotBuilt(&'static str, &'static str),
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
    pub async fn start(config: &Config, store_path: &Path) -> Result<Self, ComposeError> {
        let (stop, stopped) = tokio::sync::watch::channel(false);
        let mut tasks = Vec::new();
        if let Some(dispatcher) = runguard_engine::alert::Dispatcher::new(config, store_path)? {
            tasks.push(tokio::spawn(dispatcher.run(stopped.clone())));
        }
        if let Some(listen) = &config.metrics.listen {
            let address = listen
                .parse()
                .map_err(|err| ComposeError::Metrics(format!("{listen:?}: {err}")))?;
            let policy = runguard_engine::recover::Policy::from_config(&config.recovery, false);
            let server =
                runguard_engine::metrics::serve(address, store_path.to_path_buf(), policy, stopped)
                    .await
                    .map_err(|err| ComposeError::Metrics(err.to_string()))?;
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
#[cfg(feature = "slurm")]
fn slurm_api(config: &SlurmConfig) -> Result<Arc<dyn SlurmApi>, ComposeError> {
    let cli = SlurmCli::new(
        Duration::from_secs(config.command_timeout_secs),
        config.listing,
    )
    .with_jobcomp(config.jobcomp_path.clone())
    .with_slurm_conf(config.slurm_conf.clone())
    .with_bin_dir(config.bin_dir.clone());
    match config.api {
        SlurmApiKind::Cli => Ok(Arc::new(cli)),
        SlurmApiKind::Rest => {
            let Some(endpoint) = config.rest_endpoint.as_deref() else {
                return Err(ComposeError::Slurm(
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
            if let Some(version) = &config.rest_api_version {
                options.api_version = Some(ApiVersion::parse(version).ok_or_else(|| {
                    ComposeError::Slurm(format!(
                        "slurm.rest_api_version {version:?} is not a version such as \"v0.0.42\""
                    ))
                })?);
            }
            if matches!(options.endpoint, RestEndpoint::Http(_)) {
                options.token = match &config.rest_token_file {
                    Some(file) => TokenSource::File(file.clone()),
                    None => TokenSource::Env(config.rest_token_env.clone()),
                };
                options.user_name = config
                    .rest_user
                    .clone()
                    .or_else(|| std::env::var("USER").ok());
            }
            let rest =
                SlurmRest::new(options).map_err(|err| ComposeError::Slurm(err.to_string()))?;
            Ok(Arc::new(SlurmViaRest::new(rest, cli)))
        }
    }
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
    match runguard_engine::paths::default_config_file()
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
) -> Result<Engine, ComposeError> {
    let mut store = Store::open(store_path)?;
    let (backend, clock) = match config.backend.kind {
        BackendKind::Sim => sim_backend(&config, &mut store, store_path, fresh_sim)?,
        BackendKind::Slurm => slurm_backend(&config)?,
        BackendKind::Kubernetes => kube_backend(&config, store_path).await?,
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

type Parts = (Arc<dyn Backend>, Arc<dyn Clock>);

/// The backend `runguard submit` submits through on its own: Slurm's or Kubernetes'. `None` for the
/// simulated cluster, whose jobs only its engine's process can start.
pub async fn submission_backend(
    config: &Config,
    store_path: &Path,
) -> Result<Option<Arc<dyn Backend>>, ComposeError> {
    Ok(match config.backend.kind {
        BackendKind::Sim => None,
        BackendKind::Slurm => Some(slurm_backend(config)?.0),
        BackendKind::Kubernetes => Some(kube_backend(config, store_path).await?.0),
    })
}

#[cfg(feature = "sim")]
fn sim_backend(
    config: &Config,
    store: &mut Store,
    store_path: &Path,
    fresh_sim: bool,
) -> Result<Parts, ComposeError> {
    let dir = sim_dir(config, store_path);
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
    Ok((Arc::new(sim), clock))
}

#[cfg(not(feature = "sim"))]
fn sim_backend(_: &Config, _: &mut Store, _: &Path, _: bool) -> Result<Parts, ComposeError> {
    Err(ComposeError::NotBuilt("sim", "sim"))
}

#[cfg(feature = "slurm")]
fn slurm_backend(config: &Config) -> Result<Parts, ComposeError> {
    let api = slurm_api(&config.slurm)?;
    let backend = SlurmBackend::new(
        SlurmOptions {
            partitions: config.slurm.partitions.clone(),
            watched: config.slurm.watch.clone(),
            settle_timeout: Duration::from_secs(config.slurm.settle_timeout_secs),
        },
        api,
    );
    Ok((Arc::new(backend), Arc::new(RealClock)))
}

#[cfg(not(feature = "slurm"))]
fn slurm_backend(_: &Config) -> Result<Parts, ComposeError> {
    Err(ComposeError::NotBuilt("slurm", "slurm"))
}

#[cfg(feature = "kubernetes")]
async fn kube_backend(config: &Config, store_path: &Path) -> Result<Parts, ComposeError> {
    use runguard_engine::backend::kube;
    let data_dir = config
        .kubernetes
        .data_dir
        .clone()
        .unwrap_or_else(|| kube::backend::default_data_dir(store_path));
    let backend = kube::KubeBackend::connect(&config.kubernetes, data_dir)
        .await
        .map_err(|err| ComposeError::Kubernetes(err.to_string()))?;
    Ok((Arc::new(backend), Arc::new(RealClock)))
}

#[cfg(not(feature = "kubernetes"))]
async fn kube_backend(_: &Config, _: &Path) -> Result<Parts, ComposeError> {
    Err(ComposeError::NotBuilt("kubernetes", "kubernetes"))
}

/// The built-in demo scenarios with their descriptions (none in a build without the sim).
pub fn scenarios() -> Vec<(&'static str, String)> {
    #[cfg(feature = "sim")]
    {
        Scenario::builtin_names()
            .iter()
            .map(|name| {
                let description = Scenario::builtin(name)
                    .map(|s| s.description)
                    .unwrap_or_default();
                (*name, description)
            })
            .collect()
    }
    #[cfg(not(feature = "sim"))]
    Vec::new()
}

/// The clock a viewer of another process's engine reads times on: the simulated cluster runs on its own
/// timeline, every other backend on the real clock.
pub fn viewer_clock(config: &Config, store_path: &Path) -> Result<Arc<dyn Clock>, ComposeError> {
    #[cfg(feature = "sim")]
    if config.backend.kind == BackendKind::Sim {
        let dir = sim_dir(config, store_path);
        return Ok(Arc::new(timeline(&dir, config.sim.speed)?));
    }
    let _ = (config, store_path);
    Ok(Arc::new(RealClock))
}

/// A Kubernetes workload named on the command line (`KIND/NAME` or `KIND/NAMESPACE/NAME`) as the
/// watch list keeps it; `None` when it is not a workload reference.
pub fn kube_watch_ref(job: &str, namespace: &str) -> Result<Option<String>, ComposeError> {
    #[cfg(feature = "kubernetes")]
    return Ok(
        runguard_engine::backend::kube::workload::WorkloadRef::parse(job, namespace)
            .map(|reference| reference.id()),
    );
    #[cfg(not(feature = "kubernetes"))]
    {
        let _ = (job, namespace);
        Err(ComposeError::NotBuilt("kubernetes", "kubernetes"))
    }
}
