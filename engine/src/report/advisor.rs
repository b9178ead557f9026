//! The checkpoint interval advisor: from the run's measured save cost and its failure rate, the
//! Young–Daly interval √(2·C·MTBF) and the share of time that goes to training at the current and at
//! the advised interval.
//!
//! First-order waste model (Young 1974, Daly 2006): with a save every τ seconds costing C, failures
//! every M seconds on average and R seconds to get going again after each, the fraction of time lost
//! is C/τ (saving) + (τ/2 + R)/M (work redone since the last save, and the restart). The effective
//! training time ratio is one minus that, and τ = √(2·C·M) minimises it.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::model::{Attempt, Checkpoint, NodeIncident, ThroughputSample};

use super::WorkflowHistory;
use super::downtime;
use crate::detect::median;

/// How far back the ledger's incidents count for a failure rate.
const LEDGER_WINDOW_DAYS: i64 = 30;

/// What the advisor says about a workflow's checkpoint interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Advice {
    /// Measured cost of one save (median over the saves measured), seconds.
    pub save_cost_secs: f64,
    /// How many saves the cost was measured on.
    pub saves_measured: usize,
    /// The run's current mean interval between saves, seconds.
    pub interval_secs: f64,
    /// Mean time between failures the advice is based on, seconds.
    pub mtbf_secs: f64,
    /// Where the failure rate comes from, in words.
    pub mtbf_basis: String,
    /// Mean time from a failure to the run going again, seconds (0 when no recovery was seen).
    pub restart_secs: f64,
    /// √(2·C·MTBF), seconds.
    pub advised_interval_secs: f64,
    /// Share of time training at the current interval (0..1).
    pub ratio_now: f64,
    /// Share of time training at the advised interval (0..1).
    pub ratio_advised: f64,
}

/// √(2·C·M): the interval that loses the least time to saves and redone work together.
pub fn young_daly(save_cost_secs: f64, mtbf_secs: f64) -> f64 {
    (2.0 * save_cost_secs.max(0.0) * mtbf_secs.max(0.0)).sqrt()
}

/// The share of time spent training with a save every `interval` (see the module's model).
pub fn effective_ratio(interval: f64, save_cost: f64, mtbf: f64, restart: f64) -> f64 {
    if interval <= 0.0 || mtbf <= 0.0 {
        return 0.0;
    }
    (1.0 - save_cost / interval - (interval / 2.0 + restart) / mtbf).clamp(0.0, 1.0)
}

/// What the advisor reads about one workflow.
pub struct Inputs<'a> {
    pub attempts: &'a [Attempt],
    pub checkpoints: &'a [Checkpoint],
    pub throughput: &'a [ThroughputSample],
    /// Failures decided on (attributions).
    pub failures: usize,
    /// Mean time from a failure to the run going again, seconds, when a recovery was measured.
    pub restart_secs: Option<f64>,
    /// A failure rate from elsewhere (the node ledger), per second, with its basis, for a run that has
    /// not failed yet.
    pub fallback_rate: Option<(f64, String)>,
    pub now: DateTime<Utc>,
}

/// The advice, when the run has saved at least twice, a save's cost could be measured and a failure
/// rate is known.
pub fn advise(inputs: &Inputs<'_>) -> Option<Advice> {
    let (save_cost, saves_measured) = save_cost(inputs.checkpoints, inputs.throughput)?;
    let interval = mean_interval(inputs.checkpoints)?;
    let running: f64 = inputs
        .attempts
        .iter()
        .filter_map(|attempt| {
            let start = attempt.start_time?;
            let end = attempt.end_time.unwrap_or(inputs.now);
            Some((end - start).num_milliseconds().max(0) as f64 / 1000.0)
        })
        .sum();
    let (mtbf, basis) = if inputs.failures > 0 && running > 0.0 {
        (
            running / inputs.failures as f64,
            format!(
                "this run: {} failure{} in {:.1} h of running",
                inputs.failures,
                if inputs.failures == 1 { "" } else { "s" },
                running / 3600.0
            ),
        )
    } else {
        let (rate, basis) = inputs.fallback_rate.clone()?;
        if rate <= 0.0 {
            return None;
        }
        (1.0 / rate, basis)
    };
    let restart = inputs.restart_secs.unwrap_or(0.0);
    let advised = young_daly(save_cost, mtbf);
    Some(Advice {
        save_cost_secs: save_cost,
        saves_measured,
        interval_secs: interval,
        mtbf_secs: mtbf,
        mtbf_basis: basis,
        restart_secs: restart,
        advised_interval_secs: advised,
        ratio_now: effective_ratio(interval, save_cost, mtbf, restart),
        ratio_advised: effective_ratio(advised, save_cost, mtbf, restart),
    })
}

