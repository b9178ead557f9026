//! The engine as the tests run it: a store in a temporary directory, the built-in catalog, a config
//! the test may change before it builds an engine, the scripted scheduler and a manual clock.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use runguard::status::{StatusReport, report};
use runguard_engine::attribute::Catalog;
use runguard_engine::backend::Backend;
use runguard_engine::clock::{Clock, ManualClock, RealClock};
use runguard_engine::config::Config;
use runguard_engine::engine::{Engine, EngineOptions};
use runguard_engine::model::AnomalyKind;
use runguard_engine::recover::Policy;
use runguard_engine::store::{CommandKind, Store};

use super::backend::{Accepting, Script, ScriptedBackend};
use super::start_time;

/// The engine's poll interval in [`EngineRig::run`], in the manual clock's time.
pub const TICK: Duration = Duration::from_secs(5);
/// Enough ticks for any built-in scenario (about 4 hours of the manual clock).
const MAX_TICKS: usize = 3000;

pub struct EngineRig {
    dir: tempfile::TempDir,
    pub clock: Arc<ManualClock>,
    pub backend: Arc<ScriptedBackend>,
    /// What the next engine built runs with.
    pub config: Config,
}

impl Default for EngineRig {
    fn default() -> Self {
        Self::new(Accepting)
    }
}

impl EngineRig {
    /// A scheduler without jobs that acts as `script` says, the default config, the clock at
    /// [`start_time`].
    pub fn new(script: impl Script) -> Self {
        let clock = Arc::new(ManualClock::new(start_time()));
        Self {
            dir: tempfile::tempdir().unwrap(),
            backend: Arc::new(ScriptedBackend::new(
                script,
                Arc::clone(&clock) as Arc<dyn Clock>,
            )),
            clock,
            config: Config::default(),
        }
    }

    /// The rig's own directory, for logs and other files of the test.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn db_path(&self) -> PathBuf {
        self.path().join("runguard.sqlite")
    }

    /// The store, opened as another process would.
    pub fn store(&self) -> Store {
        Store::open(&self.db_path()).unwrap()
    }

    /// An engine over the scripted scheduler, acting on its own.
    pub fn engine(&self) -> Engine {
        self.engine_over(Arc::clone(&self.backend), true)
    }

    /// An engine over another backend on the manual clock; `auto`: it runs permitted actions itself.
    pub fn engine_over<B: Backend + 'static>(&self, backend: Arc<B>, auto: bool) -> Engine {
        self.build(backend, Arc::clone(&self.clock) as Arc<dyn Clock>, auto)
    }

    /// An engine over `backend` on the real clock, acting on its own.
    pub fn engine_in_real_time<B: Backend + 'static>(&self, backend: Arc<B>) -> Engine {
        self.build(backend, Arc::new(RealClock), true)
    }

    fn build<B: Backend + 'static>(
        &self,
        backend: Arc<B>,
        clock: Arc<dyn Clock>,
        auto: bool,
    ) -> Engine {
        Engine::new(
            self.store(),
            backend as Arc<dyn Backend>,
            clock,
            self.config.clone(),
            Catalog::builtin().unwrap(),
            EngineOptions { auto },
        )
    }

    /// `inner` recorded on the manual clock, interrupted when `script` says.
    pub fn wrap<B: Backend + 'static>(
        &self,
        inner: Arc<B>,
        script: impl Script,
    ) -> Arc<ScriptedBackend> {
        Arc::new(ScriptedBackend::wrapping(
            inner as Arc<dyn Backend>,
            script,
            Arc::clone(&self.clock) as Arc<dyn Clock>,
        ))
    }

    /// The simulated cluster playing a built-in `scenario` on the manual clock, in the rig's
    /// directory.
    #[cfg(feature = "sim")]
    pub fn sim(&self, scenario: &str, seed: u64) -> Arc<runguard_engine::backend::sim::SimCluster> {
        use runguard_engine::backend::sim::{Scenario, SimCluster, SimOptions};
        let options = SimOptions::new(
            self.path().join("sim"),
            Scenario::builtin(scenario).expect("built-in scenario"),
            seed,
        );
        Arc::new(SimCluster::open(options, Arc::clone(&self.clock) as Arc<dyn Clock>).unwrap())
    }

    /// The simulated cluster playing `scenario` (a built-in one the test changed, or its own) on the
    /// manual clock, in the rig's directory.
    #[cfg(feature = "sim")]
    pub fn sim_playing(
        &self,
        scenario: runguard_engine::backend::sim::Scenario,
        seed: u64,
    ) -> Arc<runguard_engine::backend::sim::SimCluster> {
        use runguard_engine::backend::sim::{SimCluster, SimOptions};
        let options = SimOptions::new(self.path().join("sim"), scenario, seed);
        Arc::new(SimCluster::open(options, Arc::clone(&self.clock) as Arc<dyn Clock>).unwrap())
    }

    pub fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// One tick of the engine, then `seconds` of the manual clock.
    pub async fn step(&self, engine: &mut Engine, seconds: u64) {
        engine.tick().await.unwrap();
        self.clock.advance(Duration::from_secs(seconds));
    }

    /// Ticks every [`TICK`] until every workflow is completed or `stop` says so; the status then.
    pub async fn run(
        &self,
        engine: &mut Engine,
        stop: impl Fn(&StatusReport) -> bool,
    ) -> StatusReport {
        engine.reconcile().unwrap();
        for _ in 0..MAX_TICKS {
            engine.tick().await.unwrap();
            let status = self.status();
            if stop(&status) || engine.settled().unwrap() {
                return status;
            }
            self.clock.advance(TICK);
        }
        panic!("the engine did not settle: {:#?}", self.status().workflows);
    }

    /// Runs the engine as its own loop paces itself when no log wakes it: each pass, then the manual
    /// clock moved on to when the engine says the next one is due (its poll interval, or sooner for
    /// a deadline of its own), until `stop` says so. The status then, with when each pass ran.
    pub async fn run_paced(
        &self,
        engine: &mut Engine,
        stop: impl Fn(&StatusReport) -> bool,
    ) -> (StatusReport, Vec<DateTime<Utc>>) {
        engine.reconcile().unwrap();
        let mut passes = Vec::new();
        for _ in 0..MAX_TICKS {
            passes.push(self.now());
            engine.tick().await.unwrap();
            let status = self.status();
            if stop(&status) || engine.settled().unwrap() {
                return (status, passes);
            }
            self.clock.advance(engine.next_pass_in());
        }
        panic!("the engine did not settle: {:#?}", self.status().workflows);
    }

    /// What `runguard status` reports now.
    pub fn status(&self) -> StatusReport {
        let policy = Policy::from_config(&self.config.recovery, false);
        report(&self.store().db(), "test", &policy, None).unwrap()
    }

    /// The kinds of every anomaly raised so far.
    pub fn anomalies(&self) -> Vec<AnomalyKind> {
        self.status()
            .workflows
            .iter()
            .flat_map(|w| w.anomalies.iter().map(|a| a.kind))
            .collect()
    }

    /// Approves or rejects an action through the store, as `runguard approve` does.
    pub fn command(&self, kind: CommandKind, action_id: i64) {
        self.store()
            .db()
            .push_command(kind, action_id, Utc::now())
            .unwrap();
    }
}
