//! The node ledger on Kubernetes: a GPU lost on a node quarantines it — cordoned and tainted
//! `runguard.io/suspect` where the whitelist allows — and once its health check passes, runguard
//! removes exactly its own taint and cordon; a cordon an administrator set stays.

use runguard_engine::model::{ActionKind, ActionState, NodeState};
use serde_json::json;

use super::{Cluster, has_workflow, place, running_pod, worker_fails, workflow, write_summary};

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
    // The node's condition and the worker's end may be read in either order (one tick or two): wait
    // for both the drain and the failure's attribution.
    let status = cluster
        .until("the drain and the attribution", |status| {
            let view = workflow(status, "llama-pretrain");
            !view.attributions.is_empty()
                && view
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

/// A batch Job in a Kueue queue, opted in, with `parallelism` GPU pods from `template_spec`.
fn queued_job(name: &str, parallelism: u32, suspended: bool) -> serde_json::Value {
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": "ml", "uid": format!("{name}-uid"),
                     "creationTimestamp": chrono::Utc::now().to_rfc3339(),
                     "labels": {"runguard.io/enabled": "true", "kueue.x-k8s.io/queue-name": "research"}},
        "spec": {
            "suspend": suspended, "parallelism": parallelism, "completions": parallelism,
            "completionMode": "Indexed",
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": format!("{name}-uid")}},
            "template": {
                "metadata": {"labels": {"batch.kubernetes.io/controller-uid": format!("{name}-uid"),
                                        "batch.kubernetes.io/job-name": name, "job-name": name}},
                "spec": {"restartPolicy": "Never", "containers": [{
                    "name": "eval", "image": "registry.example.com/ml/eval:3",
                    "command": ["python", "eval.py"],
                    "resources": {"limits": {"nvidia.com/gpu": 8}}}]},
            },
        },
        "status": if suspended {
            json!({"conditions": [{"type": "Suspended", "status": "True", "reason": "JobSuspended",
                                   "message": "Job suspended"}]})
        } else {
            json!({"active": parallelism, "ready": 0, "startTime": chrono::Utc::now().to_rfc3339()})
        },
    })
}

/// Plays the Job controller and the scheduler: the Job's pods, bound where its template lets them
/// (`preferred` first), running; the Job resumed and active.
fn run_job(kube: &crate::kube_fake::FakeKube, name: &str, preferred: &[&str]) -> Vec<String> {
    let job = kube.get("Job", "ml", name).unwrap();
    let uid = job["metadata"]["uid"].clone();
    let template = job["spec"]["template"].clone();
    let mut taken = Vec::new();
    for index in 0..job["spec"]["parallelism"].as_u64().unwrap_or(1) {
        let node = place(kube, &template, preferred, &mut taken);
        let metadata = json!({
            "name": format!("{name}-{index}-x{index}k"), "namespace": "ml",
            "uid": format!("{}-pod-{index}", uid.as_str().unwrap_or_default()),
            "labels": {"batch.kubernetes.io/job-name": name, "job-name": name},
            "annotations": {"batch.kubernetes.io/job-completion-index": index.to_string()},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                 "uid": uid, "controller": true}],
        });
        kube.apply(running_pod(&template, metadata, &node));
    }
    let active = taken.len();
    kube.modify("Job", "ml", name, |job| {
        job["spec"]["suspend"] = json!(false);
        job["status"] = json!({"active": active, "ready": active,
                               "startTime": chrono::Utc::now().to_rfc3339()});
    });
    taken
}

fn excluded(template: &serde_json::Value) -> Vec<String> {
    runguard_engine::backend::kube::workload::excluded_nodes(template)
}

