//! Node signals: each node's kernel log (Xid, ECC, NVLink, PCIe AER, thermal) and, when configured, the
//! output of a GPU status command (`nvidia-smi -q`, `dcgmi health`). What they report becomes evidence
//! of the attempts on that node, and a hot or throttled GPU makes its node a straggler.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Datelike, TimeDelta, Utc};

use super::{Engine, EngineError};
use crate::attribute::scan::{Mark, ShapeMemory};
use crate::detect::Finding;
use crate::model::{AnomalyKind, Attempt, EvidenceLine, IncidentSource, JobState, Workflow};
use crate::telemetry::line::frame_with_year;
use crate::telemetry::node_signals::{
    GpuInventory, NodeSignal, SignalKind, parse_dcgmi_health, parse_kernel_line, parse_nvidia_smi_q,
};
use crate::telemetry::tail::{read_new_lines, step_limits};

/// Longest kernel-log evidence line kept (a longer one keeps its two ends).
const MAX_EVIDENCE_CHARS: usize = 2000;
/// Longest output read from a GPU status command.
const MAX_COMMAND_OUTPUT: usize = 4 << 20;

/// What the node commands last said, per node.
#[derive(Debug, Default)]
pub(super) struct NodeProbes {
    /// PCI bus id → GPU index, from the last `nvidia-smi -q` of each node.
    inventories: HashMap<String, GpuInventory>,
    /// When each node was last probed (engine clock).
    probed: HashMap<String, DateTime<Utc>>,
}

/// The latest attempt of each active workflow, by node, for the nodes they hold.
pub(super) type AttemptsByNode = BTreeMap<String, Vec<(Workflow, Attempt)>>;

/// The latest attempt of each active workflow once, and which of them each node holds: a job on
/// thousands of nodes is not copied once per node.
#[derive(Debug, Default)]
pub(super) struct ActiveAttempts {
    pub attempts: Vec<(Workflow, Attempt)>,
    pub by_node: BTreeMap<String, Vec<usize>>,
}

impl ActiveAttempts {
    /// The attempts on `node`, as the per-node readers take them.
    pub fn on(&self, node: &str) -> Vec<(Workflow, Attempt)> {
        self.by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|index| self.attempts.get(*index).cloned())
            .collect()
    }
}

impl Engine {
    pub(super) fn active_attempts(&self) -> Result<ActiveAttempts, EngineError> {
        let mut active = ActiveAttempts::default();
        for workflow in self.store.db().workflows()? {
            if !workflow.status.is_active() {
                continue;
            }
            if let Some(attempt) = self.store.db().attempts(workflow.id)?.pop() {
                let index = active.attempts.len();
                for node in &attempt.nodes {
                    active.by_node.entry(node.clone()).or_default().push(index);
                }
                active.attempts.push((workflow, attempt));
            }
        }
        Ok(active)
    }

    pub(super) fn attempts_by_node(&self) -> Result<AttemptsByNode, EngineError> {
        let active = self.active_attempts()?;
        Ok(active
            .by_node
            .keys()
            .map(|node| (node.clone(), active.on(node)))
            .collect())
    }

    /// The kernel log of a node: the configured pattern, else what the backend knows.
    fn node_log_path(&self, node: &str) -> Option<PathBuf> {
        match &self.config.telemetry.node_log_pattern {
            Some(pattern) => Some(PathBuf::from(pattern.replace("{node}", node))),
            None => self.backend.node_log(node),
        }
    }

    /// Reads the kernel logs of the nodes the active attempts run on.
    pub(super) fn read_node_logs(&mut self, now: DateTime<Utc>) -> Result<(), EngineError> {
        let active = self.active_attempts()?;
        for node in active.by_node.keys() {
            if let Some(path) = self.node_log_path(node) {
                self.read_node_log(node, &path, &active, now)?;
            }
        }
        Ok(())
    }

