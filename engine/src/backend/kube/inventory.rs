//! The cluster's nodes for the capacity report, from the node and pod caches the watchers keep (no
//! call of its own): each node's allocatable `nvidia.com/gpu`, the GPUs the pods bound to it request,
//! and whether it takes pods (Ready, not cordoned or tainted).

use std::collections::HashMap;

use serde_json::Value;

use super::backend::{KubeBackend, SUSPECT_TAINT};
use super::workload::{at, node_readiness, str_at};
use crate::capacity::{NodeListing, NodeRecord, NodeUse};

/// The extended resource GPUs are scheduled as.
const GPU_RESOURCE: &str = "nvidia.com/gpu";

impl KubeBackend {
    /// `None` when only some namespaces are watched: pods of the others would use GPUs unseen.
    pub(super) fn node_listing(&self) -> Option<NodeListing> {
        if !self.config.namespaces.is_empty() {
            return None;
        }
        let nodes = Self::values(std::slice::from_ref(&self.nodes));
        let pods = Self::values(&self.pods);
        Some(listing(&nodes, &pods))
    }
}

/// The nodes with the GPUs the pods bound to them request; a node whose GPU count cannot be read is
/// named in `unreadable`.
pub(super) fn listing(nodes: &[Value], pods: &[Value]) -> NodeListing {
    let mut listing = NodeListing::default();
    // Summed once by node: thousands of pods are gone through once, not once a node.
    let mut held: HashMap<&str, u32> = HashMap::new();
    for pod in pods {
        if let Some(node) = str_at(pod, "/spec/nodeName")
            && matches!(str_at(pod, "/status/phase"), Some("Pending" | "Running"))
        {
            *held.entry(node).or_default() += pod_gpus(pod);
        }
    }
    for node in nodes {
        let Some(name) = str_at(node, "/metadata/name") else {
            listing.unreadable.push("a node without a name".to_string());
            continue;
        };
        // The resource's name holds a `/`: looked up as a key, not through a pointer.
        let allocatable = at(node, "/status/allocatable").and_then(|a| a.get(GPU_RESOURCE));
        let Some(gpus) = allocatable.map_or(Some(0), quantity) else {
            listing.unreadable.push(format!(
                "node {name}: allocatable {GPU_RESOURCE} {allocatable:?}"
            ));
            continue;
        };
        let used = held.get(name).copied().unwrap_or(0);
        let (state, reason) = match out_of_service(node) {
            Some((state, reason)) => (state, Some(reason)),
            None if used == 0 => (NodeUse::Idle, None),
            None if used < gpus => (NodeUse::Mixed, None),
            None => (NodeUse::Allocated, None),
        };
        listing.nodes.push(NodeRecord {
            node: name.to_string(),
            partition: None,
            state,
            gpus,
            gpus_allocated: used.min(gpus),
            reason,
        });
    }
    listing
}

/// Not Ready: down; cordoned or tainted against new pods: drained, with runguard's own taint named
/// as runguard's (`runguard: <reason>`) so that it counts as a quarantine.
fn out_of_service(node: &Value) -> Option<(NodeUse, String)> {
    match node_readiness(node) {
        Some((status, reason, _)) if status != "True" => {
            return Some((NodeUse::Down, format!("not ready ({reason})")));
        }
        None => return Some((NodeUse::Down, "no Ready condition".to_string())),
        _ => {}
    }
    let taints = at(node, "/spec/taints").and_then(Value::as_array);
    if let Some(suspect) = taints
        .into_iter()
        .flatten()
        .find(|taint| str_at(taint, "/key") == Some(SUSPECT_TAINT))
    {
        return Some((
            NodeUse::Drained,
            format!(
                "runguard: {}",
                str_at(suspect, "/value").unwrap_or("suspect")
            ),
        ));
    }
    if at(node, "/spec/unschedulable").and_then(Value::as_bool) == Some(true) {
        return Some((NodeUse::Drained, "cordoned".to_string()));
    }
    taints
        .into_iter()
        .flatten()
        .find(|taint| {
            matches!(str_at(taint, "/effect"), Some("NoSchedule" | "NoExecute"))
                && !str_at(taint, "/key").is_some_and(|key| key.starts_with(GPU_RESOURCE))
        })
        .map(|taint| {
            (
                NodeUse::Drained,
                format!("tainted {}", str_at(taint, "/key").unwrap_or("?")),
            )
        })
}

