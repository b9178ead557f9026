//! Configuration: a TOML file, every key optional with a documented default (see `config.example.toml`).
//!
//! Unknown keys and bad values are errors that name the key and the line, because a silently ignored typo in
//! a recovery whitelist is worse than refusing to start.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::model::ActionKind;
pub use crate::model::BackendKind;

mod kubernetes;
pub use kubernetes::KubernetesConfig;

/// A configuration that could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The message of the TOML parser names the line, the column and the key.
    #[error("invalid config file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The whole configuration.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub engine: EngineConfig,
    pub detect: DetectConfig,
    pub store: StoreConfig,
    pub backend: BackendConfig,
    pub recovery: RecoveryConfig,
    pub ledger: LedgerConfig,
    pub telemetry: TelemetryConfig,
    pub sim: SimConfig,
    pub slurm: SlurmConfig,
    pub kubernetes: KubernetesConfig,
    pub alerts: crate::alert::AlertsConfig,
    pub metrics: MetricsConfig,
    pub tui: TuiConfig,
    pub narrative: NarrativeConfig,
}

/// The Prometheus endpoint of the headless engine.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Where `/metrics` is served, e.g. "127.0.0.1:9464"; unset: not served. Loopback unless the
    /// address says otherwise.
    pub listen: Option<String>,
}

/// The terminal cockpit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TuiConfig {
    /// `dark`, `light`, `high-contrast`, or a file NAME.toml in the config directory's `themes/`.
    pub theme: String,
    /// The overview's columns in order (empty: the default set). `:columns` and `:theme` keep the
    /// choice in `cockpit.toml` beside this file, which wins over these two keys.
    pub columns: Vec<String>,
}

impl Default for TuiConfig {
    fn default() -> Self {
        Self {
            theme: "dark".to_string(),
            columns: Vec::new(),
        }
    }
}

/// The Slurm backend.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlurmConfig {
    /// Watch every job of these partitions (besides jobs enrolled by their `--comment`).
    pub partitions: Vec<String>,
    /// Watch these job ids too.
    pub watch: Vec<String>,
    /// A Slurm command that takes longer counts as the scheduler being down.
    pub command_timeout_secs: u64,
    /// How jobs are listed: `auto` (`squeue --json`, else `scontrol show job -o`), `squeue-json`, `scontrol`.
    pub listing: Listing,
    /// Longest a requeued job may take to leave its nodes (Slurm's KillWait plus the epilog) before its
    /// release; past it the release is retried on the next tick.
    pub settle_timeout_secs: u64,
    /// How Slurm is reached: `cli` (squeue, scontrol, sbatch) or `rest` (slurmrestd, with the tools for
    /// what its API cannot do: requeue, drain, submit).
    pub api: SlurmApiKind,
    /// slurmrestd's address: `unix:/path/to/socket` (rest_auth/local) or `http://host:port` (JWT).
    pub rest_endpoint: Option<String>,
    /// User name sent with the JWT (default: the user runguard runs as).
    pub rest_user: Option<String>,
    /// `SLURM_CONF` for the Slurm commands runguard runs (default: the environment's, else Slurm's own).
    pub slurm_conf: Option<PathBuf>,
    /// Where Slurm's client commands (`squeue`, `scontrol`, `sbatch`...) are, when not on `PATH`.
    pub bin_dir: Option<PathBuf>,
    /// The jobcomp file (`JobCompLoc` with `JobCompType=jobcomp/filetxt`) to read ended jobs from once the
    /// controller forgets them; by default the one `scontrol show config` names. `sacct` is asked first.
    pub jobcomp_path: Option<PathBuf>,
    /// Environment variable holding the JWT (`scontrol token` prints `SLURM_JWT=...`); never the token
    /// itself in the config.
    pub rest_token_env: String,
    /// A file holding the JWT (alone or as `SLURM_JWT=...`), read again when the token expires or is
    /// refused, so that a job that renews it keeps runguard running; wins over `rest_token_env`.
    pub rest_token_file: Option<PathBuf>,
    /// The slurmrestd OpenAPI version to speak (`v0.0.40`); by default the newest one slurmrestd
    /// offers and runguard speaks (v0.0.38 to v0.0.43).
    pub rest_api_version: Option<String>,
}