    /// Reads what a node's kernel log holds past its stored offset, up to the tick's budget, in steps
    /// of at most [`READ_STEP_BYTES`](crate::telemetry::tail::READ_STEP_BYTES) (as the attempts' logs
    /// are read), each step's signals taken and its offset stored before the next. Only the lines the
    /// catalog's scan marks as candidates are checked against every signature.
    fn read_node_log(
        &mut self,
        node: &str,
        path: &Path,
        active: &ActiveAttempts,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let key = path.to_string_lossy().into_owned();
        let (mut offset, mut identity) = self.store.db().file_offset(&key)?;
        let max_line_bytes = self.config.telemetry.max_line_bytes;
        let mut budget = self.config.telemetry.max_read_bytes_per_tick;
        // The steps of one tick repeat the log's line shapes.
        let mut shapes = ShapeMemory::default();
        loop {
            let limits = step_limits(budget, max_line_bytes);
            let chunk = match read_new_lines(path, offset, identity.as_deref(), limits) {
                Ok(chunk) if chunk.missing => return Ok(()),
                Ok(chunk) => chunk,
                Err(err) => {
                    self.warn("node_log_unreadable", format!("{key}: {err}"), now)?;
                    return Ok(());
                }
            };
            let marks = self.catalog.line_marks_remembering(&chunk, &mut shapes);
            let mut signals = Vec::new();
            for (raw, mark) in chunk.lines().zip(&marks) {
                // A node signal, or any other line a signature knows (OOM killer, mlx5, panics).
                let Some(mut signal) = parse_kernel_line(raw).or_else(|| {
                    (*mark == Mark::Candidate && self.catalog.is_notable(raw)).then(|| NodeSignal {
                        kind: SignalKind::Health {
                            system: "kernel".to_string(),
                            status: "Error".to_string(),
                        },
                        pci: None,
                        gpu: None,
                        host: None,
                        time: None,
                        fatal: false,
                        text: raw.trim().chars().take(1024).collect(),
                    })
                }) else {
                    continue;
                };
                if signal.time.is_none() {
                    signal.time = frame_with_year(raw, now.year()).timestamp;
                }
                if !raw.contains(" kernel:") {
                    signal.text = format!("{node} kernel: {}", signal.text);
                }
                signals.push(signal);
            }
            if !signals.is_empty() {
                let attempts = active.on(node);
                self.take_signals(node, &attempts, signals, IncidentSource::NodeSignal, now)?;
            }
            // Most kernel logs are quiet: a transaction per unchanged one would be most of a pass.
            if chunk.next_offset != offset || chunk.identity != identity {
                self.store.write(|db| {
                    db.set_file_offset(&key, chunk.next_offset, chunk.identity.as_deref())
                })?;
            }
            let Some(left) = chunk.budget_left(offset, budget) else {
                return Ok(());
            };
            budget = left;
            offset = chunk.next_offset;
            identity = chunk.identity;
        }
    }

    /// Runs the configured GPU status commands on the nodes of running attempts, at most once per
    /// `node_command_interval_secs` per node.
    pub(super) async fn probe_nodes(&mut self, now: DateTime<Utc>) -> Result<(), EngineError> {
        let telemetry = self.config.telemetry.clone();
        if telemetry.gpu_status_command.is_empty() && telemetry.gpu_health_command.is_empty() {
            return Ok(());
        }
        let interval = TimeDelta::seconds(telemetry.node_command_interval_secs as i64);
        let timeout = Duration::from_secs(telemetry.node_command_timeout_secs);
        for (node, attempts) in self.attempts_by_node()? {
            if !attempts.iter().any(|(_, a)| a.state == JobState::Running) {
                continue;
            }
            if self
                .node_probes
                .probed
                .get(&node)
                .is_some_and(|last| now - *last < interval)
            {
                continue;
            }
            self.node_probes.probed.insert(node.clone(), now);
            let mut signals = Vec::new();
            if !telemetry.gpu_status_command.is_empty() {
                match run_node_command(&telemetry.gpu_status_command, &node, timeout).await {
                    Ok(output) => {
                        let gpus = parse_nvidia_smi_q(&output);
                        if gpus.is_empty() {
                            self.warn(
                                "gpu_status_unreadable",
                                format!("{node}: the GPU status command printed no GPU"),
                                now,
                            )?;
                        }
                        for gpu in &gpus {
                            signals.extend(gpu.signals(self.config.detect.thermal_limit_c));
                        }
                        self.node_probes
                            .inventories
                            .insert(node.clone(), GpuInventory::from_statuses(&gpus));
                    }
                    Err(message) => {
                        self.warn("gpu_status_failed", format!("{node}: {message}"), now)?
                    }
                }
            }
            if !telemetry.gpu_health_command.is_empty() {
                match run_node_command(&telemetry.gpu_health_command, &node, timeout).await {
                    Ok(output) => signals.extend(parse_dcgmi_health(&output)),
                    Err(message) => {
                        self.warn("gpu_health_failed", format!("{node}: {message}"), now)?
                    }
                }
            }
            for signal in &mut signals {
                signal.time.get_or_insert(now);
                signal.text = format!("{node} gpu status: {}", signal.text);
            }
            self.take_signals(&node, &attempts, signals, IncidentSource::GpuStatus, now)?;
        }
        Ok(())
    }

