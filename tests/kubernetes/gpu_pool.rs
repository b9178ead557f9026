//! Recoveries on a managed GPU pool as GKE runs one: four H100 nodes, each tainted
//! `nvidia.com/gpu=present:NoSchedule`, that the workloads tolerate. A node that cannot take the job
//! now is a reason to wait in the queue, not to stop; the stand-in plays the operator and the
//! scheduler (it has neither), so each step of the new incarnation is shaped by the test.

use runguard_engine::model::{ActionKind, ActionState, AnomalyKind, SpecChange, WorkflowStatus};
use runguard_engine::model::{AlertEvent, JobState};
use serde_json::{Value, json};

use super::{Cluster, has_workflow, worker_fails, workflow, write_summary};
use crate::kube_fake::FakeKube;

/// The Kueue label a queued workload carries; it must survive a re-creation.
const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";

/// `llama-pretrain` (master and two workers, 8 GPUs each, tolerating the GPU taint) moved onto the
/// pool: its pods on gpu-node-1, -2 and -3, admitted through the Kueue queue `research`.
fn llama_on_the_pool(kube: &FakeKube) {
    kube.modify("Pod", "ml", "llama-pretrain-worker-1", |pod| {
        pod["spec"]["nodeName"] = json!("gpu-node-3");
    });
    kube.modify("PyTorchJob", "ml", "llama-pretrain", |job| {
        job["metadata"]["labels"][QUEUE_LABEL] = json!("research");
    });
}

/// gpu-node-4 cordoned for a driver upgrade, as `kubectl cordon` leaves it.
fn cordon(kube: &FakeKube, node: &str, cordoned: bool) {
    kube.modify("Node", "", node, |node| {
        let taints = node["spec"]["taints"].as_array_mut();
        let Some(taints) = taints else { return };
        taints.retain(|taint| taint["key"] != "node.kubernetes.io/unschedulable");
        if cordoned {
            taints.push(json!({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}));
            node["spec"]["unschedulable"] = json!(true);
        } else if let Some(spec) = node["spec"].as_object_mut() {
            spec.remove("unschedulable");
        }
    });
}

/// The node's kubelet stops posting status: Ready goes Unknown and the lifecycle controller taints it.
fn lose(kube: &FakeKube, node: &str) {
    kube.modify("Node", "", node, |node| {
        for condition in node["status"]["conditions"]
            .as_array_mut()
            .into_iter()
            .flatten()
        {
            if condition["type"] == "Ready" {
                *condition = json!({
                    "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.",
                    "lastHeartbeatTime": "2026-03-02T09:40:00Z",
                    "lastTransitionTime": "2026-03-02T09:40:40Z",
                });
            }
        }
        if let Some(taints) = node["spec"]["taints"].as_array_mut() {
            taints.push(json!({"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"}));
            taints.push(json!({"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"}));
        }
    });
}

/// The operator's pods for a re-created PyTorchJob: one per replica, owned by its new uid, pending
/// with the scheduler's words until `nodes` places them.
fn pytorchjob_pods(kube: &FakeKube, name: &str, nodes: Option<[&str; 3]>) {
    let job = kube
        .get("PyTorchJob", "ml", name)
        .unwrap_or_else(|| panic!("{name} was not re-created"));
    let uid = job["metadata"]["uid"].clone();
    for (index, (role, replica)) in [("master", 0), ("worker", 0), ("worker", 1)]
        .into_iter()
        .enumerate()
    {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": format!("{name}-{role}-{replica}"), "namespace": "ml",
                "uid": format!("{name}-{role}-{replica}-{}", uid.as_str().unwrap_or_default()),
                "labels": {"training.kubeflow.org/job-name": name,
                           "training.kubeflow.org/replica-type": role,
                           "training.kubeflow.org/replica-index": replica.to_string()},
                "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                     "name": name, "uid": uid, "controller": true}],
            },
            "spec": {"containers": [{"name": "pytorch", "image": "nvcr.io/nvidia/pytorch:24.05-py3"}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable",
                "message": "0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) were unschedulable, 2 node(s) didn't have free ports or resources. preemption: 0/4 nodes are available: 4 Preemption is not helpful for scheduling."}]},
        });
        if let Some(nodes) = nodes {
            pod["spec"]["nodeName"] = json!(nodes[index]);
            pod["status"] = json!({"phase": "Running", "containerStatuses": [{
                "name": "pytorch", "ready": true, "restartCount": 0, "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                "state": {"running": {"startedAt": chrono::Utc::now().to_rfc3339()}},
            }]});
        }
        kube.apply(pod);
    }
    let condition = if nodes.is_some() {
        json!([{"type": "Created", "status": "True", "reason": "PyTorchJobCreated"},
               {"type": "Running", "status": "True", "reason": "PyTorchJobRunning"}])
    } else {
        json!([{"type": "Created", "status": "True", "reason": "PyTorchJobCreated"}])
    };
    kube.modify("PyTorchJob", "ml", name, |job| {
        job["status"] = json!({"conditions": condition});
    });
}

