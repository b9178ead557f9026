//! GPUs idle while jobs wait: at each listing of the jobs with a job pending, the free GPUs of the
//! nodes that could have run it (its partition, or any partition when it named none), from the
//! latest listing of the nodes; and where the GPU-hours went by node state.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use chrono::{DateTime, TimeDelta, Timelike, Utc};
use serde::Serialize;

use super::history::{CapacityHistory, NodeSample, NodeUse, Window};

/// A listing of the nodes older than this says nothing about an instant of the job listings.
pub const NODE_SAMPLE_REACH: TimeDelta = TimeDelta::minutes(15);

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IdleReport {
    /// GPU-hours by node state: allocated GPUs count as allocated, free GPUs of a node in service as
    /// idle, every GPU of a drained or down node as drained or down.
    pub gpu_hours_by_state: Vec<StateHours>,
    /// GPU-hours free on nodes that could have run a waiting job, while it waited.
    pub idle_while_waiting_gpu_hours: f64,
    /// Hours during which at least one job waited.
    pub hours_with_waiting: f64,
    /// Mean GPUs free while jobs waited, by hour of day (UTC); `None`: no job waited then.
    pub idle_while_waiting_by_hour: Vec<Option<f64>>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StateHours {
    pub state: NodeUse,
    pub gpu_hours: f64,
}

pub fn idle(history: &CapacityHistory, window: &Window) -> IdleReport {
    let node_sets = node_sets(history, window);
    let mut by_state: BTreeMap<NodeUse, f64> = BTreeMap::new();
    for nodes in node_sets.values() {
        for node in nodes {
            let hours = node.seconds / 3600.0;
            let gpus = f64::from(node.gpus);
            if node.state.in_service() {
                let allocated = f64::from(node.gpus_allocated.min(node.gpus));
                *by_state.entry(NodeUse::Allocated).or_default() += allocated * hours;
                *by_state.entry(NodeUse::Idle).or_default() += (gpus - allocated) * hours;
            } else {
                *by_state.entry(node.state).or_default() += gpus * hours;
            }
        }
    }
    let gpu_hours_by_state = [
        NodeUse::Allocated,
        NodeUse::Idle,
        NodeUse::Drained,
        NodeUse::Down,
    ]
    .into_iter()
    .map(|state| StateHours {
        state,
        gpu_hours: by_state.get(&state).copied().unwrap_or(0.0),
    })
    .collect();

    let mut waiting_partitions: BTreeMap<DateTime<Utc>, BTreeSet<Option<&str>>> = BTreeMap::new();
    for sample in history
        .queue
        .iter()
        .filter(|s| s.pending && window.contains(s.time))
    {
        waiting_partitions
            .entry(sample.time)
            .or_default()
            .insert(sample.partition.as_deref());
    }
    let mut total = 0.0;
    let mut hours_with_waiting = 0.0;
    let mut sum = [0.0f64; 24];
    let mut weight = [0.0f64; 24];
    for instant in history.instants.iter().filter(|i| window.contains(i.time)) {
        let Some(partitions) = waiting_partitions.get(&instant.time) else {
            continue;
        };
        hours_with_waiting += instant.seconds / 3600.0;
        let free = node_sets
            .range(..=instant.time)
            .next_back()
            .filter(|(time, _)| instant.time - **time <= NODE_SAMPLE_REACH)
            .map_or(0.0, |(_, nodes)| free_gpus(nodes, partitions));
        total += free * instant.seconds / 3600.0;
        let hour = instant.time.hour() as usize;
        sum[hour] += free * instant.seconds;
        weight[hour] += instant.seconds;
    }
    IdleReport {
        gpu_hours_by_state,
        idle_while_waiting_gpu_hours: total,
        hours_with_waiting,
        idle_while_waiting_by_hour: (0..24)
            .map(|h| (weight[h] > 0.0).then(|| sum[h] / weight[h]))
            .collect(),
    }
}

/// Each listing of the nodes in the window, each node once (a node in two partitions is listed twice
/// by the scheduler; its other partitions are kept for matching).
fn node_sets<'h>(
    history: &'h CapacityHistory,
    window: &Window,
) -> BTreeMap<DateTime<Utc>, Vec<NodeEntry<'h>>> {
    let mut sets: BTreeMap<DateTime<Utc>, Vec<NodeEntry<'h>>> = BTreeMap::new();
    // Where each (listing, node) is in its set: a cluster of thousands of nodes stays linear.
    let mut at: HashMap<(DateTime<Utc>, &'h str), usize> = HashMap::new();
    for sample in history.nodes.iter().filter(|s| window.contains(s.time)) {
        let set = sets.entry(sample.time).or_default();
        match at.get(&(sample.time, sample.node.as_str())) {
            Some(index) => set[*index].partitions.push(sample.partition.as_deref()),
            None => {
                at.insert((sample.time, &sample.node), set.len());
                set.push(NodeEntry::from(sample));
            }
        }
    }
    sets
}

struct NodeEntry<'h> {
    node: &'h str,
    partitions: Vec<Option<&'h str>>,
    state: NodeUse,
    gpus: u32,
    gpus_allocated: u32,
    seconds: f64,
}

impl<'h> From<&'h NodeSample> for NodeEntry<'h> {
    fn from(sample: &'h NodeSample) -> Self {
        Self {
            node: &sample.node,
            partitions: vec![sample.partition.as_deref()],
            state: sample.state,
            gpus: sample.gpus,
            gpus_allocated: sample.gpus_allocated,
            seconds: sample.seconds,
        }
    }
}

/// Free GPUs of the in-service nodes in any of `waiting` (a job without a partition can use any node,
/// and a node listed without one can run any job).
fn free_gpus(nodes: &[NodeEntry<'_>], waiting: &BTreeSet<Option<&str>>) -> f64 {
    let any = waiting.contains(&None);
    let mut counted = HashSet::new();
    nodes
        .iter()
        .filter(|node| node.state.in_service())
        .filter(|node| {
            any || node
                .partitions
                .iter()
                .any(|p| p.is_none() || waiting.contains(p))
        })
        .filter(|node| counted.insert(node.node))
        .map(|node| f64::from(node.gpus.saturating_sub(node.gpus_allocated)))
        .sum()
}
