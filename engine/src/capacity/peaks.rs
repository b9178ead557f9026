//! Peak demand: the GPUs asked for (running and waiting) by hour of day against the GPUs in service,
//! and the runs of hours where demand exceeds them.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use chrono::{DateTime, Timelike, Utc};
use serde::Serialize;

use super::history::{CapacityHistory, Window};

/// Hours whose demand exceeds this share of the day's mean count as peak when the GPUs in service are
/// unknown (no node listing).
const PEAK_OVER_MEAN: f64 = 1.25;

/// Length of the quiet slot the report proposes, in hours.
pub const QUIET_SLOT_HOURS: usize = 4;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeakReport {
    /// Mean GPUs asked for (running plus waiting) in each hour of the day (UTC).
    pub demand_by_hour: Vec<f64>,
    /// Mean GPUs in service in each hour of the day; `None` when no node listing covers the hour.
    pub capacity_by_hour: Vec<Option<f64>>,
    /// Runs of consecutive peak hours, largest demand first.
    pub windows: Vec<PeakWindow>,
    /// The [`QUIET_SLOT_HOURS`] consecutive hours of least demand.
    pub quiet_slot: Option<HourSpan>,
    /// The same for each partition the jobs named: its jobs against its nodes.
    pub partitions: Vec<PartitionPeaks>,
}

/// Demand and peaks of one partition: its jobs against the nodes listed in it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PartitionPeaks {
    pub partition: String,
    pub demand_by_hour: Vec<f64>,
    pub capacity_by_hour: Vec<Option<f64>>,
    pub windows: Vec<PeakWindow>,
    pub quiet_slot: Option<HourSpan>,
}

/// Hours `start .. end` of the day (UTC); `end` may be past midnight (`22 .. 2`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HourSpan {
    pub start: u32,
    pub end: u32,
}

impl HourSpan {
    pub fn hours(&self) -> impl Iterator<Item = u32> + '_ {
        let len = (self.end + 24 - self.start) % 24;
        let len = if len == 0 { 24 } else { len };
        (0..len).map(move |i| (self.start + i) % 24)
    }
}

impl std::fmt::Display for HourSpan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:02}:00–{:02}:00 UTC", self.start, self.end % 24)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PeakWindow {
    pub hours: HourSpan,
    pub mean_demand_gpus: f64,
    /// `None` when the GPUs in service are unknown.
    pub mean_capacity_gpus: Option<f64>,
}

pub fn peaks(history: &CapacityHistory, window: &Window) -> PeakReport {
    let all = hourly(history, window, |_| true, |_| true);
    let partitions: BTreeSet<&str> = history
        .queue
        .iter()
        .filter(|s| window.contains(s.time))
        .filter_map(|s| s.partition.as_deref())
        .collect();
    let partitions = partitions
        .into_iter()
        .map(|partition| {
            let hours = hourly(
                history,
                window,
                |job| job.partition.as_deref() == Some(partition),
                // A node listed without a partition serves every one.
                |node| node.partition.as_deref().is_none_or(|p| p == partition),
            );
            PartitionPeaks {
                partition: partition.to_string(),
                windows: hours.windows(),
                quiet_slot: hours.quiet_slot(),
                demand_by_hour: hours.demand,
                capacity_by_hour: hours.capacity,
            }
        })
        .collect();
    PeakReport {
        windows: all.windows(),
        quiet_slot: all.quiet_slot(),
        demand_by_hour: all.demand,
        capacity_by_hour: all.capacity,
        partitions,
    }
}

/// Demand and capacity by hour of day, of the jobs and nodes the filters keep.
struct Hourly {
    demand: Vec<f64>,
    capacity: Vec<Option<f64>>,
    /// Some listing of the jobs fell in the window.
    listed: bool,
}

