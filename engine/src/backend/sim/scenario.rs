//! Scenarios: which training jobs the simulated cluster runs and which faults strike them.
//!
//! A scenario is data (TOML), not code: the built-in ones live in `data/scenarios/*.toml` and a user can
//! write their own and pass its path.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::SimError;

/// Built-in scenarios, by name, with their TOML text.
const BUILTINS: [(&str, &str); 8] = [
    (
        "nccl-timeout",
        include_str!("../../../../data/scenarios/nccl-timeout.toml"),
    ),
    (
        "xid79",
        include_str!("../../../../data/scenarios/xid79.toml"),
    ),
    (
        "cuda-oom",
        include_str!("../../../../data/scenarios/cuda-oom.toml"),
    ),
    ("hang", include_str!("../../../../data/scenarios/hang.toml")),
    (
        "straggler",
        include_str!("../../../../data/scenarios/straggler.toml"),
    ),
    (
        "app-bug",
        include_str!("../../../../data/scenarios/app-bug.toml"),
    ),
    (
        "crash-loop",
        include_str!("../../../../data/scenarios/crash-loop.toml"),
    ),
    (
        "healthy",
        include_str!("../../../../data/scenarios/healthy.toml"),
    ),
];

/// GPUs in every simulated node.
pub const GPUS_PER_NODE: u32 = 8;

/// A scripted run of the simulated cluster: its jobs and their faults.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Short name (`nccl-timeout`); the persisted state belongs to one scenario name.
    pub name: String,
    /// One or two sentences for `runguard demo --list`.
    pub description: String,
    /// The training jobs, submitted in this order.
    pub jobs: Vec<WorkloadSpec>,
}

/// One training job of a scenario (Megatron-style pretraining or fine-tuning).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSpec {
    /// Slurm job name; a resubmitted spec is matched back to its workload by this name.
    pub name: String,
    /// Submitting user, as `squeue` shows it.
    #[serde(default = "default_user")]
    pub user: String,
    /// Nodes per attempt.
    pub nodes: u32,
    /// GPUs (= ranks) per node, at most [`GPUS_PER_NODE`].
    #[serde(default = "default_gpus_per_node")]
    pub gpus_per_node: u32,
    /// Iterations the training runs in total.
    pub iterations: u64,
    /// Sim seconds one iteration takes on healthy nodes.
    pub seconds_per_iteration: f64,
    /// Megatron's `--log-interval`.
    #[serde(default = "default_log_interval")]
    pub log_interval: u64,
    /// Megatron's `--save-interval`.
    #[serde(default = "default_checkpoint_interval")]
    pub checkpoint_interval: u64,
    /// Model TFLOP/s per GPU on healthy nodes (jittered slightly per line).
    pub tflops_per_gpu: f64,
    /// Megatron's `--global-batch-size`, shown in iteration lines.
    #[serde(default = "default_global_batch_size")]
    pub global_batch_size: u64,
    /// The job's own requeue limit, as a Slurm comment would declare it.
    #[serde(default = "default_max_requeue_times")]
    pub max_requeue_times: u32,
    /// Megatron's `--save`/`--load`; relative paths are under the sim directory.
    #[serde(default)]
    pub checkpoint_dir: Option<String>,
    /// NCCL collective timeout (`--distributed-timeout-minutes`), in seconds.
    #[serde(default = "default_collective_timeout_s")]
    pub collective_timeout_s: u64,
    /// Sim seconds after the scenario starts at which the job is submitted.
    #[serde(default)]
    pub submit_after_s: u64,
    /// Silent seconds between `training ...` and the first iteration of every attempt (a first
    /// compile, as torch.compile or XLA make).
    #[serde(default)]
    pub compile_s: u64,
    /// Seconds a checkpoint save holds the run; unset: 5 to 9 s, drawn per save.
    #[serde(default)]
    pub save_s: Option<u64>,
    /// Nodes the very first attempt runs on (so a node-pinned fault strikes it); empty = the scheduler picks.
    #[serde(default)]
    pub initial_nodes: Vec<String>,
    /// The batch script, shown in the job's spec.
    #[serde(default)]
    pub script: Option<String>,
    /// What goes wrong, in order; faults of the same iteration strike together (the first fatal one wins).
    #[serde(default)]
    pub faults: Vec<FaultSpec>,
}