/// How the Slurm backend reaches Slurm.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SlurmApiKind {
    #[default]
    Cli,
    Rest,
}

impl Default for SlurmConfig {
    fn default() -> Self {
        Self {
            partitions: Vec::new(),
            watch: Vec::new(),
            command_timeout_secs: 30,
            listing: Listing::Auto,
            settle_timeout_secs: 30,
            api: SlurmApiKind::Cli,
            rest_endpoint: None,
            rest_user: None,
            jobcomp_path: None,
            slurm_conf: None,
            bin_dir: None,
            rest_token_env: "SLURM_JWT".to_string(),
            rest_token_file: None,
            rest_api_version: None,
        }
    }
}

/// How often the engine looks and what counts as a hang.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// Seconds (of the engine's clock) between two listings of the watched jobs: the scheduler is asked
    /// at most this often, whatever the logs do (a changed log is read at once and decided on with what
    /// is known).
    pub poll_interval_secs: f64,
    /// Seconds between two queries of the state of the nodes under running watched jobs (a node that
    /// stops responding is a node failure of its job at once). Never more often than the listings.
    pub node_poll_interval_secs: f64,
    /// A running job that writes no log line for this long is hung (the AJR heartbeat rule).
    pub heartbeat_timeout_secs: u64,
    /// Wake up as soon as a followed log changes (inotify), besides polling. Turn off where file
    /// events never arrive (some NFS, Lustre and GPFS mounts) to save the watches.
    pub file_events: bool,
    /// When the scheduler does not answer, the next call waits the poll interval doubled after each
    /// failure, up to this many seconds.
    pub max_backoff_secs: u64,
}

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            poll_interval_secs: 5.0,
            node_poll_interval_secs: 15.0,
            heartbeat_timeout_secs: 120,
            file_events: true,
            max_backoff_secs: 300,
        }
    }
}

/// Thresholds of the detectors that watch a running attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DetectConfig {
    /// A running job whose iteration count has not moved for this long is hung, even if it still logs.
    pub progress_timeout_secs: u64,
    /// A node whose ranks have written nothing for this long (and for four of their usual gaps) while
    /// the other nodes' ranks go on is dead under its job: a node failure at once. 0 turns it off.
    pub node_silence_secs: u64,
    /// Throughput samples ignored at the start of an attempt (compilation, warm-up, checkpoint load).
    pub throughput_warmup_samples: usize,
    /// Samples after the warm-up whose median is the attempt's baseline throughput.
    pub throughput_baseline_samples: usize,
    /// A sample this many percent below the baseline counts as a drop.
    pub throughput_drop_percent: f64,
    /// This many consecutive dropped samples make a persistent throughput drop.
    pub throughput_drop_samples: usize,
    /// Data loading taking at least this share (percent) of the time of the last
    /// `input_bound_reports` progress reports, with more than one of them waiting that long, makes a
    /// run input-bound.
    pub input_bound_percent: f64,
    pub input_bound_reports: usize,
    /// A batch waiting this many seconds for data (and ten times the usual wait) is an input stall:
    /// a median wait this long, or stalls in a tenth of the batches, make a run input-bound.
    pub input_stall_secs: f64,
    /// Steps this many times as long as the baseline's, for `throughput_drop_samples` reports in a
    /// row, make a slowdown.
    pub step_slowdown_factor: f64,
    /// A rank whose iteration time exceeds the fastest rank's by this many percent is a straggler.
    pub straggler_percent: f64,
    /// Consecutive straggler reports naming a slow rank before it is raised.
    pub straggler_reports: usize,
    /// A GPU at or above this temperature (°C) is throttling.
    pub thermal_limit_c: f64,
    /// No checkpoint within this many times the observed checkpoint interval is a checkpoint stall.
    pub checkpoint_stall_factor: f64,
    /// A job pending longer than this is stuck.
    pub stuck_pending_secs: u64,
    /// Section-aware hang bounds, learned from the run: silence in a step is a hang after this many
    /// times the slowest usual gap between progress reports (p99), once enough gaps were seen...
    pub step_gap_factor: f64,
    /// ...but never sooner than this.
    pub step_timeout_floor_secs: u64,
    /// Silence before the first progress report (start-up, compilation, checkpoint load), unless
    /// earlier attempts showed a longer start-up (three times the longest).
    pub setup_timeout_secs: u64,
    /// Silence while a checkpoint save is due, unless earlier saves took longer (four times the
    /// longest).
    pub save_timeout_secs: u64,
    /// A running attempt that printed a line the catalog marks fatal while running (an IB work
    /// completion error, NCCL's remote or system error, a watchdog timeout) is failed once no progress
    /// followed it for twice the median gap between its progress reports, but never sooner than
    /// this...
    pub fatal_confirm_min_secs: u64,
    /// ...nor later than this: a run reporting less often is taken at the catalog's word. 0 turns
    /// the rule off (the silence bounds still apply).
    pub fatal_confirm_max_secs: u64,
}