fn hourly(
    history: &CapacityHistory,
    window: &Window,
    job: impl Fn(&super::QueueSample) -> bool,
    node: impl Fn(&super::NodeSample) -> bool,
) -> Hourly {
    let mut demand: BTreeMap<DateTime<Utc>, f64> = BTreeMap::new();
    for sample in history
        .queue
        .iter()
        .filter(|s| window.contains(s.time) && job(s))
    {
        *demand.entry(sample.time).or_default() += f64::from(sample.gpus);
    }
    // An instant with no job listed asked for nothing: it still counts, with zero.
    let mut demand_sum = [0.0f64; 24];
    let mut demand_weight = [0.0f64; 24];
    for instant in history.instants.iter().filter(|i| window.contains(i.time)) {
        let hour = instant.time.hour() as usize;
        demand_sum[hour] += demand.get(&instant.time).copied().unwrap_or(0.0) * instant.seconds;
        demand_weight[hour] += instant.seconds;
    }

    let mut capacity_sum = [0.0f64; 24];
    let mut capacity_weight = [0.0f64; 24];
    let mut seen = HashSet::new();
    let mut weighted_times = HashSet::new();
    for sample in history.nodes.iter().filter(|s| window.contains(s.time)) {
        let hour = sample.time.hour() as usize;
        if weighted_times.insert(sample.time) {
            capacity_weight[hour] += sample.seconds;
        }
        // A node listed under two partitions is counted once.
        if node(sample)
            && sample.state.in_service()
            && seen.insert((sample.time, sample.node.as_str()))
        {
            capacity_sum[hour] += f64::from(sample.gpus) * sample.seconds;
        }
    }
    Hourly {
        demand: (0..24)
            .map(|h| ratio(demand_sum[h], demand_weight[h]).unwrap_or(0.0))
            .collect(),
        capacity: (0..24)
            .map(|h| ratio(capacity_sum[h], capacity_weight[h]))
            .collect(),
        listed: demand_weight.iter().any(|w| *w > 0.0),
    }
}

impl Hourly {
    /// Runs of hours whose demand exceeds the capacity, largest demand first.
    fn windows(&self) -> Vec<PeakWindow> {
        let day_mean = self.demand.iter().sum::<f64>() / 24.0;
        let is_peak: Vec<bool> = (0..24)
            .map(|h| match self.capacity[h] {
                Some(capacity) => self.demand[h] > capacity,
                None => day_mean > 0.0 && self.demand[h] >= PEAK_OVER_MEAN * day_mean,
            })
            .collect();
        let mut windows: Vec<PeakWindow> = runs(&is_peak)
            .into_iter()
            .map(|hours| {
                let demand: Vec<f64> = hours.hours().map(|h| self.demand[h as usize]).collect();
                let capacity: Option<Vec<f64>> =
                    hours.hours().map(|h| self.capacity[h as usize]).collect();
                PeakWindow {
                    hours,
                    mean_demand_gpus: super::stats::mean(&demand),
                    mean_capacity_gpus: capacity.map(|c| super::stats::mean(&c)),
                }
            })
            .collect();
        windows.sort_by(|a, b| b.mean_demand_gpus.total_cmp(&a.mean_demand_gpus));
        windows
    }

    fn quiet_slot(&self) -> Option<HourSpan> {
        self.listed
            .then(|| quietest(&self.demand, QUIET_SLOT_HOURS))
    }
}

fn ratio(sum: f64, weight: f64) -> Option<f64> {
    (weight > 0.0).then(|| sum / weight)
}

/// Maximal runs of `true` hours, a run through midnight kept whole.
fn runs(flags: &[bool]) -> Vec<HourSpan> {
    if flags.iter().all(|f| *f) {
        return vec![HourSpan { start: 0, end: 24 }];
    }
    let mut out = Vec::new();
    for start in 0..24 {
        let previous = (start + 23) % 24;
        if flags[start] && !flags[previous] {
            let mut len = 0;
            while flags[(start + len) % 24] {
                len += 1;
            }
            out.push(HourSpan {
                start: start as u32,
                end: ((start + len) % 24) as u32,
            });
        }
    }
    out
}

/// The `len` consecutive hours (through midnight too) of least total demand; the earliest on a tie.
fn quietest(demand: &[f64], len: usize) -> HourSpan {
    let total = |start: usize| (0..len).map(|i| demand[(start + i) % 24]).sum::<f64>();
    let start = (0..24)
        .min_by(|a, b| total(*a).total_cmp(&total(*b)).then(a.cmp(b)))
        .unwrap_or(0);
    HourSpan {
        start: start as u32,
        end: ((start + len) % 24) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_through_midnight_is_one_window() {
        let mut flags = [false; 24];
        for h in [22, 23, 0, 1, 9, 10] {
            flags[h] = true;
        }
        let spans = runs(&flags);
        assert_eq!(
            spans,
            vec![
                HourSpan { start: 9, end: 11 },
                HourSpan { start: 22, end: 2 }
            ]
        );
        assert_eq!(spans[1].hours().collect::<Vec<_>>(), vec![22, 23, 0, 1]);
        assert_eq!(spans[1].to_string(), "22:00–02:00 UTC");
    }

    #[test]
    fn the_quiet_slot_is_the_least_demand() {
        let mut demand = [10.0; 24];
        for h in [2, 3, 4, 5] {
            demand[h] = 1.0;
        }
        demand[6] = 0.0;
        assert_eq!(quietest(&demand, 4), HourSpan { start: 3, end: 7 });
    }
}
