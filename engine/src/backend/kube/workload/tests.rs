//! Tests of the workload readers on real-shaped fixtures.

use super::*;
use crate::model::JobState;

/// The objects of a fixture file of `tests/fixtures/kube/`.
fn fixture(text: &str) -> Vec<Value> {
    let document: Value = serde_json::from_str(text).unwrap_or_default();
    match document.get("items").and_then(Value::as_array) {
        Some(items) => items.clone(),
        None => vec![document],
    }
}

fn split(objects: Vec<Value>) -> (Value, Vec<Value>) {
    let (workloads, pods): (Vec<Value>, Vec<Value>) = objects
        .into_iter()
        .partition(|object| object["kind"] != "Pod");
    (workloads[0].clone(), pods)
}

fn nodes() -> Vec<Value> {
    fixture(include_str!(
        "../../../../../tests/fixtures/kube/nodes.json"
    ))
}

#[test]
fn a_running_pytorchjob_is_its_pods_in_rank_order() {
    let (job, pods) = split(fixture(include_str!(
        "../../../../../tests/fixtures/kube/pytorchjob-running.json"
    )));
    let mine = pods_of(WorkloadKind::PyTorchJob, &job, &PodIndex::new(&pods));
    let names: Vec<&str> = mine
        .iter()
        .filter_map(|pod| str_at(pod, "/metadata/name"))
        .collect();
    assert_eq!(
        names,
        [
            "llama-pretrain-master-0",
            "llama-pretrain-worker-0",
            "llama-pretrain-worker-1"
        ]
    );
    let snapshot = snapshot(WorkloadKind::PyTorchJob, &job, &mine, &nodes(), None, None)
        .unwrap_or_else(|| unreachable!("a named workload"));
    assert_eq!(snapshot.job_id, "pytorchjob/ml/llama-pretrain");
    assert_eq!(snapshot.state, JobState::Running);
    assert_eq!(snapshot.nodes, ["gpu-node-1", "gpu-node-2", "gpu-spot-1"]);
    assert_eq!(snapshot.spec.nodes, 3);
    assert_eq!(snapshot.spec.gpus_per_node, 8);
    assert_eq!(snapshot.gpus, 24);
    assert_eq!(snapshot.restart_count, 0);
    assert!(enrolled(&job));
}

#[test]
fn a_pod_of_an_earlier_incarnation_with_the_same_name_is_not_this_one_s() {
    let (mut job, pods) = split(fixture(include_str!(
        "../../../../../tests/fixtures/kube/pytorchjob-running.json"
    )));
    job["metadata"]["uid"] = Value::from("a-new-uid");
    assert!(pods_of(WorkloadKind::PyTorchJob, &job, &PodIndex::new(&pods)).is_empty());
}

#[test]
fn an_oom_killed_worker_is_a_failure_with_its_evidence() {
    let (job, pods) = split(fixture(include_str!(
        "../../../../../tests/fixtures/kube/pytorchjob-failed-oom.json"
    )));
    let mine = pods_of(WorkloadKind::PyTorchJob, &job, &PodIndex::new(&pods));
    let snapshot = snapshot(WorkloadKind::PyTorchJob, &job, &mine, &nodes(), None, None)
        .unwrap_or_else(|| unreachable!("a named workload"));
    assert_eq!(snapshot.state, JobState::Failed);
    assert_eq!(
        snapshot.nodes,
        ["gpu-node-5", "gpu-node-5"],
        "one entry per pod"
    );
    let lines: Vec<String> = evidence(
        WorkloadKind::PyTorchJob,
        &job,
        &mine,
        &nodes(),
        &EventIndex::default(),
    )
    .into_iter()
    .map(|line| line.text)
    .collect();
    assert!(
        lines.iter().any(|line| line.starts_with(
            "kubernetes: Warning OOMKilled pod/bert-finetune-worker-0: container pytorch terminated with exit code 137"
        )),
        "{lines:#?}"
    );
    assert!(
        lines
            .iter()
            .any(|line| line.contains(" pytorchjob/bert-finetune: ")),
        "{lines:#?}"
    );
}