/// A fault that strikes a workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// What happens.
    pub kind: FaultKind,
    /// Strikes when this (absolute) iteration completes.
    #[serde(default)]
    pub at_iteration: Option<u64>,
    /// Strikes this many iterations after each attempt (re)starts.
    #[serde(default)]
    pub after_iterations: Option<u64>,
    /// Which attempts of the workload it strikes.
    #[serde(default)]
    pub attempts: AttemptFilter,
    /// `any` (a seeded node of the allocation) or a node name; a named node only strikes attempts running on it.
    #[serde(default = "default_fault_node")]
    pub node: String,
    /// Local GPU index on the node; seeded when absent.
    #[serde(default)]
    pub gpu: Option<u32>,
    /// Straggler only: how much slower each iteration gets.
    #[serde(default)]
    pub slowdown: Option<f64>,
    /// Strikes the attempt running this many sim seconds after the scenario started (at its first
    /// iteration completed from then on); an attempt started later is spared unless `stays`.
    #[serde(default)]
    pub at_s: Option<u64>,
    /// With `at_s` and a named node: the fault stays with the node, so every later attempt on it is
    /// struck `after_iterations` (default 1) iterations after it starts, as broken hardware recurs.
    #[serde(default)]
    pub stays: bool,
}

/// The kinds of failure the sim knows how to act out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// A collective stalls on one node: NCCL WARN lines, then the torch watchdog timeout on every rank.
    NcclTimeout,
    /// A GPU falls off the bus: Xid 79 in the node's kernel log, CUDA errors on its rank.
    Xid79,
    /// An uncorrectable double-bit ECC error in GPU memory (HBM): Xid 48 in the node's kernel log.
    Xid48,
    /// `torch.OutOfMemoryError` on one rank.
    CudaOom,
    /// The job goes silent and stays RUNNING.
    Hang,
    /// One node becomes slow; the job continues at lower throughput.
    Straggler,
    /// A Python exception in the training script on rank 0.
    AppBug,
}

impl FaultKind {
    /// The name used in scenario files.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NcclTimeout => "nccl_timeout",
            Self::Xid79 => "xid79",
            Self::Xid48 => "xid48",
            Self::CudaOom => "cuda_oom",
            Self::Hang => "hang",
            Self::Straggler => "straggler",
            Self::AppBug => "app_bug",
        }
    }
}

/// Which attempts of a workload a fault strikes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptFilter {
    /// Only the workload's very first attempt.
    #[default]
    First,
    /// Every attempt.
    Every,
    /// Every attempt but the first.
    Retries,
}

impl AttemptFilter {
    /// Whether attempt number `attempt` (0 = the first ever) is struck.
    pub fn includes(self, attempt: u32) -> bool {
        match self {
            Self::First => attempt == 0,
            Self::Every => true,
            Self::Retries => attempt > 0,
        }
    }
}

fn default_user() -> String {
    "researcher".to_string()
}
fn default_gpus_per_node() -> u32 {
    GPUS_PER_NODE
}
fn default_log_interval() -> u64 {
    10
}
fn default_checkpoint_interval() -> u64 {
    100
}
fn default_global_batch_size() -> u64 {
    512
}
fn default_max_requeue_times() -> u32 {
    3
}
fn default_collective_timeout_s() -> u64 {
    600
}
fn default_fault_node() -> String {
    "any".to_string()
}

impl Scenario {
    /// Names of the scenarios compiled into the binary.
    pub fn builtin_names() -> Vec<&'static str> {
        BUILTINS.iter().map(|(name, _)| *name).collect()
    }

    /// A built-in scenario by name.
    pub fn builtin(name: &str) -> Option<Scenario> {
        let (_, text) = BUILTINS.iter().find(|(builtin, _)| *builtin == name)?;
        match Self::parse(text, &format!("builtin:{name}")) {
            Ok(scenario) => Some(scenario),
            Err(err) => {
                tracing::error!(%err, "built-in scenario does not parse");
                None
            }
        }
    }

    /// Loads a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, SimError> {
        let text = std::fs::read_to_string(path).map_err(|source| SimError::io(path, source))?;
        Self::parse(&text, &path.display().to_string())
    }

    /// A built-in name, else a path to a scenario file.
    pub fn resolve(name_or_path: &str) -> Result<Scenario, SimError> {
        if let Some(scenario) = Self::builtin(name_or_path) {
            return Ok(scenario);
        }
        let path = Path::new(name_or_path);
        if path.is_file() {
            return Self::load(path);
        }
        Err(SimError::UnknownScenario {
            name: name_or_path.to_string(),
            builtins: Self::builtin_names().join(", "),
        })
    }

    /// Parses and validates scenario text; `origin` names the source in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Scenario, SimError> {
        let scenario: Scenario = toml::from_str(text).map_err(|err| {
            let offset = err.span().map_or(0, |span| span.start).min(text.len());
            let before = text.get(..offset).unwrap_or_default();
            let line = before.matches('\n').count() + 1;
            let column = before.len() - before.rfind('\n').map_or(0, |at| at + 1) + 1;
            SimError::ScenarioSyntax {
                origin: origin.to_string(),
                line,
                column,
                message: err.message().trim().to_string(),
            }
        })?;
        scenario
            .validate()
            .map_err(|message| SimError::ScenarioInvalid {
                origin: origin.to_string(),
                message,
            })?;
        Ok(scenario)
    }

    /// Range and consistency checks serde cannot express.
    fn validate(&self) -> Result<(), String> {
        if self.name.trim().is_empty() {
            return Err("`name` must not be empty".into());
        }
        if self.jobs.is_empty() {
            return Err("a scenario needs at least one [[jobs]] entry".into());
        }
        for (index, job) in self.jobs.iter().enumerate() {
            if self.jobs[..index]
                .iter()
                .any(|other| other.name == job.name)
            {
                return Err(format!("two jobs are named `{}`", job.name));
            }
            job.validate()
                .map_err(|message| format!("job `{}`: {message}", job.name))?;
        }
        Ok(())
    }

    /// The workload a job name belongs to.
    pub(crate) fn workload_index(&self, name: &str) -> Option<usize> {
        self.jobs.iter().position(|job| job.name == name)
    }
}