impl Default for DetectConfig {
    fn default() -> Self {
        Self {
            progress_timeout_secs: 1800,
            node_silence_secs: 20,
            throughput_warmup_samples: 3,
            throughput_baseline_samples: 5,
            throughput_drop_percent: 20.0,
            throughput_drop_samples: 5,
            input_bound_percent: 50.0,
            input_bound_reports: 8,
            input_stall_secs: 5.0,
            step_slowdown_factor: 2.0,
            straggler_percent: 20.0,
            straggler_reports: 3,
            thermal_limit_c: 92.0,
            checkpoint_stall_factor: 2.0,
            stuck_pending_secs: 3600,
            step_gap_factor: 4.0,
            step_timeout_floor_secs: 10,
            setup_timeout_secs: 1800,
            save_timeout_secs: 1800,
            fatal_confirm_min_secs: 3,
            fatal_confirm_max_secs: 5,
        }
    }
}

/// Where state is kept.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// SQLite file; empty means `runguard.sqlite` in the XDG data directory.
    pub path: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BackendConfig {
    pub kind: BackendKind,
}

/// How a failed run is brought back.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryMode {
    /// Requeue the same job id (Slurm `scontrol requeue`).
    #[default]
    Requeue,
    /// Submit the saved spec again as a new job.
    Resubmit,
}

/// The recovery policy's limits and the whitelist of actions that run without approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RecoveryConfig {
    /// System-wide requeue limit; a job's `max_requeue_times` can only lower it.
    pub system_max_requeues: u32,
    /// Stop after this many consecutive failed attempts without a new checkpoint (crash loop).
    pub crash_loop_threshold: u32,
    pub mode: RecoveryMode,
    /// Actions that run without approval; any other action is only proposed.
    pub whitelist: Vec<ActionKind>,
    /// Also propose draining the culprit node of a hardware failure.
    pub drain_culprit_nodes: bool,
    /// Over-eviction: when several nodes of the allocation report a node fault and nothing singles out
    /// one, restart without all of them, if enough nodes can still take the job now.
    pub exclude_suspects: bool,
    /// Do not restart a job when fewer nodes than this could ever run it once the bad ones are
    /// excluded (nodes down or drained now count: the job waits for them); 0 means the job's own node
    /// count.
    pub min_nodes: u32,
    /// A recovery that has not brought the run back this long after the failure raises the watchdog
    /// alert (0: never).
    pub watchdog_secs: u64,
}