/// The GPUs a pod holds: its containers' requests (or limits, which an extended resource's request
/// equals), or its largest init container's when that is more.
fn pod_gpus(pod: &Value) -> u32 {
    let of = |pointer: &str| -> Vec<u32> {
        at(pod, pointer)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|container| {
                at(container, "/resources/requests")
                    .and_then(|r| r.get(GPU_RESOURCE))
                    .or_else(|| {
                        at(container, "/resources/limits").and_then(|l| l.get(GPU_RESOURCE))
                    })
                    .and_then(quantity)
                    .unwrap_or(0)
            })
            .collect()
    };
    let containers: u32 = of("/spec/containers").into_iter().sum();
    let init = of("/spec/initContainers").into_iter().max().unwrap_or(0);
    containers.max(init)
}

/// A whole-number quantity (`"8"`, or a number).
fn quantity(value: &Value) -> Option<u32> {
    match value {
        Value::String(text) => text.trim().parse().ok(),
        Value::Number(number) => number.as_u64().and_then(|n| u32::try_from(n).ok()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn node(name: &str, gpus: &str, ready: &str, spec: Value) -> Value {
        json!({
            "metadata": {"name": name},
            "spec": spec,
            "status": {
                "allocatable": {"cpu": "64", GPU_RESOURCE: gpus},
                "conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady"}],
            },
        })
    }

    fn pod(node: &str, phase: &str, gpus: &[&str]) -> Value {
        let containers: Vec<Value> = gpus
            .iter()
            .map(|n| json!({"name": "c", "resources": {"limits": {GPU_RESOURCE: n}}}))
            .collect();
        json!({"spec": {"nodeName": node, "containers": containers}, "status": {"phase": phase}})
    }

    #[test]
    fn nodes_with_the_gpus_their_pods_hold() {
        let nodes = [
            node("gpu-a", "8", "True", json!({})),
            node("gpu-b", "8", "True", json!({})),
            node("gpu-c", "8", "True", json!({})),
            node("gpu-d", "8", "False", json!({})),
            node(
                "gpu-e",
                "8",
                "True",
                json!({"unschedulable": true, "taints": [
                    {"key": SUSPECT_TAINT, "value": "xid_79", "effect": "NoSchedule"}
                ]}),
            ),
            node("gpu-f", "8", "True", json!({"unschedulable": true})),
            node("cpu-1", "0", "True", json!({})),
        ];
        let pods = [
            pod("gpu-a", "Running", &["4", "4"]),
            pod("gpu-b", "Running", &["2"]),
            pod("gpu-b", "Succeeded", &["6"]),
            pod("gpu-c", "Pending", &[]),
        ];
        let listing = listing(&nodes, &pods);
        assert!(listing.unreadable.is_empty());
        let seen: Vec<(&str, NodeUse, u32, Option<&str>)> = listing
            .nodes
            .iter()
            .map(|n| {
                (
                    n.node.as_str(),
                    n.state,
                    n.gpus_allocated,
                    n.reason.as_deref(),
                )
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                ("gpu-a", NodeUse::Allocated, 8, None),
                ("gpu-b", NodeUse::Mixed, 2, None),
                ("gpu-c", NodeUse::Idle, 0, None),
                ("gpu-d", NodeUse::Down, 0, Some("not ready (KubeletReady)")),
                ("gpu-e", NodeUse::Drained, 0, Some("runguard: xid_79")),
                ("gpu-f", NodeUse::Drained, 0, Some("cordoned")),
                ("cpu-1", NodeUse::Idle, 0, None),
            ]
        );
    }

    #[test]
    fn an_unreadable_gpu_count_is_left_out_and_named() {
        let listing = listing(&[node("gpu-a", "eight", "True", json!({}))], &[]);
        assert!(listing.nodes.is_empty());
        assert_eq!(listing.unreadable.len(), 1);
        assert!(listing.unreadable[0].contains("gpu-a"));
    }
}