/// The advice for a workflow's history at `now`: its own failures, the mean restart of its recoveries,
/// and the ledger's rate when it has not failed yet.
pub fn of_history(history: &WorkflowHistory, now: DateTime<Utc>) -> Option<Advice> {
    let restarts: Vec<f64> = downtime::recoveries(history, now)
        .iter()
        .map(|recovery| recovery.total().num_milliseconds() as f64 / 1000.0)
        .filter(|secs| *secs > 0.0)
        .collect();
    advise(&Inputs {
        attempts: &history.attempts,
        checkpoints: &history.checkpoints,
        throughput: &history.throughput,
        failures: history.attributions.len(),
        restart_secs: (!restarts.is_empty())
            .then(|| restarts.iter().sum::<f64>() / restarts.len() as f64),
        fallback_rate: history.ledger_rate.clone(),
        now,
    })
}

/// The failure rate the node ledger shows for a job of `job_nodes` nodes, per second: incidents that
/// count against a node (weight 1 and more) over the last 30 days, spread over the nodes the ledger
/// knows — which leaves out nodes that never had an incident, so the rate errs on the high side.
pub fn ledger_rate(
    incidents: &[NodeIncident],
    nodes_known: usize,
    job_nodes: u32,
    now: DateTime<Utc>,
) -> Option<(f64, String)> {
    let since = now - chrono::TimeDelta::days(LEDGER_WINDOW_DAYS);
    let counted: Vec<&NodeIncident> = incidents
        .iter()
        .filter(|incident| incident.time >= since && incident.weight >= 1.0)
        .collect();
    let first = counted.iter().map(|incident| incident.time).min()?;
    let window = (now - first).num_seconds().max(3600) as f64;
    if nodes_known == 0 || job_nodes == 0 {
        return None;
    }
    let per_node = counted.len() as f64 / nodes_known as f64 / window;
    Some((
        per_node * f64::from(job_nodes),
        format!(
            "node ledger: {} incidents on the {nodes_known} nodes it knows over {:.1} days, for {job_nodes} nodes",
            counted.len(),
            window / 86400.0
        ),
    ))
}

/// The mean time between consecutive saves of the same attempt.
fn mean_interval(checkpoints: &[Checkpoint]) -> Option<f64> {
    let gaps: Vec<f64> = checkpoints
        .windows(2)
        .filter(|pair| pair[0].attempt_index == pair[1].attempt_index)
        .map(|pair| (pair[1].time - pair[0].time).num_milliseconds() as f64 / 1000.0)
        .filter(|gap| *gap > 0.0)
        .collect();
    (!gaps.is_empty()).then(|| gaps.iter().sum::<f64>() / gaps.len() as f64)
}

/// A save's cost: the median of what each measured save held the run
/// ([`crate::detect::sections::save_durations`]), with how many were measured.
fn save_cost(checkpoints: &[Checkpoint], throughput: &[ThroughputSample]) -> Option<(f64, usize)> {
    let mut costs = crate::detect::sections::save_durations(checkpoints, throughput);
    let count = costs.len();
    median(&mut costs).map(|cost| (cost, count))
}

#[cfg(test)]
mod tests;
