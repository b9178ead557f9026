//! The node ledger on Kubernetes: a GPU lost on a node quarantines it — cordoned and tainted
//! `runguard.io/suspect` where the whitelist allows — and once its health check passes, runguard
//! removes exactly its own taint and cordon; a cordon an administrator set stays.

use runguard_engine::model::{ActionKind, ActionState, NodeState};
use serde_json::json;

use super::{Cluster, has_workflow, worker_fails, workflow};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_lost_on_a_node_cordons_and_taints_it_until_its_check_passes_and_undoes_only_that() {
    let flags = tempfile::tempdir().unwrap();
    let flag = flags.path().join("{node}").display().to_string();
    let mut cluster = Cluster::healthy(&["pytorchjob-running.json"], |config| {
        config.recovery.whitelist = vec![
            ActionKind::Requeue,
            ActionKind::Cancel,
            ActionKind::DrainNode,
            ActionKind::ResumeNode,
        ];
        config.ledger.health_check = vec!["test".into(), "-e".into(), flag];
        config.ledger.first_check_secs = 1;
        config.ledger.max_check_interval_secs = 2;
    })
    .await;
    cluster
        .until("enrolled", |status| has_workflow(status, "llama-pretrain"))
        .await;
    // An administrator cordoned gpu-node-6 for maintenance.
    cluster.kube.modify("Node", "", "gpu-node-6", |node| {
        node["spec"]["unschedulable"] = json!(true);
    });
    // gpu-spot-1 loses a GPU (as NVSentinel reports it); its worker dies and the job fails.
    cluster.kube.modify("Node", "", "gpu-spot-1", |node| {
        node["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({
                "type": "GpuXidError", "status": "True", "reason": "GpuXidErrorIsNotHealthy",
                "message": "ErrorCode:79 PCI:0000:9b:00 GPU has fallen off the bus. Recommended Action=RESTART_BM;",
                "lastHeartbeatTime": "2025-06-10T09:58:40Z",
                "lastTransitionTime": "2025-06-10T09:47:03Z",
            }));
    });
    // The kubelet reports the worker's end; the training operator marks the job failed.
    worker_fails(&cluster.kube, "Error", 1);
    let status = cluster
        .until("the drain", |status| {
            workflow(status, "llama-pretrain")
                .actions
                .iter()
                .any(|a| a.kind == ActionKind::DrainNode && a.state == ActionState::Done)
        })
        .await;
    let view = workflow(&status, "llama-pretrain");
    assert_eq!(
        view.attributions[0].culprit.node.as_deref(),
        Some("gpu-spot-1"),
        "{view:#?}"
    );
    let db = cluster.rig.store();
    assert_eq!(db.db().quarantined_nodes().unwrap(), ["gpu-spot-1"]);
    let node = cluster.kube.get("Node", "", "gpu-spot-1").unwrap();
    assert_eq!(node["spec"]["unschedulable"], true, "{node:#}");
    assert!(
        node["spec"]["taints"]
            .to_string()
            .contains("runguard.io/suspect"),
        "{node:#}"
    );

    // The health check passes: runguard's taint and cordon go, the administrator's cordon stays.
    std::fs::write(flags.path().join("gpu-spot-1"), "").unwrap();
    cluster
        .until("the return to service", |status| {
            workflow(status, "llama-pretrain")
                .actions
                .iter()
                .any(|a| a.kind == ActionKind::ResumeNode && a.state == ActionState::Done)
        })
        .await;
    let record = cluster
        .rig
        .store()
        .db()
        .node_record("gpu-spot-1")
        .unwrap()
        .unwrap();
    assert_eq!(record.state, NodeState::Probation, "{}", record.reason);
    let node = cluster.kube.get("Node", "", "gpu-spot-1").unwrap();
    assert_eq!(node["spec"]["unschedulable"], false, "{node:#}");
    assert!(
        node["metadata"]["annotations"]
            .get("runguard.io/cordoned")
            .is_none(),
        "{node:#}"
    );
    assert!(
        !node["spec"]["taints"]
            .to_string()
            .contains("runguard.io/suspect"),
        "{node:#}"
    );
    let admin = cluster.kube.get("Node", "", "gpu-node-6").unwrap();
    assert_eq!(admin["spec"]["unschedulable"], true, "{admin:#}");
}