    /// Keeps a node's signals as evidence of the attempts on it, and raises a straggler for a hot or
    /// throttled GPU under a running attempt.
    fn take_signals(
        &mut self,
        node: &str,
        attempts: &[(Workflow, Attempt)],
        mut signals: Vec<NodeSignal>,
        source: IncidentSource,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        if signals.is_empty() {
            return Ok(());
        }
        if let Some(inventory) = self.node_probes.inventories.get(node) {
            for signal in &mut signals {
                inventory.resolve(signal);
            }
        }
        let incidents = Self::signal_incidents(node, attempts, &signals, source, now);
        self.note_incidents(incidents, now)?;
        if let Some(precursor) = signals.iter().find(|s| super::proactive::is_precursor(s)) {
            self.request_checkpoints(node, attempts, precursor, now)?;
        }
        self.store.write(|db| {
            for signal in &signals {
                let time = signal.time.unwrap_or(now);
                let text: String = match signal.gpu {
                    Some(gpu) if !signal.text.contains(&format!("GPU {gpu}")) => {
                        format!("{} [GPU {gpu}]", signal.text)
                    }
                    _ => signal.text.clone(),
                };
                for (_, attempt) in attempts {
                    // A signal from long before the attempt started is not its evidence.
                    let started = attempt.start_time.unwrap_or(now) - TimeDelta::seconds(60);
                    if time >= started {
                        db.insert_evidence_line(
                            attempt.workflow_id,
                            attempt.index,
                            &EvidenceLine {
                                time,
                                rank: None,
                                text: crate::text::keep_ends(&text, MAX_EVIDENCE_CHARS),
                            },
                        )?;
                    }
                }
            }
            Ok(())
        })?;
        for signal in &signals {
            let throttled = match &signal.kind {
                SignalKind::Thermal { .. } | SignalKind::ClockSlowdown { .. } => true,
                SignalKind::Health { system, .. } => system.eq_ignore_ascii_case("thermal"),
                _ => false,
            };
            if !throttled {
                continue;
            }
            for (workflow, attempt) in attempts {
                if attempt.state != JobState::Running {
                    continue;
                }
                let gpu = signal
                    .gpu
                    .map(|gpu| format!(" GPU {gpu}"))
                    .unwrap_or_default();
                let finding = Finding {
                    kind: AnomalyKind::Straggler,
                    summary: format!(
                        "{node}{gpu} is throttling ({}); the whole job runs at its pace",
                        describe(&signal.kind)
                    ),
                    evidence: vec![signal.text.clone()],
                    node: Some(node.to_string()),
                };
                self.raise_warning(workflow, attempt, finding, now)?;
            }
        }
        Ok(())
    }
}

fn describe(kind: &SignalKind) -> String {
    match kind {
        SignalKind::Thermal {
            temperature_c: Some(celsius),
        } => format!("{celsius:.0} °C"),
        SignalKind::Thermal { .. } => "temperature limit".to_string(),
        SignalKind::ClockSlowdown { reasons } => reasons.join(", "),
        SignalKind::Health { system, status } => format!("{system} {status}"),
        _ => "hardware".to_string(),
    }
}

/// Runs a node command as argv (never through a shell), `{node}` replaced, with a timeout.
pub(super) async fn run_node_command(
    argv: &[String],
    node: &str,
    timeout: Duration,
) -> Result<String, String> {
    let args: Vec<String> = argv.iter().map(|arg| arg.replace("{node}", node)).collect();
    let Some((program, rest)) = args.split_first() else {
        return Err("empty command".to_string());
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(rest)
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null());
    let output = match tokio::time::timeout(timeout, command.output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(err)) => return Err(format!("{}: {err}", args.join(" "))),
        Err(_) => {
            return Err(format!(
                "{}: no answer within {} s",
                args.join(" "),
                timeout.as_secs()
            ));
        }
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!(
            "{} exited with {}: {}",
            args.join(" "),
            output.status,
            stderr.trim().chars().take(300).collect::<String>()
        ));
    }
    let bytes = &output.stdout[..output.stdout.len().min(MAX_COMMAND_OUTPUT)];
    Ok(String::from_utf8_lossy(bytes).into_owned())
}