#[test]
fn an_image_pull_in_back_off_is_a_failure_and_a_job_s_own_pod_is_found() {
    let (job, pods) = split(fixture(include_str!(
        "../../../../../tests/fixtures/kube/batch-job.json"
    )));
    let mine = pods_of(WorkloadKind::Job, &job, &PodIndex::new(&pods));
    assert_eq!(mine.len(), 1);
    let snapshot = snapshot(WorkloadKind::Job, &job, &mine, &nodes(), None, None)
        .unwrap_or_else(|| unreachable!("a named workload"));
    assert_eq!(snapshot.state, JobState::Failed);
    assert_eq!(snapshot.state_raw, "ImagePullBackOff");
}

#[test]
fn a_rayjob_is_its_cluster_s_pods_head_first() {
    let objects = fixture(include_str!(
        "../../../../../tests/fixtures/kube/rayjob.json"
    ));
    let job = objects
        .iter()
        .find(|object| object["kind"] == "RayJob")
        .cloned()
        .unwrap_or_default();
    let pods: Vec<Value> = objects
        .into_iter()
        .filter(|object| object["kind"] == "Pod")
        .collect();
    let mine = pods_of(WorkloadKind::RayJob, &job, &PodIndex::new(&pods));
    assert_eq!(
        mine.first().and_then(|pod| label(pod, "ray.io/node-type")),
        Some("head")
    );
    let snapshot = snapshot(WorkloadKind::RayJob, &job, &mine, &nodes(), None, None)
        .unwrap_or_else(|| unreachable!("a named workload"));
    assert_eq!(snapshot.state, JobState::Running);
}

#[test]
fn references_parse_with_or_without_a_namespace() {
    let reference = WorkloadRef::parse("PyTorchJobs/llama", "ml").unwrap_or_else(|| unreachable!());
    assert_eq!(reference.id(), "pytorchjob/ml/llama");
    assert_eq!(
        WorkloadRef::parse("rayjob.ray.io/research/tune", "default").map(|r| r.id()),
        Some("rayjob/research/tune".to_string())
    );
    assert!(WorkloadRef::parse("deployment/web", "default").is_none());
    assert!(WorkloadRef::parse("job/../etc", "default").is_none());
}

#[test]
fn a_trainjob_is_its_jobset_s_pods_in_completion_order_with_its_trainer_s_size() {
    let objects = fixture(include_str!(
        "../../../../../tests/fixtures/kube/trainjob-running.json"
    ));
    let of_kind = |kind: &str| {
        objects
            .iter()
            .filter(|object| object["kind"] == kind)
            .cloned()
            .collect::<Vec<Value>>()
    };
    let (trainjob, jobset, pods) = (
        of_kind("TrainJob")[0].clone(),
        of_kind("JobSet")[0].clone(),
        of_kind("Pod"),
    );
    let index = PodIndex::new(&pods);
    let gke = fixture(include_str!(
        "../../../../../tests/fixtures/kube/gke-gpu-pool-nodes.json"
    ));
    for (kind, workload) in [
        (WorkloadKind::TrainJob, &trainjob),
        (WorkloadKind::JobSet, &jobset),
    ] {
        let mine = pods_of(kind, workload, &index);
        let nodes: Vec<&str> = mine
            .iter()
            .filter_map(|pod| str_at(pod, "/spec/nodeName"))
            .collect();
        assert_eq!(
            nodes,
            ["gpu-node-1", "gpu-node-2", "gpu-node-3"],
            "{kind:?}"
        );
        let snapshot = snapshot(kind, workload, &mine, &gke, None, None)
            .unwrap_or_else(|| unreachable!("a named workload"));
        assert_eq!(snapshot.state, JobState::Running, "{kind:?}");
        assert_eq!(snapshot.spec.nodes, 3, "{kind:?}");
        assert_eq!(snapshot.spec.gpus_per_node, 8, "{kind:?}");
        assert_eq!(snapshot.gpus, 24, "{kind:?}");
    }
    // The pods of an earlier JobSet of the same name are not this one's.
    let mut other = jobset.clone();
    other["metadata"]["uid"] = Value::from("another-incarnation");
    assert!(pods_of(WorkloadKind::JobSet, &other, &index).is_empty());
    // A failed JobSet says why, as evidence does.
    let mut failed = jobset;
    failed["status"]["conditions"] = serde_json::json!([{
        "type": "Failed", "status": "True", "reason": "FailedJobs",
        "message": "jobset failed due to reaching max number of restarts",
    }]);
    let lines = evidence(
        WorkloadKind::JobSet,
        &failed,
        &[],
        &gke,
        &EventIndex::default(),
    );
    assert!(
        lines.iter().any(|line| line.text.contains("FailedJobs")
            && line.text.contains("reaching max number of restarts")),
        "{lines:?}"
    );
}

