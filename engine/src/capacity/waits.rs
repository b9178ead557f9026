//! Queue wait: how long attempts waited to start, by partition and by the hour of day they were
//! submitted, and what the scheduler said they were waiting for.

use std::collections::BTreeMap;

use serde::Serialize;

use super::history::{CapacityHistory, Window, hours};
use super::stats::{mean, percentile};

/// Waits of the attempts submitted in the window that started (those still waiting are counted apart).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitReport {
    /// Every partition together.
    pub all: PartitionWaits,
    /// Each partition, by name (`-` for jobs that named none).
    pub partitions: Vec<PartitionWaits>,
    /// The requeued (or resubmitted) attempts alone: the queue's part of recovering a failure, which
    /// a reserve pool shortens.
    pub requeued: PartitionWaits,
    /// The share of pending job-hours under each reason the scheduler gave, largest first.
    pub reasons: Vec<ReasonShare>,
}

/// The waits of one partition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionWaits {
    pub partition: String,
    /// Attempts that started.
    pub started: usize,
    /// Attempts still waiting at the end of the window.
    pub still_waiting: usize,
    pub mean_minutes: f64,
    pub median_minutes: f64,
    pub p90_minutes: f64,
    /// Mean wait of the attempts submitted in each hour of the day (UTC); `None`: nothing submitted.
    pub by_hour: Vec<Option<f64>>,
}

/// One pending reason's share of the waiting.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReasonShare {
    pub reason: String,
    pub job_hours: f64,
    /// 0.0 ..= 1.0 of all pending job-hours.
    pub share: f64,
}

/// The name a job without a partition is shown under.
pub const NO_PARTITION: &str = "-";

pub fn waits(history: &CapacityHistory, window: &Window) -> WaitReport {
    let mut by_partition: BTreeMap<String, Vec<(u32, f64)>> = BTreeMap::new();
    let mut waiting: BTreeMap<String, usize> = BTreeMap::new();
    let mut requeued: Vec<(u32, f64)> = Vec::new();
    let mut requeued_waiting = 0;
    for wait in history
        .waits
        .iter()
        .filter(|w| window.contains(w.submitted))
    {
        let partition = wait
            .partition
            .as_deref()
            .unwrap_or(NO_PARTITION)
            .to_string();
        match wait.started.filter(|start| *start < window.to) {
            Some(start) => {
                let minutes = hours(start - wait.submitted).max(0.0) * 60.0;
                let row = (hour_of_day(wait.submitted), minutes);
                by_partition.entry(partition).or_default().push(row);
                if wait.requeued {
                    requeued.push(row);
                }
            }
            None => {
                *waiting.entry(partition).or_default() += 1;
                requeued_waiting += usize::from(wait.requeued);
            }
        }
    }
    let names: Vec<String> = by_partition
        .keys()
        .chain(waiting.keys())
        .cloned()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let partitions = names
        .iter()
        .map(|name| {
            let rows = by_partition.get(name).map(Vec::as_slice).unwrap_or(&[]);
            summarise(name, rows, waiting.get(name).copied().unwrap_or(0))
        })
        .collect();
    let every: Vec<(u32, f64)> = by_partition.values().flatten().copied().collect();
    WaitReport {
        all: summarise("all", &every, waiting.values().sum()),
        partitions,
        requeued: summarise("requeued", &requeued, requeued_waiting),
        reasons: reasons(history, window),
    }
}

fn hour_of_day(time: chrono::DateTime<chrono::Utc>) -> u32 {
    use chrono::Timelike;
    time.hour()
}

fn summarise(name: &str, rows: &[(u32, f64)], still_waiting: usize) -> PartitionWaits {
    let minutes: Vec<f64> = rows.iter().map(|(_, m)| *m).collect();
    let by_hour = (0..24)
        .map(|hour| {
            let of_hour: Vec<f64> = rows
                .iter()
                .filter(|(h, _)| *h == hour)
                .map(|(_, m)| *m)
                .collect();
            (!of_hour.is_empty()).then(|| mean(&of_hour))
        })
        .collect();
    PartitionWaits {
        partition: name.to_string(),
        started: rows.len(),
        still_waiting,
        mean_minutes: mean(&minutes),
        median_minutes: percentile(&minutes, 0.5),
        p90_minutes: percentile(&minutes, 0.9),
        by_hour,
    }
}

/// Pending job-hours by reason: each pending job at each listing counts for the listing's seconds.
fn reasons(history: &CapacityHistory, window: &Window) -> Vec<ReasonShare> {
    let seconds: BTreeMap<_, f64> = history
        .instants
        .iter()
        .map(|instant| (instant.time, instant.seconds))
        .collect();
    let mut by_reason: BTreeMap<String, f64> = BTreeMap::new();
    for sample in history
        .queue
        .iter()
        .filter(|s| s.pending && window.contains(s.time))
    {
        let reason = sample.reason.as_deref().unwrap_or("None").to_string();
        *by_reason.entry(reason).or_default() +=
            seconds.get(&sample.time).copied().unwrap_or(0.0) / 3600.0;
    }
    let total: f64 = by_reason.values().sum();
    let mut shares: Vec<ReasonShare> = by_reason
        .into_iter()
        .map(|(reason, job_hours)| ReasonShare {
            share: if total > 0.0 { job_hours / total } else { 0.0 },
            reason,
            job_hours,
        })
        .collect();
    shares.sort_by(|a, b| b.job_hours.total_cmp(&a.job_hours));
    shares
}