impl Default for RecoveryConfig {
    fn default() -> Self {
        Self {
            system_max_requeues: 24,
            crash_loop_threshold: 3,
            mode: RecoveryMode::Requeue,
            whitelist: vec![
                ActionKind::Requeue,
                ActionKind::Resubmit,
                ActionKind::Cancel,
                ActionKind::UpdateExclusions,
            ],
            drain_culprit_nodes: true,
            exclude_suspects: false,
            min_nodes: 0,
            watchdog_secs: 1800,
        }
    }
}

/// The node ledger: how quarantined nodes are checked and let back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LedgerConfig {
    /// The health check of a quarantined node, as argv with `{node}` (`["dcgmi", "diag", "-r", "2"]`
    /// through the site's remote shell, a short all-reduce job pinned to the node, a site script); exit
    /// status 0 lets the node back. Empty: a quarantined node stays out until `runguard nodes
    /// --release NODE`.
    pub health_check: Vec<String>,
    /// Longest a health check may run.
    pub health_check_timeout_secs: u64,
    /// First check after a node is quarantined; the wait doubles after each failed check.
    pub first_check_secs: u64,
    /// Longest wait between two checks.
    pub max_check_interval_secs: u64,
    /// Probation after a node's first return to service, doubled with each later quarantine.
    pub probation_secs: u64,
    /// On a precursor of failure on a node of a running job (correctable ECC errors, a GPU at its
    /// thermal limit, NVLink or PCIe errors), ask the job to save a checkpoint now with this signal
    /// (`checkpoint_now` in the whitelist lets it run), then requeue it off the node. Empty: never.
    pub checkpoint_signal: String,
    /// How long to wait for the checkpoint the signal asked for before requeuing anyway.
    pub checkpoint_wait_secs: u64,
}

impl Default for LedgerConfig {
    fn default() -> Self {
        Self {
            health_check: Vec::new(),
            health_check_timeout_secs: 900,
            first_check_secs: 300,
            max_check_interval_secs: 6 * 3600,
            probation_secs: 24 * 3600,
            checkpoint_signal: "USR1".to_string(),
            checkpoint_wait_secs: 300,
        }
    }
}

impl LedgerConfig {
    pub fn schedule(&self) -> crate::ledger::Schedule {
        let secs = |secs: u64| chrono::TimeDelta::seconds(secs.min(i64::MAX as u64 / 1000) as i64);
        crate::ledger::Schedule {
            first_check: secs(self.first_check_secs.max(1)),
            max_check_interval: secs(self.max_check_interval_secs.max(1)),
            probation: secs(self.probation_secs),
        }
    }
}

/// Log reading limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelemetryConfig {
    /// Longer lines are truncated to this many bytes (and counted).
    pub max_line_bytes: usize,
    /// At most this many bytes are read from one log per tick, so one huge log cannot stall the loop.
    pub max_read_bytes_per_tick: u64,
    /// Where to look for a job's log when the scheduler does not name it.
    pub log_dir: Option<PathBuf>,
    /// File name of a job's log in `log_dir`: `{name}`, `{jobid}`, `{user}`, `{datetime}` placeholders.
    pub log_pattern: String,
    /// Each node's kernel log (collected dmesg or journal export), `{node}` replaced by the node name.
    pub node_log_pattern: Option<String>,
    /// A command printing `nvidia-smi -q` of a node, as argv with `{node}`; empty: none.
    pub gpu_status_command: Vec<String>,
    /// A command printing `dcgmi health -c` of a node, as argv with `{node}`; empty: none.
    pub gpu_health_command: Vec<String>,
    /// Seconds between two runs of the node commands on the same node.
    pub node_command_interval_secs: u64,
    /// A node command that takes longer is killed and counted as failed.
    pub node_command_timeout_secs: u64,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        Self {
            max_line_bytes: 64 * 1024,
            max_read_bytes_per_tick: 64 * 1024 * 1024,
            log_dir: None,
            log_pattern: "{name}_{jobid}_{datetime}.log".to_string(),
            node_log_pattern: None,
            gpu_status_command: Vec::new(),
            gpu_health_command: Vec::new(),
            node_command_interval_secs: 60,
            node_command_timeout_secs: 20,
        }
    }
}

