//! The simulated cluster's nodes as the capacity report reads them: every node in the one partition
//! (`gpu`), its GPUs in use by running jobs, and the drains.

use super::GPUS_PER_NODE;
use super::cluster::World;
use super::state::Phase;
use crate::capacity::{NodeListing, NodeRecord, NodeUse};

/// The partition every simulated job runs in.
const PARTITION: &str = "gpu";

impl World {
    pub(super) fn node_listing(&self) -> NodeListing {
        let nodes = self
            .state
            .nodes
            .iter()
            .map(|node| {
                let used: u32 = self
                    .state
                    .jobs
                    .iter()
                    .filter(|job| matches!(job.phase, Phase::Running(_)))
                    .filter(|job| job.alloc.contains(&node.name))
                    .map(|job| job.spec.gpus_per_node)
                    .sum::<u32>()
                    .min(GPUS_PER_NODE);
                let state = if node.drain_reason.is_some() {
                    NodeUse::Drained
                } else if used == 0 {
                    NodeUse::Idle
                } else if used < GPUS_PER_NODE {
                    NodeUse::Mixed
                } else {
                    NodeUse::Allocated
                };
                NodeRecord {
                    node: node.name.clone(),
                    partition: Some(PARTITION.to_string()),
                    state,
                    gpus: GPUS_PER_NODE,
                    gpus_allocated: used,
                    reason: node.drain_reason.clone(),
                }
            })
            .collect();
        NodeListing {
            nodes,
            unreadable: Vec::new(),
        }
    }
}