fn hostname_exclusions(template_spec: &Value) -> String {
    template_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_lost_under_a_pytorchjob_on_a_tainted_pool_re_creates_it_to_wait_for_capacity() {
    let mut cluster = Cluster::on_gpu_pool(&["pytorchjob-running.json"], |config| {
        config.recovery.whitelist = vec![ActionKind::Requeue, ActionKind::Cancel];
        config.detect.stuck_pending_secs = 1;
    })
    .await;
    llama_on_the_pool(&cluster.kube);
    cordon(&cluster.kube, "gpu-node-4", true);
    cluster
        .until("enrolled on the pool", |status| {
            has_workflow(status, "llama-pretrain")
                && workflow(status, "llama-pretrain").attempts[0].nodes
                    == ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
        })
        .await;

    lose(&cluster.kube, "gpu-node-3");
    let status = cluster
        .until("the re-creation", |status| {
            workflow(status, "llama-pretrain")
                .actions
                .iter()
                .any(|a| a.kind == ActionKind::Requeue && a.state == ActionState::Done)
        })
        .await;
    let view = workflow(&status, "llama-pretrain");
    assert_eq!(view.attributions[0].category, "node_failure", "{view:#?}");
    assert_eq!(
        view.attributions[0].culprit.node.as_deref(),
        Some("gpu-node-3")
    );
    // Re-created although only gpu-node-1 and -2 can take it now: gpu-node-4 comes back.
    assert_ne!(view.workflow.status, WorkflowStatus::Completed, "{view:#?}");
    let reason = view.workflow.status_reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with("waiting for capacity: 2 of the 3 nodes in partition ml"),
        "{reason}"
    );
    let alerts: Vec<_> = status
        .notifications
        .iter()
        .filter(|n| n.event == AlertEvent::Recovering && n.body.contains("waiting for capacity"))
        .collect();
    assert_eq!(alerts.len(), 1, "{:#?}", status.notifications);

    let writes = cluster.writes();
    assert_eq!(
        write_summary(&writes),
        vec![
            "DELETE /apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llama-pretrain",
            "DELETE /api/v1/namespaces/ml/pods/llama-pretrain-worker-1",
            "POST /apis/kubeflow.org/v1/namespaces/ml/pytorchjobs",
        ]
    );
    let created = writes[2].body.clone().unwrap_or_default();
    assert_eq!(created["metadata"]["labels"][QUEUE_LABEL], "research");
    for role in ["Master", "Worker"] {
        let spec = &created["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"];
        assert!(
            hostname_exclusions(spec).contains(
                r#"{"key":"kubernetes.io/hostname","operator":"NotIn","values":["gpu-node-3"]}"#
            ),
            "{role}: {spec}"
        );
        assert_eq!(
            spec["tolerations"],
            json!([{"effect": "NoSchedule", "key": "nvidia.com/gpu", "operator": "Exists"}]),
            "{role}: the user's tolerations are kept"
        );
    }

    // The operator creates the pods; the scheduler cannot place them yet.
    pytorchjob_pods(&cluster.kube, "llama-pretrain", None);
    let status = cluster
        .until("the new incarnation reported stuck pending", |status| {
            let view = workflow(status, "llama-pretrain");
            view.attempts.len() == 2
                && view.attempts[1].state == JobState::Pending
                && view
                    .anomalies
                    .iter()
                    .any(|a| a.kind == AnomalyKind::StuckPending && a.attempt_index == 1)
        })
        .await;
    let view = workflow(&status, "llama-pretrain");
    assert_ne!(view.workflow.status, WorkflowStatus::Completed);
    assert_eq!(
        view.actions.len(),
        2,
        "waiting is not acted on: {:#?}",
        view.actions
    );

    // The upgrade ends: gpu-node-4 is schedulable again and the pods start there.
    cordon(&cluster.kube, "gpu-node-4", false);
    pytorchjob_pods(
        &cluster.kube,
        "llama-pretrain",
        Some(["gpu-node-1", "gpu-node-2", "gpu-node-4"]),
    );
    let status = cluster
        .until("running again away from gpu-node-3", |status| {
            let view = workflow(status, "llama-pretrain");
            view.attempts.len() == 2
                && view.attempts[1].state == JobState::Running
                && view.workflow.status == WorkflowStatus::Enabled
        })
        .await;
    let view = workflow(&status, "llama-pretrain");
    assert_eq!(
        view.attempts[1].nodes,
        ["gpu-node-1", "gpu-node-2", "gpu-node-4"]
    );
    assert_eq!(view.attempts[1].excluded_nodes, ["gpu-node-3"]);
    assert_eq!(
        view.workflow.status_reason.as_deref(),
        Some("attempt 1 running on gpu-node-1,gpu-node-2,gpu-node-4"),
        "no longer waiting"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dataloader_oom_on_a_tainted_pool_proposes_its_fix_and_excludes_no_node() {
    let mut cluster = Cluster::on_gpu_pool(&["pytorchjob-running.json"], |_| {}).await;
    llama_on_the_pool(&cluster.kube);
    cluster
        .until("enrolled", |status| has_workflow(status, "llama-pretrain"))
        .await;
    cluster.kube.append_log(
        "ml",
        "llama-pretrain-worker-1",
        "pytorch",
        "RuntimeError: DataLoader worker (pid 4242) is killed by signal: Killed.",
    );
    // The kubelet reports the worker's end; the training operator marks the job failed.
    worker_fails(&cluster.kube, "OOMKilled", 137);
    let status = cluster
        .until("the proposal", |status| {
            !workflow(status, "llama-pretrain").actions.is_empty()
        })
        .await;
    let view = workflow(&status, "llama-pretrain");
    assert_eq!(view.attributions[0].category, "dataloader_oom", "{view:#?}");
    assert_eq!(
        view.workflow.status,
        WorkflowStatus::Recovering,
        "{view:#?}"
    );
    assert_eq!(
        view.workflow.status_reason, None,
        "all four nodes can take it"
    );
    let recreate = view
        .actions
        .iter()
        .find(|action| action.kind == ActionKind::Recreate)
        .cloned()
        .unwrap_or_else(|| panic!("{:#?}", view.actions));
    assert_eq!(
        recreate.params.changes,
        vec![SpecChange::DataLoaderWorkers { workers: 4 }]
    );
    assert!(recreate.params.exclude_nodes.is_empty(), "{recreate:#?}");
    assert!(
        !view
            .actions
            .iter()
            .any(|action| action.kind == ActionKind::DrainNode),
        "{:#?}",
        view.actions
    );

    cluster.approve(recreate.id);
    cluster
        .until("the new attempt", |status| {
            workflow(status, "llama-pretrain").attempts.len() == 2
        })
        .await;
    let writes = cluster.writes();
    let created = writes
        .iter()
        .find(|request| request.method == "POST")
        .and_then(|request| request.body.clone())
        .unwrap_or_default();
    assert_eq!(created["metadata"]["labels"][QUEUE_LABEL], "research");
    for role in ["Master", "Worker"] {
        let spec = &created["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"];
        assert!(spec["affinity"].is_null(), "no node excluded: {spec}");
    }
}

/// What Kubeflow Trainer and JobSet make of a re-created TrainJob: its JobSet (the runtime's
/// template with the job's patches), and one pod per node, pending until `nodes` places them.
fn trainjob_children(kube: &FakeKube, name: &str, nodes: Option<[&str; 3]>) {
    let trainjob = kube
        .get("TrainJob", "ml", name)
        .unwrap_or_else(|| panic!("{name} was not re-created"));
    let trainjob_uid = trainjob["metadata"]["uid"].clone();
    let jobset_uid = format!("jobset-{}", trainjob_uid.as_str().unwrap_or_default());
    // The pod spec as JobSet would run it: the runtime's, with every patch's node affinity.
    let mut pod_spec = json!({
        "containers": [trainjob["spec"]["trainer"].clone()],
        "nodeSelector": {"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    });
    pod_spec["containers"][0]["name"] = json!("node");
    for patch in trainjob["spec"]["runtimePatches"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let patched = &patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]
            ["spec"]["template"]["spec"]["affinity"];
        if !patched.is_null() {
            pod_spec["affinity"] = patched.clone();
        }
    }
    let ready = u64::from(nodes.is_some());
    kube.apply(json!({
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
        "metadata": {"name": name, "namespace": "ml", "uid": jobset_uid,
                     "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                                          "name": name, "uid": trainjob_uid, "controller": true}]},
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {
            "parallelism": 3, "completions": 3, "completionMode": "Indexed",
            "template": {"spec": pod_spec}}}}]},
        "status": {"restarts": 0, "replicatedJobsStatus": [{"name": "node", "ready": ready, "active": 1,
                                                            "succeeded": 0, "failed": 0, "suspended": 0}]},
    }));
    for index in 0..3 {
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": format!("{name}-node-0-{index}-r{index}"), "namespace": "ml",
                "uid": format!("{jobset_uid}-{index}"),
                "labels": {"jobset.sigs.k8s.io/jobset-name": name,
                           "jobset.sigs.k8s.io/jobset-uid": jobset_uid,
                           "jobset.sigs.k8s.io/replicatedjob-name": "node",
                           "jobset.sigs.k8s.io/job-index": "0",
                           "batch.kubernetes.io/job-completion-index": index.to_string()},
            },
            "spec": pod_spec.clone(),
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable",
                "message": "0/4 nodes are available: 1 node(s) didn't match Pod's node affinity/selector, 1 node(s) were unschedulable, 2 node(s) didn't have free ports or resources."}]},
        });
        if let Some(nodes) = nodes {
            pod["spec"]["nodeName"] = json!(nodes[index]);
            pod["status"] = json!({"phase": "Running", "containerStatuses": [{
                "name": "node", "ready": true, "restartCount": 0, "image": "ghcr.io/acme/qwen-sft:2026.02",
                "state": {"running": {"startedAt": chrono::Utc::now().to_rfc3339()}},
            }]});
        }
        kube.apply(pod);
    }
    kube.modify("TrainJob", "ml", name, |job| {
        job["status"] = json!({"jobsStatus": [{"name": "node", "ready": ready, "active": 1,
                                               "succeeded": 0, "failed": 0, "suspended": 0}]});
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_lost_under_a_trainjob_on_a_tainted_pool_re_creates_it_to_wait_for_capacity() {
    let mut cluster = Cluster::on_gpu_pool(&["trainjob-running.json"], |config| {
        config.recovery.whitelist = vec![ActionKind::Requeue, ActionKind::Cancel];
        config.detect.stuck_pending_secs = 1;
    })
    .await;
    cordon(&cluster.kube, "gpu-node-4", true);
    let status = cluster
        .until("enrolled", |status| {
            has_workflow(status, "qwen-sft")
                && workflow(status, "qwen-sft").attempts[0].nodes
                    == ["gpu-node-1", "gpu-node-2", "gpu-node-3"]
        })
        .await;
    assert_eq!(
        status.workflows.len(),
        1,
        "its JobSet is watched as the TrainJob, not enrolled again: {:#?}",
        status.workflows
    );
    let view = workflow(&status, "qwen-sft");
    assert_eq!(view.attempts[0].job_id, "trainjob/ml/qwen-sft");
    assert_eq!(view.workflow.spec.nodes, 3);
    assert_eq!(view.workflow.spec.gpus_per_node, 8);

    lose(&cluster.kube, "gpu-node-3");
    let status = cluster
        .until("the re-creation", |status| {
            workflow(status, "qwen-sft")
                .actions
                .iter()
                .any(|a| a.kind == ActionKind::Requeue && a.state == ActionState::Done)
        })
        .await;
    let view = workflow(&status, "qwen-sft");
    assert_eq!(view.attributions[0].category, "node_failure", "{view:#?}");
    assert_eq!(
        view.attributions[0].culprit.node.as_deref(),
        Some("gpu-node-3")
    );
    let reason = view.workflow.status_reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with("waiting for capacity: 2 of the 3 nodes in partition ml"),
        "{reason}"
    );
    // Queued in Kueue, but a resume would not carry a node exclusion to the JobSet's Jobs: re-created.
    let writes = cluster.writes();
    assert_eq!(
        write_summary(&writes),
        vec![
            "DELETE /apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs/qwen-sft",
            "DELETE /api/v1/namespaces/ml/pods/qwen-sft-node-0-2-m3z8w",
            "POST /apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs",
        ]
    );
    let created = writes[2].body.clone().unwrap_or_default();
    assert_eq!(created["metadata"]["labels"][QUEUE_LABEL], "research");
    assert_eq!(created["spec"]["trainer"]["numNodes"], 3);
    let patches = created["spec"]["runtimePatches"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(patches.len(), 2, "{patches:#?}");
    assert_eq!(
        patches[0]["manager"], "kueue.x-k8s.io/manager",
        "Kueue's patch is kept"
    );
    assert_eq!(patches[1]["manager"], "runguard.io/recovery");
    let spec = &patches[1]["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"][0]["template"]
        ["spec"]["template"]["spec"];
    let terms = hostname_exclusions(spec);
    assert!(
        terms.contains(
            r#""key":"cloud.google.com/gke-nodepool","operator":"In","values":["a3-research"]"#
        ) && terms.contains(
            r#"{"key":"kubernetes.io/hostname","operator":"NotIn","values":["gpu-node-3"]}"#
        ),
        "the runtime's affinity with the exclusion merged in: {terms}"
    );

    // Trainer and JobSet make the new incarnation; the scheduler cannot place it yet.
    trainjob_children(&cluster.kube, "qwen-sft", None);
    cluster
        .until("the new incarnation reported stuck pending", |status| {
            let view = workflow(status, "qwen-sft");
            view.attempts.len() == 2
                && view.attempts[1].state == JobState::Pending
                && view
                    .anomalies
                    .iter()
                    .any(|a| a.kind == AnomalyKind::StuckPending && a.attempt_index == 1)
        })
        .await;

    cordon(&cluster.kube, "gpu-node-4", false);
    trainjob_children(
        &cluster.kube,
        "qwen-sft",
        Some(["gpu-node-1", "gpu-node-2", "gpu-node-4"]),
    );
    let status = cluster
        .until("running again away from gpu-node-3", |status| {
            let view = workflow(status, "qwen-sft");
            view.attempts.len() == 2
                && view.attempts[1].state == JobState::Running
                && view.workflow.status == WorkflowStatus::Enabled
                // Running once one pod is bound: wait for the engine to see every pod's node.
                && view.attempts[1].nodes.len() == 3
        })
        .await;
    let view = workflow(&status, "qwen-sft");
    assert_eq!(
        view.attempts[1].nodes,
        ["gpu-node-1", "gpu-node-2", "gpu-node-4"]
    );
    assert_eq!(view.attempts[1].excluded_nodes, ["gpu-node-3"]);
    assert_eq!(
        view.workflow.status_reason.as_deref(),
        Some("attempt 1 running on gpu-node-1,gpu-node-2,gpu-node-4"),
        "no longer waiting"
    );
}