/// The embedded simulated cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimConfig {
    /// A built-in scenario name (`runguard demo --list`) or a path to a scenario TOML file.
    pub scenario: String,
    /// Seed for everything random in the sim.
    pub seed: u64,
    /// Simulated seconds per real second.
    pub speed: f64,
    /// Where the sim keeps its state and writes logs; empty means `sim/` beside the store file.
    pub dir: Option<PathBuf>,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            scenario: "nccl-timeout".to_string(),
            seed: 42,
            speed: 60.0,
            dir: None,
        }
    }
}

/// An optional narrative of each failure in `runguard report`, written by a language model behind an
/// OpenAI-compatible chat-completions endpoint from the report's evidence (redacted, bounded). It is
/// labelled as such and never decides or runs anything; the engine never asks for one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NarrativeConfig {
    /// The full chat-completions URL (`http://host:port/v1/chat/completions`); unset: no narrative.
    pub endpoint: Option<String>,
    /// The model name sent with each request; required with an endpoint.
    pub model: Option<String>,
    /// The environment variable holding the API key, sent as a Bearer token; never the key itself in
    /// the config. Unset or empty variable: no Authorization header.
    pub api_key_env: String,
    /// A request that takes longer is abandoned and the report goes without a narrative.
    pub timeout_secs: u64,
    /// Largest evidence bundle sent for one failure; a longer one is cut, with a marker.
    pub max_bundle_bytes: usize,
}

impl Default for NarrativeConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            model: None,
            api_key_env: "RUNGUARD_NARRATIVE_API_KEY".to_string(),
            timeout_secs: 20,
            max_bundle_bytes: 16 * 1024,
        }
    }
}

impl NarrativeConfig {
    /// Range checks; the message starts with the dotted key.
    fn validate(&self) -> Result<(), String> {
        if let Some(endpoint) = &self.endpoint {
            if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                return Err("narrative.endpoint: must be an http:// or https:// URL".into());
            }
            if self
                .model
                .as_deref()
                .is_none_or(|model| model.trim().is_empty())
            {
                return Err("narrative.model: must be set when narrative.endpoint is".into());
            }
        }
        if !(1..=600).contains(&self.timeout_secs) {
            return Err("narrative.timeout_secs: must be between 1 and 600".into());
        }
        if self.max_bundle_bytes < 1024 {
            return Err("narrative.max_bundle_bytes: must be at least 1024".into());
        }
        Ok(())
    }
}

