//! The Kubernetes backend end to end: the real engine, the `kube` client and its watchers against the
//! in-process API server of `tests/kube_fake/`, which records every request. Each scenario asserts
//! what runguard concluded and exactly what it wrote to the cluster.
//!
//! `RUNGUARD_KUBECONFIG=path/to/kubeconfig` points the last test at a real cluster, which the backend
//! then reads (and never writes); the scenarios need the stand-in, whose objects they shape.

use std::sync::Arc;
use std::time::{Duration, Instant};

use runguard::status::{StatusReport, WorkflowView};
use runguard_engine::backend::Backend;
use runguard_engine::backend::kube::KubeBackend;
use runguard_engine::config::{BackendKind, Config};
use runguard_engine::engine::Engine;
use runguard_engine::model::{ActionKind, ActionState, AnomalyKind, SpecChange, WorkflowStatus};
use runguard_engine::store::CommandKind;
use serde_json::{Value, json};

use crate::kube_fake::{FakeKube, RecordedRequest};
use crate::support::EngineRig;

mod gpu_pool;
mod kueue;
mod node_ledger;
mod phases;
mod proactive;
mod ray_cluster;

/// Real-time bound for anything to happen; never a measure of speed.
const DEADLINE: Duration = Duration::from_secs(60);

struct Cluster {
    kube: FakeKube,
    /// The store, the config and the status; the engine runs on the real clock.
    rig: EngineRig,
    backend: Arc<KubeBackend>,
    engine: Engine,
}

impl Cluster {
    async fn start(fixtures: &[&str], adjust: impl FnOnce(&mut Config)) -> Self {
        Self::start_with(fixtures, false, adjust).await
    }

    /// The same on healthy nodes: gpu-node-2's GPU fault cleared and two more healthy nodes, for
    /// scenarios about something else.
    async fn healthy(fixtures: &[&str], adjust: impl FnOnce(&mut Config)) -> Self {
        Self::start_with(fixtures, true, adjust).await
    }

    /// On a GKE-shaped pool of four H100 nodes, each tainted `nvidia.com/gpu=present:NoSchedule`.
    async fn on_gpu_pool(fixtures: &[&str], adjust: impl FnOnce(&mut Config)) -> Self {
        Self::start_on("gke-gpu-pool-nodes.json", fixtures, false, adjust).await
    }

    async fn start_with(
        fixtures: &[&str],
        healthy_nodes: bool,
        adjust: impl FnOnce(&mut Config),
    ) -> Self {
        Self::start_on("nodes.json", fixtures, healthy_nodes, adjust).await
    }

    async fn start_on(
        nodes: &str,
        fixtures: &[&str],
        healthy_nodes: bool,
        adjust: impl FnOnce(&mut Config),
    ) -> Self {
        let kube = FakeKube::start();
        kube.load_fixture(nodes);
        for fixture in fixtures {
            kube.load_fixture(fixture);
        }
        if healthy_nodes {
            heal_nodes(&kube);
        }
        let mut rig = EngineRig::default();
        let kubeconfig = kube.kubeconfig(rig.path());
        let data_dir = rig.path().join("kube");
        let config = &mut rig.config;
        config.backend.kind = BackendKind::Kubernetes;
        config.kubernetes.kubeconfig = Some(kubeconfig);
        config.kubernetes.data_dir = Some(data_dir);
        config.kubernetes.sync_timeout_secs = 10;
        adjust(config);
        let backend = Arc::new(
            KubeBackend::connect(&rig.config.kubernetes, rig.path().join("kube"))
                .await
                .unwrap(),
        );
        let engine = rig.engine_in_real_time(Arc::clone(&backend));
        Self {
            kube,
            rig,
            backend,
            engine,
        }
    }

    fn status(&self) -> StatusReport {
        self.rig.status()
    }

