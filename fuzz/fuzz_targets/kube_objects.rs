//! Kubernetes objects as the API server lists them: workloads (Job, PyTorchJob, RayJob, JobSet,
//! TrainJob, RayCluster), their pods, nodes and events, read into job snapshots, evidence and the
//! nodes that can run them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runguard_engine::backend::kube::workload::{
    EventIndex, PodIndex, WorkloadKind, WorkloadRef, enrolled, evidence, excluded_nodes, node_readiness,
    placement, pod_ended, pods_of, ranked, restart_count, snapshot,
};
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    for line in text.lines().take(4) {
        if let Some(reference) = WorkloadRef::parse(line, "default") {
            assert_eq!(
                WorkloadRef::parse(&reference.id(), "elsewhere"),
                Some(reference)
            );
        }
    }
    let Ok(document) = serde_json::from_str::<Value>(text) else {
        return;
    };
    let objects = match document.get("items").and_then(Value::as_array) {
        Some(items) => items.clone(),
        None => vec![document],
    };
    let of_kind = |kind: &str| -> Vec<Value> {
        objects
            .iter()
            .filter(|object| object.get("kind").and_then(Value::as_str) == Some(kind))
            .cloned()
            .collect()
    };
    let (pods, nodes, events) = (of_kind("Pod"), of_kind("Node"), of_kind("Event"));
    for node in &nodes {
        let _ = node_readiness(node);
    }
    let index = PodIndex::new(&pods);
    let events = EventIndex::new(&events);
    for workload in &objects {
        let _ = enrolled(workload);
        let _ = restart_count(workload);
        for kind in WorkloadKind::ALL {
            for (template, _replicas) in kind.templates(workload) {
                let _ = excluded_nodes(template);
            }
            let mine = pods_of(kind, workload, &index);
            for pod in &mine {
                let _ = pod_ended(pod);
            }
            let ranks = ranked(&mine);
            assert!(ranks.len() <= mine.len());
            if let Some(job) = snapshot(kind, workload, &mine, &nodes, None, Some("lab")) {
                assert!(!job.job_id.is_empty());
            }
            let _ = evidence(kind, workload, &mine, &nodes, &events);
            // A node that can take the job now is one that fits it at all.
            let capacity = placement::capacity(&placement::replicas(kind, workload), &nodes, None);
            assert!(
                capacity
                    .now
                    .iter()
                    .all(|node| capacity.fitting.contains(node))
            );
        }
    }
});