impl Config {
    /// Parses and validates a config text; `path` only names the source in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|err| ConfigError::Invalid {
            path: path.to_path_buf(),
            message: err.to_string(),
        })?;
        config.validate().map_err(|message| ConfigError::Invalid {
            path: path.to_path_buf(),
            message: locate_key(text, &message),
        })?;
        Ok(config)
    }

    /// Loads `explicit` if given (it must exist), else `config.toml` in the XDG config dir if it exists,
    /// else the defaults.
    pub fn load(explicit: Option<&Path>) -> Result<Self, ConfigError> {
        let path = match explicit {
            Some(path) => path.to_path_buf(),
            None => match crate::paths::default_config_file() {
                Some(path) if path.exists() => path,
                _ => return Ok(Config::default()),
            },
        };
        let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
            path: path.clone(),
            source,
        })?;
        Self::parse(&text, &path)
    }

    /// Range checks serde cannot express; the message starts with the dotted key.
    fn validate(&self) -> Result<(), String> {
        let mut channel_names = std::collections::HashSet::new();
        for channel in &self.alerts.channels {
            channel
                .validate()
                .map_err(|message| format!("alerts.channels: {message}"))?;
            if !channel_names.insert(channel.name.as_str()) {
                return Err(format!(
                    "alerts.channels: two channels are named {:?}",
                    channel.name
                ));
            }
        }
        if self.alerts.max_attempts == 0 || self.alerts.timeout_secs == 0 {
            return Err("alerts.max_attempts and alerts.timeout_secs: must be at least 1".into());
        }
        if let Some(listen) = &self.metrics.listen
            && listen.parse::<std::net::SocketAddr>().is_err()
        {
            return Err(format!(
                "metrics.listen: {listen:?} is not an address like 127.0.0.1:9464"
            ));
        }
        self.narrative.validate()?;
        if !(self.engine.poll_interval_secs > 0.0 && self.engine.poll_interval_secs <= 3600.0) {
            return Err("engine.poll_interval_secs: must be > 0 and at most 3600".into());
        }
        if !(self.engine.node_poll_interval_secs > 0.0
            && self.engine.node_poll_interval_secs <= 3600.0)
        {
            return Err("engine.node_poll_interval_secs: must be > 0 and at most 3600".into());
        }
        if self.engine.heartbeat_timeout_secs == 0 {
            return Err("engine.heartbeat_timeout_secs: must be at least 1".into());
        }
        if let Err(err) = crate::telemetry::discover::LogPattern::new(&self.telemetry.log_pattern) {
            return Err(format!("telemetry.log_pattern: {}", err.message));
        }
        if self.telemetry.node_command_timeout_secs == 0 {
            return Err("telemetry.node_command_timeout_secs: must be at least 1".into());
        }
        if let Some(pattern) = &self.telemetry.node_log_pattern
            && !pattern.contains("{node}")
        {
            return Err("telemetry.node_log_pattern: must contain {node}".into());
        }
        let detect = &self.detect;
        if detect.progress_timeout_secs == 0 {
            return Err("detect.progress_timeout_secs: must be at least 1".into());
        }
        if detect.throughput_baseline_samples == 0 || detect.throughput_drop_samples == 0 {
            return Err(
                "detect.throughput_baseline_samples: this and throughput_drop_samples must be at least 1"
                    .into(),
            );
        }
        if !(detect.throughput_drop_percent > 0.0 && detect.throughput_drop_percent < 100.0) {
            return Err("detect.throughput_drop_percent: must be between 0 and 100".into());
        }
        if detect.straggler_percent.is_nan()
            || detect.straggler_percent <= 0.0
            || detect.straggler_reports == 0
        {
            return Err(
                "detect.straggler_percent: must be > 0 (and straggler_reports at least 1)".into(),
            );
        }
        if detect.checkpoint_stall_factor.is_nan() || detect.checkpoint_stall_factor < 1.0 {
            return Err("detect.checkpoint_stall_factor: must be at least 1".into());
        }
        // At 0 every log with three data waits would read as input-bound.
        if !(detect.input_stall_secs.is_finite() && detect.input_stall_secs > 0.0) {
            return Err("detect.input_stall_secs: must be a number of seconds above 0".into());
        }
        if self.recovery.crash_loop_threshold == 0 {
            return Err("recovery.crash_loop_threshold: must be at least 1".into());
        }
        if self.telemetry.max_line_bytes < 256 {
            return Err("telemetry.max_line_bytes: must be at least 256".into());
        }
        if self.telemetry.max_read_bytes_per_tick < self.telemetry.max_line_bytes as u64 {
            return Err(
                "telemetry.max_read_bytes_per_tick: must be at least max_line_bytes".into(),
            );
        }
        if !(self.sim.speed > 0.0 && self.sim.speed <= 100_000.0) {
            return Err("sim.speed: must be > 0 and at most 100000".into());
        }
        Ok(())
    }
}