#[test]
fn a_job_whose_pods_all_wait_reads_as_pending_and_nothing_of_it_has_run() {
    let job = serde_json::json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "eval", "namespace": "ml", "uid": "u1"},
        "spec": {"parallelism": 2, "template": {"spec": {
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": HOSTNAME_LABEL, "operator": "NotIn", "values": ["gpu-node-5"]}]}]}}},
            "containers": [{"name": "eval"}]}}},
        // The Job controller counts pending pods as active.
        "status": {"active": 2, "startTime": "2026-01-05T08:00:00Z"},
    });
    let pod = |name: &str, status: Value| {
        serde_json::json!({
            "metadata": {"name": name, "namespace": "ml", "labels": {"job-name": "eval"},
                         "ownerReferences": [{"kind": "Job", "uid": "u1"}]},
            "status": status,
        })
    };
    let waiting = vec![
        pod(
            "eval-0",
            serde_json::json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}),
        ),
        pod(
            "eval-1",
            serde_json::json!({"phase": "Pending", "containerStatuses": [
            {"name": "eval", "restartCount": 0, "state": {"waiting": {"reason": "ContainerCreating"}}}]}),
        ),
    ];
    let mine = pods_of(WorkloadKind::Job, &job, &PodIndex::new(&waiting));
    assert_eq!(mine.len(), 2);
    let pending = snapshot(WorkloadKind::Job, &job, &mine, &[], None, None)
        .unwrap_or_else(|| unreachable!("a named workload"));
    assert_eq!(pending.state, JobState::Pending);
    assert_eq!(pending.reason.as_deref(), Some("Unschedulable"));
    assert_eq!(pending.excluded_nodes, ["gpu-node-5"]);
    assert_eq!(run_evidence(WorkloadKind::Job, &job, &mine), None);

    // One container running is a start: the Job runs, and it has run.
    let started = vec![
        waiting[0].clone(),
        pod(
            "eval-1",
            serde_json::json!({"phase": "Running", "containerStatuses": [
            {"name": "eval", "state": {"running": {"startedAt": "2026-01-05T08:01:00Z"}}}]}),
        ),
    ];
    let mine = pods_of(WorkloadKind::Job, &job, &PodIndex::new(&started));
    let running = snapshot(WorkloadKind::Job, &job, &mine, &[], None, None)
        .unwrap_or_else(|| unreachable!("a named workload"));
    assert_eq!(running.state, JobState::Running);
    assert_eq!(
        run_evidence(WorkloadKind::Job, &job, &mine).as_deref(),
        Some("pod eval-1 has started")
    );
}

#[test]
fn what_a_workload_says_of_its_past_runs_counts_as_having_run() {
    let ran = |kind, workload: Value| run_evidence(kind, &workload, &[]);
    // A Job resumed once and suspended again (Kueue's preemption) ran, its pods gone.
    assert!(
        ran(
            WorkloadKind::Job,
            serde_json::json!({"spec": {"suspend": true}, "status": {"startTime": "2026-01-05T08:00:00Z"}})
        )
        .is_some()
    );
    assert_eq!(
        ran(
            WorkloadKind::Job,
            serde_json::json!({"spec": {"suspend": true}, "status": {}})
        ),
        None,
        "created suspended, never resumed"
    );
    assert!(
        ran(
            WorkloadKind::Job,
            serde_json::json!({"status": {"failed": 1}})
        )
        .is_some()
    );
    assert!(
        ran(
            WorkloadKind::PyTorchJob,
            serde_json::json!({"status": {"conditions": [
                {"type": "Created", "status": "True"}, {"type": "Running", "status": "False"}]}})
        )
        .is_some(),
        "once running, the condition stays"
    );
    assert_eq!(
        ran(
            WorkloadKind::PyTorchJob,
            serde_json::json!({"status": {"conditions": [
                {"type": "Created", "status": "True"}, {"type": "Suspended", "status": "True"}]}})
        ),
        None
    );
    assert!(
        ran(
            WorkloadKind::JobSet,
            serde_json::json!({"status": {"restarts": 1}})
        )
        .is_some()
    );
}
