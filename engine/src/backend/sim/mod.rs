//! The embedded simulated cluster: a Slurm-like scheduler over `node-01`..`node-16` (8 GPUs each)
//! running Megatron-style training jobs from a scenario, with scripted faults.
//!
//! It implements [`Backend`] like the real schedulers, and its jobs write real log files in real formats
//! (`<dir>/logs/<name>_<jobid>_<restart>.log`, `<dir>/nodes/<node>/kern.log`), which the engine reads
//! through its production telemetry code. Time advances lazily: every call first plays the simulation
//! forward to the clock's now, event by event, then answers. State is persisted in `<dir>/state.json`
//! after every change, so a killed engine continues where it stopped with byte-identical logs.

mod actions;
mod cluster;
mod error;
mod faults;
mod files;
mod inventory;
mod progress;
mod scenario;
mod state;
mod text;
mod timeline;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::backend::{
    ActionOutcome, Backend, BackendError, Can, Capabilities, JobSnapshot, NewJob,
};
use crate::clock::Clock;
use crate::model::BackendKind;
use crate::model::{ActionKind, ActionParams, JobSpec};

pub use error::SimError;
pub use scenario::{AttemptFilter, FaultKind, FaultSpec, GPUS_PER_NODE, Scenario, WorkloadSpec};
pub use timeline::timeline;

use cluster::World;
use files::Output;

/// Nodes of the simulated cluster unless told otherwise.
pub const DEFAULT_NODES: u32 = 16;

/// Largest cluster the sim accepts: room for the 2,048-node clusters of the published failure studies
/// with their spares. Nothing in the sim depends on it (node names grow a digit, ranks are numbered
/// on); it bounds the files and memory a mistyped size would cost.
pub const MAX_NODES: u32 = 4096;

/// A workload's progress, as [`SimCluster::progress`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimProgress {
    /// Last iteration completed by the running attempt; None while none runs.
    pub iteration: Option<u64>,
    /// The checkpoint iteration the running attempt resumed from.
    pub resumed_from: Option<u64>,
    /// Iteration of the last completed checkpoint (0: none yet).
    pub checkpoint: u64,
    /// When a fault struck the current or last attempt (ms since the epoch on the sim's clock).
    pub struck_ms: Option<i64>,
    /// When that failure's first log line was written (ms since the epoch on the sim's clock).
    pub shown_ms: Option<i64>,
}

/// How to open the simulated cluster.
#[derive(Debug, Clone)]
pub struct SimOptions {
    /// Where the state, logs, kernel logs and default checkpoints live.
    pub dir: PathBuf,
    pub scenario: Scenario,
    /// Seed of every random choice; the same seed and calls give byte-identical logs.
    pub seed: u64,
    /// Number of nodes (named `node-01`, `node-02`, ...).
    pub nodes: u32,
}

impl SimOptions {
    /// Options with the default cluster size.
    pub fn new(dir: impl Into<PathBuf>, scenario: Scenario, seed: u64) -> Self {
        Self {
            dir: dir.into(),
            scenario,
            seed,
            nodes: DEFAULT_NODES,
        }
    }
}

/// The simulated cluster, as a [`Backend`] named `sim`.
pub struct SimCluster {
    dir: PathBuf,
    clock: Arc<dyn Clock>,
    node_names: Vec<String>,
    core: Mutex<Core>,
}

/// The simulation and what it produced but has not written yet.
struct Core {
    world: World,
    out: Output,
}

impl std::fmt::Debug for SimCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimCluster")
            .field("dir", &self.dir)
            .field("nodes", &self.node_names.len())
            .finish_non_exhaustive()
    }
}