/// Prefixes a validation message with the line where its key is set, when the file sets it.
fn locate_key(text: &str, message: &str) -> String {
    let Some((dotted, _)) = message.split_once(':') else {
        return message.to_string();
    };
    let (section, key) = dotted.rsplit_once('.').unwrap_or(("", dotted));
    let mut current_section = String::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current_section = name.trim().to_string();
        } else if current_section == section
            && line
                .split_once('=')
                .is_some_and(|(name, _)| name.trim() == key)
        {
            return format!("line {}: {message}", index + 1);
        }
    }
    message.to_string()
}

/// How Slurm jobs are listed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Listing {
    /// `squeue --json`, falling back to `scontrol show job -o` when this Slurm has no JSON output.
    #[default]
    Auto,
    /// Only `squeue --json`.
    SqueueJson,
    /// Only `scontrol show job -o --details` (Slurm without the JSON plugins).
    Scontrol,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_parses_to_the_defaults() {
        let text = include_str!("../../../config.example.toml");
        let config = Config::parse(text, Path::new("config.example.toml")).unwrap();
        assert_eq!(config, Config::default());
    }

    #[test]
    fn unknown_key_is_an_error_naming_key_and_line() {
        let text = "[engine]\npoll_interval_secs = 2\nheartbeat_timout_secs = 10\n";
        let err = Config::parse(text, Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("heartbeat_timout_secs"), "{err}");
        assert!(err.contains("line 3"), "{err}");
    }

    #[test]
    fn bad_value_type_is_an_error_naming_the_line() {
        let text = "[recovery]\nwhitelist = [\"requeue\", \"reboot_cluster\"]\n";
        let err = Config::parse(text, Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("reboot_cluster"), "{err}");
        assert!(err.contains("line 2"), "{err}");
    }

    #[test]
    fn out_of_range_value_names_key_and_line() {
        let text = "[sim]\nseed = 1\nspeed = -4.0\n";
        let err = Config::parse(text, Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 3: sim.speed"), "{err}");
    }

    #[test]
    fn an_input_stall_bound_of_zero_or_less_names_key_and_line() {
        for value in ["0.0", "-5.0", "nan"] {
            let text = format!("[detect]\ninput_stall_secs = {value}\n");
            let err = Config::parse(&text, Path::new("c.toml"))
                .unwrap_err()
                .to_string();
            assert!(err.contains("line 2: detect.input_stall_secs"), "{err}");
        }
    }

    #[test]
    fn partial_config_keeps_defaults_for_the_rest() {
        let text = "[recovery]\ncrash_loop_threshold = 5\n";
        let config = Config::parse(text, Path::new("c.toml")).unwrap();
        assert_eq!(config.recovery.crash_loop_threshold, 5);
        assert_eq!(config.recovery.system_max_requeues, 24);
        assert_eq!(config.engine, EngineConfig::default());
    }

    #[test]
    fn a_narrative_endpoint_needs_a_model_and_a_sane_timeout() {
        let text = "[narrative]\nendpoint = \"http://127.0.0.1:8000/v1/chat/completions\"\n";
        let err = Config::parse(text, Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("narrative.model"), "{err}");
        let text = "[narrative]\nendpoint = \"http://127.0.0.1:8000/v1/chat/completions\"\nmodel = \"m\"\ntimeout_secs = 0\n";
        let err = Config::parse(text, Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 4: narrative.timeout_secs"), "{err}");
        let text = "[narrative]\nendpoint = \"ftp://example.org\"\nmodel = \"m\"\n";
        let err = Config::parse(text, Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("narrative.endpoint"), "{err}");
        let text = "[narrative]\nendpoint = \"http://127.0.0.1:8000/v1/chat/completions\"\nmodel = \"m\"\n";
        let config = Config::parse(text, Path::new("c.toml")).unwrap();
        assert_eq!(config.narrative.timeout_secs, 20);
        assert_eq!(config.narrative.max_bundle_bytes, 16384);
    }

    #[test]
    fn explicit_missing_file_is_a_read_error() {
        let err = Config::load(Some(Path::new("/nonexistent/runguard.toml"))).unwrap_err();
        assert!(matches!(err, ConfigError::Read { .. }));
    }
}
