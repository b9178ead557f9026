//! Recommendations in plain words, each with the figures and the formula behind it: time slots for
//! the peak hours, a reserve pool sized from the observed node failures, checkpoint intervals
//! (Young–Daly) from the measured checkpoint cost and failure rate.

use std::collections::BTreeMap;

use serde::Serialize;

use super::history::{CapacityHistory, QuarantineSpan, Window, hours};
use super::idle::IdleReport;
use super::peaks::PeakReport;
use super::stats::{percentile, poisson_quantile};
use super::waits::WaitReport;

/// The reserve pool covers the nodes out at once in this share of hours.
pub const RESERVE_COVERAGE: f64 = 0.95;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recommendations {
    pub peak_hours: Option<PeakAdvice>,
    pub reserve_pool: Option<ReservePool>,
    pub checkpoints: Option<CheckpointAdvice>,
    /// Every recommendation as a sentence, in the order above, then the idle-capacity note.
    pub sentences: Vec<String>,
}

/// The peak the advice is about: of the cluster's and each partition's, the one that exceeds its GPUs
/// in service the most.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeakAdvice {
    /// `None`: every partition together.
    pub partition: Option<String>,
    pub peak: super::peaks::HourSpan,
    pub mean_demand_gpus: f64,
    pub mean_capacity_gpus: Option<f64>,
    pub quiet: super::peaks::HourSpan,
    /// Mean wait of the attempts submitted in the peak and the quiet hours, in minutes.
    pub peak_wait_minutes: Option<f64>,
    pub quiet_wait_minutes: Option<f64>,
}

/// Nodes to keep spare: `nodes` = the smallest k with P(Poisson(μ) ≤ k) ≥ [`RESERVE_COVERAGE`], where
/// μ = failures per hour × mean hours out of service (the mean number of nodes out at once).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReservePool {
    pub failures: usize,
    pub failures_per_day: f64,
    pub mean_repair_hours: f64,
    pub mean_out_at_once: f64,
    pub nodes: u32,
}

/// Young–Daly: interval = √(2 · C · MTBF), with C the checkpoint cost and MTBF the job's mean time
/// between failures, 1 / (λ · nodes) for λ failures per node-hour.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckpointAdvice {
    /// C: the median checkpoint save measured in the runs' progress, else the median checkpoint load
    /// after a restart (the same bytes).
    pub cost_minutes: f64,
    /// Which of the two C is: `save` or `load`.
    pub cost_measured_as: &'static str,
    /// λ: failures per node-hour of running attempts.
    pub failures_per_node_hour: f64,
    pub by_size: Vec<CheckpointInterval>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CheckpointInterval {
    pub nodes: u32,
    pub mtbf_hours: f64,
    pub interval_minutes: f64,
}

