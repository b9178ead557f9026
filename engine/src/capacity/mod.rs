//! Capacity planning: from what runguard recorded (queue waits, each listing of the jobs and of the
//! nodes, the nodes it took out of service, its recoveries) a report on queue wait by partition and
//! hour of day, peak demand, GPUs idle while jobs wait, capacity lost to quarantined nodes and the
//! downtime runguard saved, with recommendations. [`build`] is a pure function of a
//! [`CapacityHistory`]; the store reads one (`Db::capacity_history`), [`simulated`] generates one.

pub mod history;
pub mod idle;
pub mod lost;
pub mod peaks;
pub mod recommend;
pub mod sampler;
pub mod saved;
pub mod simulated;
mod stats;
pub mod waits;

#[cfg(test)]
mod tests;

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

pub use history::{
    CapacityHistory, Instant, NodeSample, NodeUse, QuarantineSpan, QueueSample, QueueWait,
    RecoveryTime, RunSpan, Window,
};
pub use sampler::{NodeListing, NodeRecord};

/// The capacity report over one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CapacityReport {
    pub window: Window,
    pub generated_at: DateTime<Utc>,
    pub waits: waits::WaitReport,
    pub peaks: peaks::PeakReport,
    pub idle: idle::IdleReport,
    pub lost: lost::LostReport,
    /// Lost GPU-hours over the window's GPU-hours: the mean GPUs of the node listings times the window
    /// (0 when no listing of the nodes falls in it).
    pub lost_share: f64,
    pub saved: saved::SavedReport,
    pub recommendations: recommend::Recommendations,
}

/// The report over `window`; `baseline` is the time a person takes to recover a failure by hand (see
/// [`saved`]).
pub fn build(
    history: &CapacityHistory,
    window: Window,
    baseline: TimeDelta,
    generated_at: DateTime<Utc>,
) -> CapacityReport {
    let waits = waits::waits(history, &window);
    let peaks = peaks::peaks(history, &window);
    let idle = idle::idle(history, &window);
    let lost = lost::lost(&history.quarantines, &window);
    let saved = saved::saved(&history.recoveries, &window, baseline);
    let recommendations = recommend::recommend(
        history,
        &history.quarantines,
        &window,
        &waits,
        &peaks,
        &idle,
    );
    let capacity = listed_gpu_hours(history, &window);
    CapacityReport {
        window,
        generated_at,
        lost_share: if capacity > 0.0 {
            (lost.gpu_hours / capacity).min(1.0)
        } else {
            0.0
        },
        waits,
        peaks,
        idle,
        lost,
        saved,
        recommendations,
    }
}

/// The mean GPUs the node listings showed (each node once per listing, weighted by the listing's
/// seconds) times the window's hours.
fn listed_gpu_hours(history: &CapacityHistory, window: &Window) -> f64 {
    use std::collections::{BTreeMap, HashSet};
    let mut listings: BTreeMap<DateTime<Utc>, (f64, f64)> = BTreeMap::new();
    let mut seen = HashSet::new();
    for sample in history.nodes.iter().filter(|s| window.contains(s.time)) {
        let listing = listings.entry(sample.time).or_insert((sample.seconds, 0.0));
        if seen.insert((sample.time, sample.node.as_str())) {
            listing.1 += f64::from(sample.gpus);
        }
    }
    let seconds: f64 = listings.values().map(|(s, _)| s).sum();
    if seconds <= 0.0 {
        return 0.0;
    }
    let mean_gpus = listings.values().map(|(s, g)| s * g).sum::<f64>() / seconds;
    mean_gpus * window.hours()
}

/// Quarantine spans read from the node listings: a node drained or down with a reason carrying
/// runguard's mark (`runguard: ...`) from the first listing that showed it so to the first that did
/// not; still open when the last listing showed it so.
pub fn quarantines_from_node_samples(nodes: &[NodeSample]) -> Vec<QuarantineSpan> {
    use std::collections::BTreeMap;
    let mut by_node: BTreeMap<&str, Vec<&NodeSample>> = BTreeMap::new();
    for sample in nodes {
        let listed = by_node.entry(&sample.node).or_default();
        // A node listed under two partitions appears twice at one time.
        if listed.last().is_none_or(|last| last.time != sample.time) {
            listed.push(sample);
        }
    }
    let mut spans = Vec::new();
    for (node, mut samples) in by_node {
        samples.sort_by_key(|s| s.time);
        let mut open: Option<QuarantineSpan> = None;
        for sample in samples {
            let quarantined = !sample.state.in_service()
                && sample
                    .reason
                    .as_deref()
                    .is_some_and(|reason| reason.trim_start().starts_with("runguard"));
            match (&mut open, quarantined) {
                (None, true) => {
                    open = Some(QuarantineSpan {
                        node: node.to_string(),
                        gpus: sample.gpus,
                        from: sample.time,
                        to: None,
                    });
                }
                (Some(span), false) => {
                    span.to = Some(sample.time);
                    spans.extend(open.take());
                }
                _ => {}
            }
        }
        spans.extend(open);
    }
    spans.sort_by(|a, b| a.from.cmp(&b.from).then(a.node.cmp(&b.node)));
    spans
}