impl SimCluster {
    /// Opens the sim in `options.dir`: continues the persisted state if it belongs to the same scenario
    /// (name and content), seed and cluster size, else starts the scenario afresh at `clock.now()`.
    pub fn open(options: SimOptions, clock: Arc<dyn Clock>) -> Result<Self, SimError> {
        let SimOptions {
            dir,
            scenario,
            seed,
            nodes,
        } = options;
        if nodes == 0 || nodes > MAX_NODES {
            return Err(SimError::ClusterTooSmall {
                scenario: scenario.name.clone(),
                nodes,
                message: format!("the cluster must have 1..={MAX_NODES} nodes"),
            });
        }
        if let Some(job) = scenario.jobs.iter().find(|job| job.nodes > nodes) {
            return Err(SimError::ClusterTooSmall {
                scenario: scenario.name.clone(),
                nodes,
                message: format!("job `{}` needs {} nodes", job.name, job.nodes),
            });
        }
        std::fs::create_dir_all(&dir).map_err(|err| SimError::io(&dir, err))?;
        let dir = std::path::absolute(&dir).map_err(|err| SimError::io(&dir, err))?;
        let fingerprint = state::fingerprint(
            serde_json::to_string(&scenario)
                .unwrap_or_default()
                .as_bytes(),
        );
        let mut out = Output::default();
        let continued = match files::load_state(&dir)? {
            Some(state)
                if state.scenario == scenario.name
                    && state.seed == seed
                    && state.fingerprint == fingerprint
                    && World::fits(&state, &scenario, nodes) =>
            {
                let mut world = World {
                    state,
                    scenario: scenario.clone(),
                    dir: dir.clone(),
                };
                files::restore(&mut world)?;
                Some(world)
            }
            Some(state) => {
                tracing::info!(
                    previous = %state.scenario,
                    scenario = %scenario.name,
                    "sim state belongs to another scenario, seed or cluster size; starting afresh"
                );
                None
            }
            None => None,
        };
        let world = match continued {
            Some(world) => world,
            None => {
                files::clear(&dir, false)?;
                let world = World::fresh(
                    scenario,
                    seed,
                    nodes,
                    fingerprint,
                    dir.clone(),
                    clock.now().timestamp_millis(),
                    &mut out,
                );
                files::forget_checkpoints(&world)?;
                world
            }
        };
        let mut core = Core { world, out };
        files::commit(&mut core.world, &mut core.out)?;
        let node_names = core
            .world
            .state
            .nodes
            .iter()
            .map(|node| node.name.clone())
            .collect();
        Ok(Self {
            dir,
            clock,
            node_names,
            core: Mutex::new(core),
        })
    }

    /// Deletes the state, logs, kernel logs, default checkpoints and timeline in `dir`.
    pub fn reset(dir: &Path) -> Result<(), SimError> {
        files::clear(dir, true)
    }

    /// How far workload `name` has trained at the clock's now: the last iteration its running attempt
    /// completed (None while no attempt runs) and its last completed checkpoint (0: none yet).
    pub fn progress(&self, name: &str) -> Result<SimProgress, BackendError> {
        self.at_now(|world, _, _| {
            let of_workload = |job: &&state::Job| {
                world
                    .scenario
                    .jobs
                    .get(job.workload)
                    .is_some_and(|spec| spec.name == name)
            };
            let running =
                world
                    .state
                    .jobs
                    .iter()
                    .filter(of_workload)
                    .find_map(|job| match &job.phase {
                        state::Phase::Running(run) => Some((run.iteration, run.resumed_from)),
                        _ => None,
                    });
            let (struck_ms, shown_ms) = world
                .state
                .jobs
                .iter()
                .rev()
                .filter(of_workload)
                .find_map(|job| job.struck_ms.map(|struck| (Some(struck), job.shown_ms)))
                .unwrap_or((None, None));
            Ok(SimProgress {
                struck_ms,
                shown_ms,
                iteration: running.map(|(iteration, _)| iteration),
                resumed_from: running.map(|(_, resumed)| resumed),
                checkpoint: world.state.checkpoints.get(name).copied().unwrap_or(0),
            })
        })
    }