pub fn recommend(
    history: &CapacityHistory,
    quarantines: &[QuarantineSpan],
    window: &Window,
    waits: &WaitReport,
    peaks: &PeakReport,
    idle: &IdleReport,
) -> Recommendations {
    let peak_hours = peak_advice(waits, peaks);
    let reserve_pool = reserve_pool(quarantines, window);
    let checkpoints = checkpoint_advice(history, window);
    let mut sentences = Vec::new();
    match &peak_hours {
        Some(advice) => {
            let demand = format!(
                "Peak hours{}: {} asks for {:.0} GPUs on average{}; jobs submitted then wait {}.",
                advice
                    .partition
                    .as_ref()
                    .map(|p| format!(" of partition {p}"))
                    .unwrap_or_default(),
                advice.peak,
                advice.mean_demand_gpus,
                advice
                    .mean_capacity_gpus
                    .map(|c| format!(" against {c:.0} in service"))
                    .unwrap_or_default(),
                minutes_text(advice.peak_wait_minutes),
            );
            let quieter = matches!(
                (advice.quiet_wait_minutes, advice.peak_wait_minutes),
                (Some(quiet), Some(peak)) if quiet < peak
            );
            sentences.push(if quieter || advice.quiet_wait_minutes.is_none() {
                format!(
                    "{demand} Move long or large jobs to {} (mean wait {}) and keep the peak for short jobs, or give the peak a time-slot reservation.",
                    advice.quiet,
                    minutes_text(advice.quiet_wait_minutes),
                )
            } else {
                format!(
                    "{demand} Jobs submitted in the quietest hours, {}, wait no less ({}): the backlog of the peak carries over, so time slots would not help; more GPUs or shorter jobs would.",
                    advice.quiet,
                    minutes_text(advice.quiet_wait_minutes),
                )
            });
        }
        None => sentences.push(
            "No hour of the day asked for more GPUs than were in service: no time slots are needed."
                .to_string(),
        ),
    }
    match &reserve_pool {
        Some(pool) if pool.nodes == 0 => sentences.push(format!(
            "Reserve pool: no spare node is needed for failures at this rate. {} node failure{} ({:.2} a day), each out of service {:.1} h on average, leave {:.2} nodes out at once on average: in {:.0}% of hours none is out (Poisson).",
            pool.failures,
            plural(pool.failures),
            pool.failures_per_day,
            pool.mean_repair_hours,
            pool.mean_out_at_once,
            (-pool.mean_out_at_once).exp() * 100.0,
        )),
        Some(pool) => sentences.push(format!(
            "Reserve pool: keep {} node{} spare. {} node failure{} ({:.2} a day), each out of service {:.1} h on average, leave {:.2} nodes out at once on average; {} spare cover{} {:.0}% of hours (Poisson).",
            pool.nodes,
            plural(pool.nodes as usize),
            pool.failures,
            plural(pool.failures),
            pool.failures_per_day,
            pool.mean_repair_hours,
            pool.mean_out_at_once,
            pool.nodes,
            if pool.nodes == 1 { "s" } else { "" },
            RESERVE_COVERAGE * 100.0,
        )),
        None => sentences.push(
            "Reserve pool: no node was taken out of service in this window; no reserve is needed for failures."
                .to_string(),
        ),
    }
    match &checkpoints {
        Some(advice) => {
            let sizes: Vec<String> = advice
                .by_size
                .iter()
                .map(|size| {
                    format!(
                        "{} node{}: every {:.0} min (MTBF {:.1} h)",
                        size.nodes,
                        plural(size.nodes as usize),
                        size.interval_minutes,
                        size.mtbf_hours
                    )
                })
                .collect();
            sentences.push(format!(
                "Checkpoint intervals (Young–Daly √(2·C·MTBF), C = {:.1} min measured as {}, {:.5} failures per node-hour): {}.",
                advice.cost_minutes,
                if advice.cost_measured_as == "save" {
                    "the runs' checkpoint saves"
                } else {
                    "the checkpoint load after restarts (no save was measured)"
                },
                advice.failures_per_node_hour,
                sizes.join("; ")
            ));
        }
        None => sentences.push(
            "Checkpoint intervals: not enough failures or checkpoint loads in this window to size them."
                .to_string(),
        ),
    }
    if idle.idle_while_waiting_gpu_hours > 0.0 {
        let reason = waits
            .reasons
            .first()
            .map(|r| format!(", mostly for {}", r.reason))
            .unwrap_or_default();
        sentences.push(format!(
            "{:.0} GPU-hours were free on usable nodes while jobs waited{reason}: fewer GPUs were free than the first waiting job asked for, and the jobs behind it could not pass it. Backfill (smaller or shorter jobs starting ahead), smaller requests or sharing idle allocations would use them.",
            idle.idle_while_waiting_gpu_hours
        ));
    }
    Recommendations {
        peak_hours,
        reserve_pool,
        checkpoints,
        sentences,
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}

fn minutes_text(minutes: Option<f64>) -> String {
    match minutes {
        None => "(no jobs)".to_string(),
        Some(m) if m >= 120.0 => format!("{:.1} h", m / 60.0),
        Some(m) => format!("{m:.0} min"),
    }
}

fn peak_advice(waits: &WaitReport, peaks: &PeakReport) -> Option<PeakAdvice> {
    let excess = |window: &super::peaks::PeakWindow| {
        window.mean_demand_gpus - window.mean_capacity_gpus.unwrap_or(0.0)
    };
    // The cluster's peak and each partition's; the one most over its GPUs in service is advised on.
    let cluster = peaks
        .windows
        .first()
        .map(|window| (None, window, peaks.quiet_slot, &waits.all.by_hour));
    let partitions = peaks.partitions.iter().filter_map(|p| {
        let window = p.windows.first()?;
        let waits = waits
            .partitions
            .iter()
            .find(|w| w.partition == p.partition)?;
        Some((
            Some(p.partition.clone()),
            window,
            p.quiet_slot,
            &waits.by_hour,
        ))
    });
    let (partition, window, quiet, by_hour) = cluster
        .into_iter()
        .chain(partitions)
        .max_by(|a, b| excess(a.1).total_cmp(&excess(b.1)))?;
    let quiet = quiet?;
    let mean_wait = |span: super::peaks::HourSpan| {
        let mut total = 0.0;
        let mut count = 0usize;
        for hour in span.hours() {
            if let Some(Some(wait)) = by_hour.get(hour as usize) {
                total += wait;
                count += 1;
            }
        }
        (count > 0).then(|| total / count as f64)
    };
    Some(PeakAdvice {
        partition,
        peak: window.hours,
        mean_demand_gpus: window.mean_demand_gpus,
        mean_capacity_gpus: window.mean_capacity_gpus,
        peak_wait_minutes: mean_wait(window.hours),
        quiet,
        quiet_wait_minutes: mean_wait(quiet),
    })
}

fn reserve_pool(quarantines: &[QuarantineSpan], window: &Window) -> Option<ReservePool> {
    let started: Vec<&QuarantineSpan> = quarantines
        .iter()
        .filter(|span| window.contains(span.from))
        .collect();
    if started.is_empty() || window.hours() <= 0.0 {
        return None;
    }
    let repair: f64 = started
        .iter()
        .map(|span| hours(span.to.unwrap_or(window.to).min(window.to) - span.from).max(0.0))
        .sum::<f64>()
        / started.len() as f64;
    let per_hour = started.len() as f64 / window.hours();
    let mean_out = per_hour * repair;
    Some(ReservePool {
        failures: started.len(),
        failures_per_day: per_hour * 24.0,
        mean_repair_hours: repair,
        mean_out_at_once: mean_out,
        nodes: poisson_quantile(mean_out, RESERVE_COVERAGE),
    })
}

fn checkpoint_advice(history: &CapacityHistory, window: &Window) -> Option<CheckpointAdvice> {
    let failures = history
        .recoveries
        .iter()
        .filter(|r| window.contains(r.failed_at))
        .count();
    let loads: Vec<f64> = history
        .recoveries
        .iter()
        .filter(|r| window.contains(r.failed_at))
        .filter_map(|r| r.checkpoint_load)
        .map(|load| hours(load) * 60.0)
        .collect();
    let node_hours: f64 = history
        .runs
        .iter()
        .map(|run| window.overlap_hours(run.start, run.end) * f64::from(run.nodes))
        .sum();
    let saves: Vec<f64> = history
        .save_minutes
        .iter()
        .copied()
        .filter(|minutes| *minutes > 0.0)
        .collect();
    let (costs, cost_measured_as) = if saves.is_empty() {
        (loads, "load")
    } else {
        (saves, "save")
    };
    if failures == 0 || costs.is_empty() || node_hours <= 0.0 {
        return None;
    }
    let cost_minutes = percentile(&costs, 0.5);
    let lambda = failures as f64 / node_hours;
    // The sizes that ran most, up to four, smallest first.
    let mut sizes: BTreeMap<u32, usize> = BTreeMap::new();
    for run in history
        .runs
        .iter()
        .filter(|run| window.overlap_hours(run.start, run.end) > 0.0 && run.nodes > 0)
    {
        *sizes.entry(run.nodes).or_default() += 1;
    }
    let mut common: Vec<(u32, usize)> = sizes.into_iter().collect();
    common.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    common.truncate(4);
    common.sort_by_key(|(nodes, _)| *nodes);
    let by_size = common
        .into_iter()
        .map(|(nodes, _)| {
            let mtbf_hours = 1.0 / (lambda * f64::from(nodes));
            CheckpointInterval {
                nodes,
                mtbf_hours,
                interval_minutes: (2.0 * cost_minutes * mtbf_hours * 60.0).sqrt(),
            }
        })
        .collect();
    Some(CheckpointAdvice {
        cost_minutes,
        cost_measured_as,
        failures_per_node_hour: lambda,
        by_size,
    })
}