impl WorkloadSpec {
    fn validate(&self) -> Result<(), String> {
        let valid_name = !self.name.is_empty()
            && self
                .name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
        if !valid_name {
            return Err("`name` must be non-empty letters, digits, `-`, `_` or `.`".into());
        }
        if self.nodes == 0 {
            return Err("`nodes` must be at least 1".into());
        }
        if self.gpus_per_node == 0 || self.gpus_per_node > GPUS_PER_NODE {
            return Err(format!("`gpus_per_node` must be 1..={GPUS_PER_NODE}"));
        }
        if self.iterations == 0 || self.iterations > 10_000_000 {
            return Err("`iterations` must be 1..=10000000".into());
        }
        if !(self.seconds_per_iteration.is_finite()
            && self.seconds_per_iteration >= 0.01
            && self.seconds_per_iteration <= 3600.0)
        {
            return Err("`seconds_per_iteration` must be between 0.01 and 3600".into());
        }
        if self.log_interval == 0 || self.checkpoint_interval == 0 {
            return Err("`log_interval` and `checkpoint_interval` must be at least 1".into());
        }
        if !(self.tflops_per_gpu.is_finite() && self.tflops_per_gpu > 0.0) {
            return Err("`tflops_per_gpu` must be a positive number".into());
        }
        if self.global_batch_size == 0 {
            return Err("`global_batch_size` must be at least 1".into());
        }
        if self.collective_timeout_s == 0 {
            return Err("`collective_timeout_s` must be at least 1".into());
        }
        if !self.initial_nodes.is_empty() && self.initial_nodes.len() != self.nodes as usize {
            return Err(format!(
                "`initial_nodes` lists {} nodes but the job uses {}",
                self.initial_nodes.len(),
                self.nodes
            ));
        }
        if let Some((index, node)) = self
            .initial_nodes
            .iter()
            .enumerate()
            .find(|(index, node)| self.initial_nodes[..*index].contains(node))
        {
            return Err(format!(
                "`initial_nodes` lists `{node}` twice (entry {})",
                index + 1
            ));
        }
        if let Some(node) = self
            .initial_nodes
            .iter()
            .find(|node| node_number(node).is_none())
        {
            return Err(format!(
                "`initial_nodes`: `{node}` is not a node name like node-07"
            ));
        }
        for (index, fault) in self.faults.iter().enumerate() {
            fault.validate(self).map_err(|message| {
                format!("fault #{} ({}): {message}", index + 1, fault.kind.as_str())
            })?;
        }
        Ok(())
    }
}

impl FaultSpec {
    fn validate(&self, job: &WorkloadSpec) -> Result<(), String> {
        match (self.at_iteration, self.after_iterations) {
            (Some(_), Some(_)) | (None, None) => {
                return Err("set exactly one of `at_iteration` and `after_iterations`".into());
            }
            (Some(0), _) | (_, Some(0)) => return Err("the iteration must be at least 1".into()),
            _ => {}
        }
        if self.node != "any" && node_number(&self.node).is_none() {
            return Err(format!(
                "`node` must be `any` or a node name like node-07, not `{}`",
                self.node
            ));
        }
        if self.gpu.is_some_and(|gpu| gpu >= job.gpus_per_node) {
            return Err(format!(
                "`gpu` must be below gpus_per_node ({})",
                job.gpus_per_node
            ));
        }
        match (self.kind, self.slowdown) {
            (FaultKind::Straggler, Some(factor))
                if !(factor.is_finite() && (1.0..=20.0).contains(&factor)) =>
            {
                Err("`slowdown` must be between 1 and 20".into())
            }
            (FaultKind::Straggler, _) => Ok(()),
            (_, Some(_)) => Err("`slowdown` only applies to straggler faults".into()),
            (_, None) => Ok(()),
        }
    }
}

/// The number of a `node-07` style name (1-based), if it is one.
pub(crate) fn node_number(name: &str) -> Option<u32> {
    let digits = name.strip_prefix("node-")?;
    if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|n| *n > 0)
}

/// The name of node number `n` (1-based): `node-01`.
pub(crate) fn node_name(n: u32) -> String {
    format!("node-{n:02}")
}