    /// The (absolute) directory the sim writes to.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Plays the simulation forward to the clock's now, runs `act` at that time, then writes what
    /// changed.
    fn at_now<R>(
        &self,
        act: impl FnOnce(&mut World, i64, &mut Output) -> Result<R, BackendError>,
    ) -> Result<R, BackendError> {
        let mut core = crate::sync::lock(&self.core);
        let Core { world, out } = &mut *core;
        let now_ms = self.clock.now().timestamp_millis();
        world.advance(now_ms, out);
        let at_ms = world.state.now_ms;
        let result = act(world, at_ms, out);
        files::commit(world, out)?;
        result
    }
}

#[async_trait]
impl Backend for SimCluster {
    fn kind(&self) -> BackendKind {
        BackendKind::Sim
    }

    fn lists_from_cache(&self) -> bool {
        // The simulated cluster is in this process: there is no controller to spare.
        true
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::of(&[
            Can::Requeue,
            Can::Resubmit,
            Can::Drain,
            Can::UpdateExclusions,
        ])
    }

    async fn list_jobs(&self) -> Result<Vec<JobSnapshot>, BackendError> {
        self.at_now(|world, at_ms, _| Ok(world.snapshots(at_ms)))
    }

    async fn job(&self, job_id: &str) -> Result<Option<JobSnapshot>, BackendError> {
        self.at_now(|world, at_ms, _| Ok(world.snapshot(job_id, at_ms)))
    }

    async fn requeue(
        &self,
        job_id: &str,
        exclude: &[String],
    ) -> Result<ActionOutcome, BackendError> {
        self.at_now(|world, at_ms, out| world.requeue(job_id, exclude, at_ms, out))
    }

    async fn resubmit(
        &self,
        spec: &JobSpec,
        exclude: &[String],
        tag: &str,
    ) -> Result<ActionOutcome, BackendError> {
        self.at_now(|world, at_ms, out| world.resubmit(spec, exclude, tag, at_ms, out))
    }

    /// The simulated cluster runs only its scenario's workloads: a phase's batch script names one by
    /// its file stem (`llama-pretrain.sbatch` runs the workload `llama-pretrain`).
    async fn submit(&self, job: &NewJob) -> Result<ActionOutcome, BackendError> {
        let crate::model::PhaseJob::Batch { script, .. } = &job.job else {
            return Err(BackendError::Invalid(format!(
                "{}: the simulated cluster runs batch scripts, not manifests",
                job.name
            )));
        };
        let workload = script
            .file_stem()
            .map(|stem| stem.to_string_lossy().into_owned())
            .unwrap_or_default();
        let spec = JobSpec {
            name: workload,
            nodes: job.nodes.unwrap_or(0),
            command: Some(script.display().to_string()),
            ..JobSpec::default()
        };
        self.at_now(|world, at_ms, out| world.resubmit(&spec, &[], &job.tag, at_ms, out))
    }

    async fn cancel(&self, job_id: &str) -> Result<ActionOutcome, BackendError> {
        self.at_now(|world, at_ms, out| world.cancel(job_id, at_ms, out))
    }

    async fn drain_node(&self, node: &str, reason: &str) -> Result<ActionOutcome, BackendError> {
        self.at_now(|world, _, out| world.drain(node, reason, out))
    }

    async fn set_exclusions(
        &self,
        job_id: &str,
        nodes: &[String],
    ) -> Result<ActionOutcome, BackendError> {
        self.at_now(|world, _, out| world.set_exclusions(job_id, nodes, out))
    }

    async fn resume_node(&self, node: &str, reason: &str) -> Result<ActionOutcome, BackendError> {
        self.at_now(|world, now_ms, out| world.resume(node, reason, now_ms, out))
    }

    fn command_for(&self, kind: ActionKind, params: &ActionParams) -> String {
        let core = crate::sync::lock(&self.core);
        core.world.command_for(kind, params)
    }

    async fn node_inventory(&self) -> Result<Option<crate::capacity::NodeListing>, BackendError> {
        self.at_now(|world, _, _| Ok(Some(world.node_listing())))
    }

    fn node_log(&self, node: &str) -> Option<PathBuf> {
        self.node_names
            .iter()
            .any(|name| name == node)
            .then(|| self.dir.join(cluster::kernel_log(node)))
    }
}