fn exclusion_done(status: &runguard::status::StatusReport, name: &str, adding: bool) -> bool {
    has_workflow(status, name)
        && workflow(status, name).actions.iter().any(|a| {
            a.kind == ActionKind::UpdateExclusions
                && a.state == ActionState::Done
                && a.params.exclude_nodes.iter().any(|n| n == "gpu-spot-1") == adding
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantined_node_is_kept_out_of_pending_workloads_without_a_drain_and_given_back_after_its_check()
 {
    let flags = tempfile::tempdir().unwrap();
    let flag = flags.path().join("{node}").display().to_string();
    let mut cluster = Cluster::healthy(&["pytorchjob-running.json"], |config| {
        // No drain: the node is kept out of the pending workloads by their exclusions alone.
        config.recovery.whitelist = vec![
            ActionKind::Requeue,
            ActionKind::Cancel,
            ActionKind::UpdateExclusions,
        ];
        config.ledger.health_check = vec!["test".into(), "-e".into(), flag];
        config.ledger.first_check_secs = 1;
        config.ledger.max_check_interval_secs = 2;
    })
    .await;
    // Waiting in Kueue's queue: a Job suspended, and a PyTorchJob suspended with its run policy
    // whose owner keeps it off gpu-node-5 herself.
    cluster.kube.apply(queued_job("eval-a", 1, true));
    let mut sft = cluster
        .kube
        .get("PyTorchJob", "ml", "llama-pretrain")
        .unwrap();
    sft["metadata"] = json!({"name": "sft-a", "namespace": "ml", "uid": "sft-a-uid",
        "creationTimestamp": chrono::Utc::now().to_rfc3339(),
        "labels": {"runguard.io/enabled": "true", "kueue.x-k8s.io/queue-name": "research"}});
    sft["spec"]["runPolicy"] = json!({"suspend": true});
    if let Some(specs) = sft["spec"]["pytorchReplicaSpecs"].as_object_mut() {
        specs.remove("Worker");
    }
    sft["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["affinity"] = json!({
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-node-5"]}]}]}}});
    sft["status"] = json!({"conditions": [
        {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"},
        {"type": "Suspended", "status": "True", "reason": "PyTorchJobSuspended"}]});
    cluster.kube.apply(sft);
    // Admitted, but its pods wait for GPUs: the Job counts them active, none has started.
    cluster.kube.apply(queued_job("eval-b", 2, false));
    for index in 0..2 {
        cluster.kube.apply(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("eval-b-{index}-p{index}q"), "namespace": "ml",
                         "uid": format!("eval-b-pending-{index}"),
                         "labels": {"batch.kubernetes.io/job-name": "eval-b", "job-name": "eval-b"},
                         "annotations": {"batch.kubernetes.io/job-completion-index": index.to_string()},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "eval-b",
                                              "uid": "eval-b-uid", "controller": true}]},
            "spec": {"containers": [{"name": "eval", "image": "registry.example.com/ml/eval:3"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "0/6 nodes are available: 6 Insufficient nvidia.com/gpu."}]},
        }));
    }
    let status = cluster
        .until("all four enrolled", |status| {
            ["llama-pretrain", "eval-a", "sft-a", "eval-b"]
                .iter()
                .all(|name| has_workflow(status, name))
                && workflow(status, "eval-b").attempts[0].reason.as_deref() == Some("Unschedulable")
        })
        .await;
    for name in ["eval-a", "sft-a", "eval-b"] {
        let attempt = &workflow(&status, name).attempts[0];
        assert_eq!(
            attempt.state,
            runguard_engine::model::JobState::Pending,
            "{name}: {attempt:#?}"
        );
    }
    assert_eq!(
        workflow(&status, "sft-a").attempts[0].excluded_nodes,
        ["gpu-node-5"]
    );

    // gpu-spot-1 loses a GPU under the running job, which fails: the node is quarantined.
    cluster.kube.modify("Node", "", "gpu-spot-1", |node| {
        node["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({
                "type": "GpuXidError", "status": "True", "reason": "GpuXidErrorIsNotHealthy",
                "message": "ErrorCode:79 PCI:0000:9b:00 GPU has fallen off the bus. Recommended Action=RESTART_BM;",
                "lastHeartbeatTime": chrono::Utc::now().to_rfc3339(),
                "lastTransitionTime": chrono::Utc::now().to_rfc3339(),
            }));
    });
    worker_fails(&cluster.kube, "Error", 1);
    let status = cluster
        .until("the pending workloads kept off gpu-spot-1", |status| {
            ["eval-a", "sft-a", "eval-b"]
                .iter()
                .all(|name| exclusion_done(status, name, true))
        })
        .await;
    let db = cluster.rig.store();
    assert_eq!(db.db().quarantined_nodes().unwrap(), ["gpu-spot-1"]);
    let drain = workflow(&status, "llama-pretrain")
        .actions
        .iter()
        .find(|a| a.kind == ActionKind::DrainNode)
        .cloned();
    assert!(
        drain
            .as_ref()
            .is_none_or(|a| a.state == ActionState::Proposed),
        "no drain without the whitelist: {drain:#?}"
    );
    for name in ["eval-a", "sft-a", "eval-b"] {
        let done = workflow(&status, name)
            .actions
            .iter()
            .find(|a| a.kind == ActionKind::UpdateExclusions)
            .and_then(|a| a.result.clone())
            .unwrap_or_default();
        println!("{name}: {done}");
    }
    let writes = write_summary(&cluster.writes());
    for expected in [
        "PATCH /apis/batch/v1/namespaces/ml/jobs/eval-a",
        "PATCH /apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/sft-a",
        "DELETE /apis/batch/v1/namespaces/ml/jobs/eval-b",
        "POST /apis/batch/v1/namespaces/ml/jobs",
    ] {
        assert_eq!(
            writes.iter().filter(|w| *w == expected).count(),
            1,
            "{expected} once: {writes:#?}"
        );
    }
    assert!(
        !writes.iter().any(|w| w.starts_with("PATCH /api/v1/nodes")),
        "no cordon: {writes:#?}"
    );
    // Suspended: the template's node affinity changed in place, nothing else, still suspended.
    let patch = cluster
        .writes()
        .into_iter()
        .find(|w| w.method == "PATCH" && w.path.ends_with("/jobs/eval-a"))
        .and_then(|w| w.body)
        .unwrap();
    let version = patch["metadata"]["resourceVersion"].clone();
    assert!(version.is_string(), "against the version read: {patch:#}");
    assert_eq!(
        patch,
        json!({"metadata": {"resourceVersion": version},
               "spec": {"template": {"spec": {"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-spot-1"]}]}]}}}}}}})
    );
    let eval_a = cluster.kube.get("Job", "ml", "eval-a").unwrap();
    assert_eq!(eval_a["spec"]["suspend"], true);
    assert_eq!(excluded(&eval_a["spec"]["template"]), ["gpu-spot-1"]);
    let sft_a = cluster.kube.get("PyTorchJob", "ml", "sft-a").unwrap();
    assert_eq!(
        excluded(&sft_a["spec"]["pytorchReplicaSpecs"]["Master"]["template"]),
        ["gpu-node-5", "gpu-spot-1"],
        "merged with its owner's own exclusion"
    );
    // Pods waiting for GPUs cannot change: the Job was re-created with the exclusion, as the same
    // attempt (nothing of it had run).
    let eval_b = cluster.kube.get("Job", "ml", "eval-b").unwrap();
    assert_ne!(eval_b["metadata"]["uid"], "eval-b-uid");
    assert_eq!(excluded(&eval_b["spec"]["template"]), ["gpu-spot-1"]);
    assert_eq!(
        eval_b["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
        "research"
    );
    assert_eq!(
        eval_b["metadata"]["annotations"]["runguard.io/restart-count"],
        "0"
    );
    assert!(
        cluster
            .kube
            .list("Pod", "ml")
            .iter()
            .all(|pod| pod["metadata"]["labels"]["job-name"] != "eval-b")
    );

    // Admitted now, they start where the scheduler lets them: the node they would have taken first
    // is out.
    let nodes_a = run_job(&cluster.kube, "eval-a", &["gpu-spot-1", "gpu-node-6"]);
    assert_eq!(nodes_a, ["gpu-node-6"]);
    let nodes_b = run_job(
        &cluster.kube,
        "eval-b",
        &["gpu-spot-1", "gpu-node-7", "gpu-node-5"],
    );
    assert_eq!(nodes_b, ["gpu-node-7", "gpu-node-5"]);
    let status = cluster
        .until("the admitted ones running", |status| {
            ["eval-a", "eval-b"].iter().all(|name| {
                let attempt = workflow(status, name).attempts.last().cloned().unwrap();
                attempt.state == runguard_engine::model::JobState::Running
            })
        })
        .await;
    assert_eq!(
        workflow(&status, "eval-b").attempts.len(),
        1,
        "the same attempt"
    );
    for name in ["eval-a", "eval-b"] {
        let attempt = workflow(&status, name).attempts.last().cloned().unwrap();
        assert!(
            !attempt.nodes.iter().any(|n| n == "gpu-spot-1"),
            "{name}: {attempt:#?}"
        );
    }
    // runguard's ledger says so.
    let sandbox = crate::support::CliSandbox::default();
    let output = std::process::Command::new(crate::support::cli::BIN)
        .arg("--config")
        .arg(sandbox.config_path())
        .arg("--db")
        .arg(cluster.rig.db_path())
        .args(["nodes", "--json"])
        .env("XDG_CONFIG_HOME", sandbox.path().join("xdg-config"))
        .env("XDG_DATA_HOME", sandbox.path().join("xdg-data"))
        .env_remove("RUNGUARD_CONFIG")
        .env_remove("RUNGUARD_DB")
        .output()
        .unwrap();
    let nodes: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|_| {
        panic!(
            "runguard nodes --json: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let spot = nodes
        .as_array()
        .into_iter()
        .flatten()
        .find(|entry| entry["node"] == "gpu-spot-1")
        .cloned()
        .unwrap_or_default();
    assert_eq!(spot["state"], "quarantined", "{nodes:#}");

    // The health check passes: the exclusion runguard added to the one still pending goes, its
    // owner's own stays; nothing else is written.
    cluster.kube.clear_requests();
    std::fs::write(flags.path().join("gpu-spot-1"), "").unwrap();
    cluster
        .until("the exclusion taken back", |status| {
            exclusion_done(status, "sft-a", false)
        })
        .await;
    let sft_a = cluster.kube.get("PyTorchJob", "ml", "sft-a").unwrap();
    assert_eq!(
        excluded(&sft_a["spec"]["pytorchReplicaSpecs"]["Master"]["template"]),
        ["gpu-node-5"]
    );
    assert_eq!(
        sft_a["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["affinity"],
        json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["gpu-node-5"]}]}]}}}),
        "as its owner wrote it"
    );
    let record = db.db().node_record("gpu-spot-1").unwrap().unwrap();
    assert_eq!(record.state, NodeState::Probation, "{}", record.reason);
    let writes = write_summary(&cluster.writes());
    assert_eq!(
        writes,
        ["PATCH /apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/sft-a"],
        "only the exclusion runguard added, only where it is still pending"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_creation_for_an_exclusion_cut_short_after_the_delete_is_finished_from_the_saved_spec()
{
    let mut cluster = Cluster::healthy(&["pytorchjob-running.json"], |config| {
        config.recovery.whitelist = vec![ActionKind::UpdateExclusions];
        config.engine.max_backoff_secs = 1;
    })
    .await;
    cluster.kube.apply(queued_job("eval-b", 1, false));
    cluster.kube.apply(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "eval-b-0-p0q", "namespace": "ml", "uid": "eval-b-pending-0",
                     "labels": {"batch.kubernetes.io/job-name": "eval-b", "job-name": "eval-b"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "eval-b",
                                          "uid": "eval-b-uid", "controller": true}]},
        "spec": {"containers": [{"name": "eval", "image": "registry.example.com/ml/eval:3"}]},
        "status": {"phase": "Pending"},
    }));
    cluster
        .until("enrolled", |status| {
            has_workflow(status, "llama-pretrain") && has_workflow(status, "eval-b")
        })
        .await;
    // The API server goes away right after it deletes eval-b for its re-creation.
    cluster.kube.refuse_connections_after_writes(1);
    // A GPU fallen off the bus under the running job quarantines gpu-spot-1 (its restart is not
    // whitelisted here: only the exclusion runs).
    cluster.kube.modify("Node", "", "gpu-spot-1", |node| {
        node["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({
                "type": "GpuXidError", "status": "True", "reason": "GpuXidErrorIsNotHealthy",
                "message": "ErrorCode:79 PCI:0000:9b:00 GPU has fallen off the bus. Recommended Action=RESTART_BM;",
                "lastHeartbeatTime": chrono::Utc::now().to_rfc3339(),
                "lastTransitionTime": chrono::Utc::now().to_rfc3339(),
            }));
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !cluster.kube.is_refusing() {
        assert!(
            std::time::Instant::now() < deadline,
            "eval-b was never deleted"
        );
        cluster.engine.tick().await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(
        cluster.kube.get("Job", "ml", "eval-b").is_none(),
        "deleted, not created"
    );
    for _ in 0..10 {
        cluster.engine.tick().await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    cluster.kube.accept_connections();
    let status = cluster
        .until("the re-creation finished", |status| {
            exclusion_done(status, "eval-b", true)
        })
        .await;
    let done = workflow(&status, "eval-b")
        .actions
        .iter()
        .find(|a| a.kind == ActionKind::UpdateExclusions)
        .and_then(|a| a.result.clone())
        .unwrap_or_default();
    assert!(done.contains("finishing a re-creation cut short"), "{done}");
    let eval_b = cluster.kube.get("Job", "ml", "eval-b").expect("re-created");
    assert_eq!(excluded(&eval_b["spec"]["template"]), ["gpu-spot-1"]);
    let writes = write_summary(&cluster.writes());
    assert_eq!(
        writes
            .iter()
            .filter(|w| *w == "POST /apis/batch/v1/namespaces/ml/jobs")
            .count(),
        1,
        "{writes:#?}"
    );
}