    /// Ticks the engine until `done` holds.
    async fn until(&mut self, what: &str, done: impl Fn(&StatusReport) -> bool) -> StatusReport {
        let start = Instant::now();
        while start.elapsed() < DEADLINE {
            self.engine.tick().await.unwrap();
            let status = self.status();
            if done(&status) {
                return status;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        panic!(
            "timed out waiting for {what}: {:#?}",
            self.status().workflows
        );
    }

    fn approve(&self, action_id: i64) {
        self.rig.command(CommandKind::Approve, action_id);
    }

    /// The requests that changed something (anything but GET), in order.
    fn writes(&self) -> Vec<RecordedRequest> {
        self.kube
            .requests()
            .into_iter()
            .filter(|request| request.method != "GET")
            .collect()
    }
}

/// Clears gpu-node-2's GPU fault and adds two healthy nodes.
fn heal_nodes(kube: &FakeKube) {
    kube.modify("Node", "", "gpu-node-2", |node| {
        let conditions = node["status"]["conditions"].as_array_mut().unwrap();
        conditions.retain(|condition| condition["type"] != "GpuXidError");
        node["spec"]["taints"] = json!([]);
    });
    let template = kube.get("Node", "", "gpu-node-1").unwrap();
    for name in ["gpu-node-6", "gpu-node-7"] {
        let mut node = template.clone();
        node["metadata"] = json!({"name": name, "labels": {"kubernetes.io/hostname": name}});
        kube.apply(node);
    }
}

/// Worker 1 of the PyTorchJob llama-pretrain ends (`reason`, `exit_code`, as the kubelet reports a
/// terminated container) and the training operator marks the job failed.
fn worker_fails(kube: &FakeKube, reason: &str, exit_code: i32) {
    kube.modify("Pod", "ml", "llama-pretrain-worker-1", |pod| {
        pod["status"]["phase"] = json!("Failed");
        pod["status"]["containerStatuses"][0]["state"] = json!({"terminated": {
            "reason": reason, "exitCode": exit_code,
            "startedAt": "2025-06-10T08:00:00Z", "finishedAt": "2025-06-10T09:00:00Z",
        }});
    });
    kube.modify("PyTorchJob", "ml", "llama-pretrain", |job| {
        job["status"]["conditions"] = json!([{
            "type": "Failed", "status": "True", "reason": "PyTorchJobFailed",
            "message": "PyTorchJob ml/llama-pretrain is failed because 1 Worker replica(s) failed.",
            "lastTransitionTime": "2025-06-10T09:00:01Z",
        }]);
    });
}

/// Whether a node's labels satisfy one node-selector expression.
fn expression_holds(labels: &Value, expression: &Value) -> bool {
    let value = labels[expression["key"].as_str().unwrap_or_default()].as_str();
    let listed = |wanted: Option<&str>| {
        expression["values"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| wanted.is_some() && v.as_str() == wanted)
    };
    match expression["operator"].as_str().unwrap_or_default() {
        "In" => listed(value),
        "NotIn" => !listed(value),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        other => panic!("the tests' scheduler reads no operator {other}"),
    }
}

/// The nodes the scheduler could bind a pod of `template` to, as the scheduler reads a template:
/// Ready, not cordoned, and matching its required node affinity (terms ORed, each term's
/// expressions ANDed). Taints are not looked at: the scenarios' nodes carry none they mind.
fn fitting_nodes(kube: &FakeKube, template: &Value) -> Vec<String> {
    let terms = template["spec"]["affinity"]["nodeAffinity"]
        ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    kube.list("Node", "")
        .into_iter()
        .filter(|node| {
            node["spec"]["unschedulable"] != json!(true)
                && node["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
        .filter(|node| {
            terms.is_empty()
                || terms.iter().any(|term| {
                    term["matchExpressions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .all(|expression| expression_holds(&node["metadata"]["labels"], expression))
                })
        })
        .filter_map(|node| node["metadata"]["name"].as_str().map(str::to_string))
        .collect()
}

/// Where the scheduler binds a pod of `template`: the first of `preferred` it fits (where the job
/// ran before, its image cached), else the first node it fits, one pod a node (`taken`).
fn place(kube: &FakeKube, template: &Value, preferred: &[&str], taken: &mut Vec<String>) -> String {
    let fitting: Vec<String> = fitting_nodes(kube, template)
        .into_iter()
        .filter(|node| !taken.contains(node))
        .collect();
    let node = preferred
        .iter()
        .map(|node| node.to_string())
        .find(|node| fitting.contains(node))
        .or_else(|| fitting.first().cloned())
        .unwrap_or_else(|| panic!("no node fits {template:#}"));
    taken.push(node.clone());
    node
}

/// A pod of `template` running on `node`, its containers started.
fn running_pod(template: &Value, metadata: Value, node: &str) -> Value {
    let mut spec = template["spec"].clone();
    spec["nodeName"] = json!(node);
    let statuses: Vec<Value> = spec["containers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|container| {
            json!({"name": container["name"], "ready": true, "restartCount": 0,
                   "image": container["image"],
                   "state": {"running": {"startedAt": chrono::Utc::now().to_rfc3339()}}})
        })
        .collect();
    json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec,
        "status": {"phase": "Running", "startTime": chrono::Utc::now().to_rfc3339(),
                   "containerStatuses": statuses},
    })
}

/// Plays the training operator and the scheduler for the PyTorchJob as it is now: its master and
/// workers' pods, bound where their templates let them (`preferred` first), running; the job marked
/// Running. Returns the nodes in rank order.
fn run_pytorchjob(kube: &FakeKube, namespace: &str, name: &str, preferred: &[&str]) -> Vec<String> {
    let job = kube
        .get("PyTorchJob", namespace, name)
        .unwrap_or_else(|| panic!("no PyTorchJob {namespace}/{name}"));
    let uid = job["metadata"]["uid"].clone();
    let mut taken = Vec::new();
    for role in ["Master", "Worker"] {
        let spec = &job["spec"]["pytorchReplicaSpecs"][role];
        let template = &spec["template"];
        for index in 0..spec["replicas"].as_u64().unwrap_or(1) {
            let lower = role.to_ascii_lowercase();
            let node = place(kube, template, preferred, &mut taken);
            let metadata = json!({
                "name": format!("{name}-{lower}-{index}"), "namespace": namespace,
                "uid": format!("{}-{lower}-{index}", uid.as_str().unwrap_or_default()),
                "labels": {"training.kubeflow.org/job-name": name,
                           "training.kubeflow.org/replica-type": lower,
                           "training.kubeflow.org/replica-index": index.to_string()},
                "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                     "name": name, "uid": uid, "controller": true}],
            });
            kube.apply(running_pod(template, metadata, &node));
        }
    }
    kube.modify("PyTorchJob", namespace, name, |job| {
        job["status"]["conditions"] = json!([
            {"type": "Created", "status": "True", "reason": "PyTorchJobCreated"},
            {"type": "Running", "status": "True", "reason": "PyTorchJobRunning"},
        ]);
    });
    taken
}

fn workflow<'a>(status: &'a StatusReport, name: &str) -> &'a WorkflowView {
    status
        .workflows
        .iter()
        .find(|view| view.workflow.name == name)
        .unwrap_or_else(|| panic!("no workflow {name}: {:#?}", status.workflows))
}

fn has_workflow(status: &StatusReport, name: &str) -> bool {
    status
        .workflows
        .iter()
        .any(|view| view.workflow.name == name)
}

fn log_of(view: &WorkflowView, index: usize) -> String {
    view.attempts[index]
        .log_path
        .as_ref()
        .and_then(|path| std::fs::read_to_string(path).ok())
        .unwrap_or_default()
}

fn write_summary(writes: &[RecordedRequest]) -> Vec<String> {
    writes
        .iter()
        .map(|request| format!("{} {}", request.method, request.path))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_opted_in_workloads_are_enrolled_and_their_pod_logs_are_followed_without_repeats() {
    // On healthy nodes: the fixture's GPU fallen off the bus under gpu-node-2 is a node signal, on
    // which runguard would (rightly) end the run; this is about enrolment and logs.
    let mut cluster = Cluster::healthy(
        &["pytorchjob-running.json", "pytorchjob-unlabeled.json"],
        |_| {},
    )
    .await;
    let status = cluster
        .until("the PyTorchJob enrolled", |status| {
            has_workflow(status, "llama-pretrain")
        })
        .await;
    assert!(
        !has_workflow(&status, "resnet-eval"),
        "no opt-in label, not watched"
    );
    let view = workflow(&status, "llama-pretrain");
    assert_eq!(view.attempts[0].job_id, "pytorchjob/ml/llama-pretrain");
    assert_eq!(view.workflow.spec.nodes, 3, "master and two workers");
    assert_eq!(view.workflow.spec.partition.as_deref(), Some("ml"));
    assert_eq!(
        view.attempts[0].nodes,
        vec!["gpu-node-1", "gpu-node-2", "gpu-spot-1"],
        "in rank order: master, worker 0, worker 1"
    );

    // Each replica's log lands in the attempt's unified log with its rank, as srun -l writes it.
    for (pod, step) in [
        ("llama-pretrain-master-0", 10),
        ("llama-pretrain-worker-0", 10),
        ("llama-pretrain-worker-1", 10),
    ] {
        cluster.kube.append_log(
            "ml",
            pod,
            "pytorch",
            &format!("[{pod}] iteration {step}/1000 | TFLOP/s/GPU: 182.3"),
        );
    }
    let status = cluster
        .until("the three lines", |status| {
            log_of(workflow(status, "llama-pretrain"), 0)
                .lines()
                .filter(|line| line.contains("iteration 10/"))
                .count()
                == 3
        })
        .await;
    let log = log_of(workflow(&status, "llama-pretrain"), 0);
    assert!(
        log.contains("0: [llama-pretrain-master-0] iteration 10/1000"),
        "{log}"
    );
    assert!(
        log.contains("16: [llama-pretrain-worker-1] iteration 10/1000"),
        "{log}"
    );

    // The connection drops; the followers resume and nothing is written twice.
    cluster.kube.cut_log_streams();
    cluster.kube.append_log(
        "ml",
        "llama-pretrain-master-0",
        "pytorch",
        "iteration 20/1000 | TFLOP/s/GPU: 181.9",
    );
    let status = cluster
        .until("the line after the reconnect", |status| {
            log_of(workflow(status, "llama-pretrain"), 0).contains("iteration 20/")
        })
        .await;
    let log = log_of(workflow(&status, "llama-pretrain"), 0);
    assert_eq!(log.matches("iteration 10/").count(), 3, "{log}");
    assert_eq!(log.matches("iteration 20/").count(), 1, "{log}");
    // Watching and reading wrote nothing.
    assert_eq!(write_summary(&cluster.writes()), Vec::<String>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_oom_killed_by_its_dataloader_is_re_created_with_fewer_workers_after_approval() {
    let mut cluster = Cluster::healthy(&["pytorchjob-running.json"], |_| {}).await;
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
    let recreate = view
        .actions
        .iter()
        .find(|action| action.kind == ActionKind::Recreate)
        .unwrap_or_else(|| panic!("{:#?}", view.actions));
    assert_eq!(recreate.state, ActionState::Proposed);
    assert!(
        !recreate.permitted,
        "a change to the user's spec waits for a person"
    );
    assert_eq!(
        recreate.params.changes,
        vec![SpecChange::DataLoaderWorkers { workers: 4 }]
    );
    // The approval shows the diff of the spec before anything runs.
    let command = recreate.command.clone().unwrap_or_default();
    assert!(
        command.contains("DELETE /apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llama-pretrain"),
        "{command}"
    );
    assert!(
        command.contains("+ ") && command.contains("DATALOADER_NUM_WORKERS"),
        "{command}"
    );
    assert_eq!(view.workflow.status, WorkflowStatus::Recovering);
    assert!(
        cluster.writes().is_empty(),
        "nothing written before the approval"
    );

    cluster.approve(recreate.id);
    let status = cluster
        .until("the new attempt", |status| {
            workflow(status, "llama-pretrain").attempts.len() == 2
        })
        .await;
    let view = workflow(&status, "llama-pretrain");
    assert_eq!(view.attempts[1].restart_count, 1);
    let writes = cluster.writes();
    assert_eq!(
        write_summary(&writes),
        vec![
            "DELETE /apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llama-pretrain",
            "POST /apis/kubeflow.org/v1/namespaces/ml/pytorchjobs",
        ]
    );
    let created = writes[1].body.clone().unwrap_or_default();
    assert_eq!(
        created["metadata"]["annotations"]["runguard.io/restart-count"],
        "1"
    );
    assert!(created["metadata"].get("uid").is_none());
    assert!(created.get("status").is_none());
    let worker_env = &created["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"]
        [0]["env"];
    assert!(
        worker_env.as_array().is_some_and(
            |env| env.contains(&json!({"name": "DATALOADER_NUM_WORKERS", "value": "4"}))
        ),
        "{created:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_that_fails_silently_is_acted_on_without_waiting_for_the_poll() {
    // A poll far longer than the test may run: only the watch streams can start the listing.
    let mut cluster = Cluster::healthy(&["pytorchjob-running.json"], |config| {
        config.engine.poll_interval_secs = 3_600.0;
    })
    .await;
    cluster
        .until("enrolled", |status| has_workflow(status, "llama-pretrain"))
        .await;
    // No log line says anything: the kubelet's verdict alone.
    worker_fails(&cluster.kube, "Error", 1);
    let status = cluster
        .until("the decision on the failure", |status| {
            !workflow(status, "llama-pretrain").attributions.is_empty()
        })
        .await;
    let view = workflow(&status, "llama-pretrain");
    assert!(
        view.attempts[0].state.is_terminal(),
        "{:#?}",
        view.attempts[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_going_not_ready_under_a_running_pytorchjob_is_excluded_from_its_re_creation() {
    let mut cluster = Cluster::healthy(&["pytorchjob-running.json"], |config| {
        config.recovery.whitelist = vec![ActionKind::Requeue, ActionKind::Cancel];
    })
    .await;
    cluster
        .until("enrolled", |status| has_workflow(status, "llama-pretrain"))
        .await;
    cluster.kube.forbid("patch", "nodes");
    cluster.kube.modify("Node", "", "gpu-spot-1", |node| {
        for condition in node["status"]["conditions"].as_array_mut().unwrap() {
            if condition["type"] == "Ready" {
                *condition = json!({
                    "type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                    "message": "Kubelet stopped posting node status.",
                    "lastHeartbeatTime": "2025-06-10T09:00:00Z",
                    "lastTransitionTime": "2025-06-10T09:00:40Z",
                });
            }
        }
    });
    let status = cluster
        .until("the re-creation", |status| {
            workflow(status, "llama-pretrain")
                .actions
                .iter()
                .any(|a| a.kind == ActionKind::Requeue && a.state == ActionState::Done)
        })
        .await;
    let view = workflow(&status, "llama-pretrain");
    assert_eq!(view.anomalies[0].kind, AnomalyKind::Crash);
    assert_eq!(view.attributions[0].category, "node_failure", "{view:#?}");
    assert_eq!(
        view.attributions[0].culprit.node.as_deref(),
        Some("gpu-spot-1")
    );
    let log = log_of(view, 0);
    assert!(
        log.contains("kubernetes: Warning NodeNotReady node/gpu-spot-1: Ready=Unknown"),
        "{log}"
    );
    let writes = cluster.writes();
    assert_eq!(
        write_summary(&writes),
        vec![
            "DELETE /apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llama-pretrain",
            "DELETE /api/v1/namespaces/ml/pods/llama-pretrain-worker-1",
            "POST /apis/kubeflow.org/v1/namespaces/ml/pytorchjobs",
        ],
        "the job, its pod stuck on the lost node, the new incarnation: nothing else"
    );
    // Deleted at once: the lost node cannot confirm the pod's end.
    assert_eq!(
        writes[1].body.clone().unwrap_or_default()["gracePeriodSeconds"],
        0,
        "{:?}",
        writes[1]
    );
    let created = writes[2].body.clone().unwrap_or_default();
    for role in ["Master", "Worker"] {
        let terms = &created["spec"]["pytorchReplicaSpecs"][role]["template"]["spec"]["affinity"]["nodeAffinity"]
            ["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"];
        assert!(
            terms.to_string().contains(
                r#"{"key":"kubernetes.io/hostname","operator":"NotIn","values":["gpu-spot-1"]}"#
            ),
            "{role}: {terms}"
        );
    }

    // Cordoning is proposed; approved, the API's RBAC refusal is recorded as what runguard would have done.
    let drain = view
        .actions
        .iter()
        .find(|action| action.kind == ActionKind::DrainNode)
        .cloned()
        .unwrap_or_else(|| panic!("{:#?}", view.actions));
    assert_eq!(drain.state, ActionState::Proposed);
    cluster.approve(drain.id);
    let status = cluster
        .until("the refused cordon", |status| {
            workflow(status, "llama-pretrain")
                .actions
                .iter()
                .any(|a| a.id == drain.id && a.state == ActionState::Failed)
        })
        .await;
    let drain = workflow(&status, "llama-pretrain")
        .actions
        .iter()
        .find(|a| a.id == drain.id)
        .cloned()
        .unwrap();
    let result = drain.result.unwrap_or_default();
    assert!(
        result.contains("would have done `PATCH /api/v1/nodes/gpu-spot-1 (merge)"),
        "{result}"
    );
    assert!(
        result.contains("cannot patch resource \"nodes\""),
        "{result}"
    );
    let patch = cluster
        .writes()
        .into_iter()
        .find(|request| request.method == "PATCH")
        .unwrap();
    assert_eq!(patch.path, "/api/v1/nodes/gpu-spot-1");
    assert_eq!(
        patch.body.clone().unwrap_or_default()["spec"]["unschedulable"],
        true
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_image_pull_refused_for_credentials_stops_the_job_with_the_reason_and_writes_nothing() {
    let mut cluster = Cluster::start(&["batch-job.json", "events.json"], |_| {}).await;
    let status = cluster
        .until("the stop", |status| {
            has_workflow(status, "nccl-tests")
                && workflow(status, "nccl-tests").workflow.status == WorkflowStatus::Completed
        })
        .await;
    let view = workflow(&status, "nccl-tests");
    assert!(!view.workflow.succeeded);
    assert_eq!(view.attributions[0].category, "image_pull", "{view:#?}");
    let reason = view.workflow.status_reason.clone().unwrap_or_default();
    assert!(reason.contains("not recoverable"), "{reason}");
    let log = log_of(view, 0);
    assert!(
        log.contains("kubernetes: Warning ImagePullBackOff pod/nccl-tests-x7k2p"),
        "{log}"
    );
    assert!(
        log.contains("authorization failed") || log.contains("pull access denied"),
        "{log}"
    );
    assert!(
        cluster.writes().is_empty(),
        "{:?}",
        write_summary(&cluster.writes())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_pending_on_gpus_are_reported_as_stuck_with_the_scheduler_s_words() {
    let mut cluster = Cluster::start(&[], |config| {
        config.detect.stuck_pending_secs = 1;
    })
    .await;
    let job: Value = json!({
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
        "metadata": {"name": "big-run", "namespace": "ml", "uid": "b1",
                     "creationTimestamp": chrono::Utc::now().to_rfc3339(),
                     "labels": {"runguard.io/enabled": "true"}},
        "spec": {"pytorchReplicaSpecs": {"Master": {"replicas": 1, "template": {"spec": {"containers": [
            {"name": "pytorch", "image": "train:1", "resources": {"limits": {"nvidia.com/gpu": 8}}}]}}}}},
        "status": {"conditions": [{"type": "Created", "status": "True", "reason": "PyTorchJobCreated"}]},
    });
    cluster.kube.apply(job);
    cluster.kube.apply(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "big-run-master-0", "namespace": "ml", "uid": "p1",
                     "labels": {"training.kubeflow.org/job-name": "big-run",
                                "training.kubeflow.org/replica-type": "master",
                                "training.kubeflow.org/replica-index": "0"},
                     "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob",
                                          "name": "big-run", "uid": "b1", "controller": true}]},
        "spec": {"containers": [{"name": "pytorch", "image": "train:1"}]},
        "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable",
            "message": "0/6 nodes are available: 6 Insufficient nvidia.com/gpu."}]},
    }));
    cluster.kube.apply(json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "big-run-master-0.1", "namespace": "ml", "uid": "e1"},
        "involvedObject": {"kind": "Pod", "name": "big-run-master-0", "namespace": "ml", "uid": "p1"},
        "reason": "FailedScheduling", "type": "Warning", "count": 3,
        "message": "0/6 nodes are available: 6 Insufficient nvidia.com/gpu.",
        "lastTimestamp": chrono::Utc::now().to_rfc3339(),
    }));
    let status = cluster
        .until(
            "the stuck-pending warning and the scheduler's reason",
            |status| {
                // The pod may be seen after the workload, so the reason may come after the warning.
                has_workflow(status, "big-run")
                    && workflow(status, "big-run")
                        .anomalies
                        .iter()
                        .any(|a| a.kind == AnomalyKind::StuckPending)
                    && workflow(status, "big-run").attempts[0].reason.as_deref()
                        == Some("Unschedulable")
                    // The event may come after both: it joins the log when the engine hears it.
                    && log_of(workflow(status, "big-run"), 0)
                        .contains("kubernetes: Warning FailedScheduling pod/big-run-master-0")
            },
        )
        .await;
    let view = workflow(&status, "big-run");
    assert_eq!(view.attempts[0].reason.as_deref(), Some("Unschedulable"));
    assert!(
        view.actions.is_empty(),
        "waiting for GPUs is not a failure to act on"
    );
    let log = log_of(view, 0);
    assert!(
        log.contains("kubernetes: Warning FailedScheduling pod/big-run-master-0: 0/6 nodes are available: 6 Insufficient nvidia.com/gpu."),
        "{log}"
    );
    assert!(cluster.writes().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rayjob_whose_head_dies_is_proposed_again_with_gcs_fault_tolerance() {
    let mut cluster = Cluster::healthy(&["rayjob.json"], |_| {}).await;
    cluster
        .until("enrolled", |status| has_workflow(status, "ray-tune-sweep"))
        .await;
    cluster.kube.modify(
        "Pod",
        "ml",
        "ray-tune-sweep-raycluster-7xk2f-gpu-group-worker-8h4tq",
        |pod| {
            pod["status"]["phase"] = json!("Running");
            pod["status"]["containerStatuses"][0]["state"] =
                json!({"running": {"startedAt": "2025-06-10T08:01:00Z"}});
        },
    );
    let worker = "ray-tune-sweep-raycluster-7xk2f-gpu-group-worker-8h4tq";
    let start = Instant::now();
    while cluster.kube.open_log_follows() < 2 && start.elapsed() < DEADLINE {
        cluster.engine.tick().await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    cluster.kube.append_log(
        "ml",
        worker,
        "ray-worker",
        "[2025-06-10 09:00:00,000 E 41 41] gcs_rpc_client.h:179: Failed to connect to GCS within 60 seconds. GCS may have been killed.",
    );
    // The workers lose the GCS before KubeRay gives up on the job.
    cluster
        .until("the worker's line", |status| {
            log_of(workflow(status, "ray-tune-sweep"), 0).contains("Failed to connect to GCS")
        })
        .await;
    cluster.kube.modify(
        "Pod",
        "ml",
        "ray-tune-sweep-raycluster-7xk2f-head-c9x2p",
        |pod| {
            pod["status"]["phase"] = json!("Failed");
            pod["status"]["containerStatuses"][0]["state"] = json!({"terminated": {
            "reason": "Error", "exitCode": 1, "finishedAt": "2025-06-10T08:59:30Z"}});
        },
    );
    cluster
        .kube
        .modify("RayJob", "ml", "ray-tune-sweep", |job| {
            job["status"]["jobStatus"] = json!("FAILED");
            job["status"]["jobDeploymentStatus"] = json!("Failed");
            job["status"]["message"] =
                json!("Ray head pod ray-tune-sweep-raycluster-7xk2f-head-c9x2p failed");
        });
    let status = cluster
        .until("the proposal", |status| {
            !workflow(status, "ray-tune-sweep").actions.is_empty()
        })
        .await;
    let view = workflow(&status, "ray-tune-sweep");
    assert_eq!(
        view.attributions[0].category,
        "ray_cluster",
        "{view:#?}\n{}",
        log_of(view, 0)
    );
    let recreate = &view.actions[0];
    assert_eq!(recreate.kind, ActionKind::Recreate, "{:#?}", view.actions);
    assert_eq!(
        recreate.params.changes,
        vec![SpecChange::RayGcsFaultTolerance]
    );
    let command = recreate.command.clone().unwrap_or_default();
    assert!(
        command.contains("DELETE /apis/ray.io/v1/namespaces/ml/rayjobs/ray-tune-sweep"),
        "{command}"
    );
    assert!(
        command.contains("+") && command.contains("ray.io/ft-enabled"),
        "{command}"
    );
    assert!(cluster.writes().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_credentials_move_the_workflows_to_credential_error_until_they_work_again() {
    let mut cluster = Cluster::start(&["pytorchjob-running.json"], |config| {
        config.engine.max_backoff_secs = 1;
    })
    .await;
    cluster
        .until("enrolled", |status| has_workflow(status, "llama-pretrain"))
        .await;
    cluster.kube.unauthorized(true);
    // The watchers see the refusal when they next list (after the server drops their streams).
    cluster.kube.cut_log_streams();
    let status = cluster
        .until("credential_error", |status| {
            workflow(status, "llama-pretrain").workflow.status == WorkflowStatus::CredentialError
        })
        .await;
    let reason = workflow(&status, "llama-pretrain")
        .workflow
        .status_reason
        .clone()
        .unwrap_or_default();
    assert!(
        reason.contains("refused runguard's credentials"),
        "{reason}"
    );
    assert!(
        reason.contains("Unauthorized") || reason.contains("401"),
        "{reason}"
    );
    cluster.kube.unauthorized(false);
    cluster
        .until("watching again", |status| {
            workflow(status, "llama-pretrain").workflow.status == WorkflowStatus::Enabled
        })
        .await;
    assert!(cluster.backend.following() <= 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_whose_crds_are_not_installed_are_skipped_without_waiting_for_them() {
    let kube = FakeKube::start();
    kube.load_fixture("nodes.json");
    kube.load_fixture("pytorchjob-running.json");
    // A cluster with the training operator but neither JobSet, Trainer nor KubeRay.
    for plural in ["jobsets", "trainjobs", "rayjobs", "rayclusters"] {
        kube.without_kind(plural);
    }
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default();
    config.kubernetes.kubeconfig = Some(kube.kubeconfig(dir.path()));
    // Far beyond the deadline: a listing that waited for a missing kind would never answer in time.
    config.kubernetes.sync_timeout_secs = 3_600;
    let backend = KubeBackend::connect(&config.kubernetes, dir.path().join("kube"))
        .await
        .unwrap();
    for listing in 0..2 {
        let jobs = tokio::time::timeout(DEADLINE, backend.list_jobs())
            .await
            .unwrap_or_else(|_| panic!("listing {listing} waited for a kind the cluster lacks"))
            .unwrap();
        let ids: Vec<&str> = jobs.iter().map(|job| job.job_id.as_str()).collect();
        assert_eq!(ids, ["pytorchjob/ml/llama-pretrain"], "listing {listing}");
    }
}

/// The same backend against a real cluster: `RUNGUARD_KUBECONFIG=~/.kube/config cargo test --test
/// integration real_cluster -- --nocapture` (optionally `RUNGUARD_KUBE_CONTEXT`, and
/// `RUNGUARD_KUBE_NAMESPACE` to read one namespace). It only reads: the scenarios above shape the
/// cluster, which a real one is not for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_cluster_is_read_and_never_written_when_one_is_given() {
    let Some(kubeconfig) = std::env::var_os("RUNGUARD_KUBECONFIG") else {
        eprintln!("SKIPPED: set RUNGUARD_KUBECONFIG to a kubeconfig to read a real cluster");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut config = Config::default().kubernetes;
    config.kubeconfig = Some(kubeconfig.into());
    config.context = std::env::var("RUNGUARD_KUBE_CONTEXT").ok();
    config.namespaces = std::env::var("RUNGUARD_KUBE_NAMESPACE")
        .ok()
        .into_iter()
        .collect();
    let backend = KubeBackend::connect(&config, dir.path().join("kube"))
        .await
        .unwrap();
    let jobs = backend.list_jobs().await.unwrap();
    for job in &jobs {
        println!(
            "{} {} {} on {} ({} GPUs, restart {})",
            job.job_id,
            job.state_raw,
            job.reason.as_deref().unwrap_or("-"),
            job.nodes.join(","),
            job.gpus,
            job.restart_count
        );
        assert!(
            [
                "job/",
                "pytorchjob/",
                "rayjob/",
                "jobset/",
                "trainjob/",
                "raycluster/"
            ]
            .iter()
            .any(|kind| job.job_id.starts_with(kind)),
            "{}",
            job.job_id
        );
    }
    for job in &jobs {
        let capacity = backend
            .usable_nodes(&job.job_id, &job.spec)
            .await
            .unwrap()
            .unwrap_or_default();
        println!(
            "{}: {} nodes can take it now, {} fit it",
            job.job_id,
            capacity.now.len(),
            capacity.fitting.len()
        );
    }
    println!("{} workloads opted in", jobs.len());
}
