//! Proactive checkpoints on Kubernetes: a node health tool reports a GPU of a running PyTorchJob's
//! node at its thermal limit (a node condition, as NVSentinel sets it); runguard asks the job to save
//! now — `kill -s USR1 1` in the training container of each pod, through pods/exec over a WebSocket
//! — and once the job has saved, re-creates it off the hot node, to resume from that save.

use runguard_engine::alert::payload::{ActionInfo, action_line};
use runguard_engine::model::{ActionKind, ActionState};
use serde_json::json;

use super::{Cluster, has_workflow, log_of, run_pytorchjob, workflow, write_summary};

const JOB: &str = "llama-pretrain";
const PODS: [&str; 3] = [
    "llama-pretrain-master-0",
    "llama-pretrain-worker-0",
    "llama-pretrain-worker-1",
];
const HOT: &str = "gpu-spot-1";

/// The training process's lines when it saves on SIGUSR1 (Megatron's words).
const SAVING: &str = "saving checkpoint at iteration 120 to /checkpoints/llama (SIGUSR1)";
const SAVED: &str =
    "successfully saved checkpoint from iteration 120 to /checkpoints/llama [ t 1/1, p 1/1 ]";
const LOADED: &str =
    "successfully loaded checkpoint from /checkpoints/llama [ t 1/1, p 1/1 ] at iteration 120";

/// The enrolled PyTorchJob writing its progress, with `whitelist`.
async fn training(whitelist: Vec<ActionKind>) -> Cluster {
    let mut cluster = Cluster::healthy(&["pytorchjob-running.json"], |config| {
        config.recovery.whitelist = whitelist;
        // Long enough that the restart follows the save, not the end of the wait.
        config.ledger.checkpoint_wait_secs = 600;
    })
    .await;
    cluster
        .until("enrolled", |status| has_workflow(status, JOB))
        .await;
    for pod in PODS {
        cluster.kube.append_log(
            "ml",
            pod,
            "pytorch",
            &format!("iteration 119/1000 | elapsed time per iteration (ms): 1000.0 | {pod}"),
        );
    }
    cluster
        .until("the progress lines", |status| {
            log_of(workflow(status, JOB), 0)
                .matches("iteration 119/")
                .count()
                == 3
        })
        .await;
    cluster
}

/// NVSentinel's thermal watch finds a GPU of the hot node throttled for heat.
fn heat_up(cluster: &Cluster) {
    cluster.kube.modify("Node", "", HOT, |node| {
        node["status"]["conditions"]
            .as_array_mut()
            .unwrap()
            .push(json!({
                "type": "GpuThermalWatch", "status": "True", "reason": "GpuThermalWatchIsNotHealthy",
                "message": "ErrorCode:DCGM_FR_CLOCK_THROTTLE_THERMAL GPU 3 clocks are throttled: thermal violation at 91 C. Recommended Action=NONE;",
                "lastHeartbeatTime": chrono::Utc::now().to_rfc3339(),
                "lastTransitionTime": chrono::Utc::now().to_rfc3339(),
            }));
    });
}

fn exec_requests(cluster: &Cluster) -> Vec<crate::kube_fake::RecordedRequest> {
    cluster
        .kube
        .requests()
        .into_iter()
        .filter(|request| request.path.ends_with("/exec"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_gpu_makes_the_pods_save_on_sigusr1_and_the_job_restart_off_the_node_from_that_save()
{
    let mut cluster = training(vec![ActionKind::Requeue, ActionKind::CheckpointNow]).await;
    // The training process saves when its main process gets SIGUSR1; rank 0 says so.
    cluster.kube.on_signal(|signal, log| {
        if signal.signal == "USR1" && signal.pod == PODS[0] {
            log.append(SAVING);
            log.append(SAVED);
        }
    });
    heat_up(&cluster);
    let status = cluster
        .until("the checkpoint request", |status| {
            workflow(status, JOB)
                .actions
                .iter()
                .any(|a| a.kind == ActionKind::CheckpointNow && a.state == ActionState::Done)
        })
        .await;
    let request = workflow(&status, JOB)
        .actions
        .iter()
        .find(|a| a.kind == ActionKind::CheckpointNow)
        .cloned()
        .unwrap();
    assert_eq!(request.params.node.as_deref(), Some(HOT));
    let result = request.result.unwrap_or_default();
    assert!(
        result.contains("sent SIGUSR1 to the main process (PID 1) of container pytorch in 3 pods"),
        "{result}"
    );
    // Each pod's main process got it, through one exec each: `kill -s USR1 1` as argv, over a
    // WebSocket with the channel subprotocols.
    let mut received: Vec<(String, String, String)> = cluster
        .kube
        .signals_received()
        .into_iter()
        .map(|s| (s.pod, s.container, s.signal))
        .collect();
    received.sort();
    assert_eq!(
        received,
        PODS.iter()
            .map(|pod| (pod.to_string(), "pytorch".to_string(), "USR1".to_string()))
            .collect::<Vec<_>>()
    );
    let execs = exec_requests(&cluster);
    assert_eq!(execs.len(), 3, "{execs:#?}");
    for exec in &execs {
        let command: Vec<&str> = exec
            .query
            .iter()
            .filter(|(key, _)| key == "command")
            .map(|(_, value)| value.as_str())
            .collect();
        assert_eq!(command, ["kill", "-s", "USR1", "1"], "{exec:?}");
        assert_eq!(exec.query_value("container"), Some("pytorch"));
        assert_eq!(exec.upgrade.as_deref(), Some("websocket"));
        assert!(
            exec.protocols
                .as_deref()
                .is_some_and(|offered| offered.contains("v5.channel.k8s.io")),
            "{exec:?}"
        );
    }

    // Once the save is read, the job is re-created off the hot node.
    let status = cluster
        .until("the restart off the hot node", |status| {
            workflow(status, JOB)
                .actions
                .iter()
                .any(|a| a.kind == ActionKind::Requeue && a.state == ActionState::Done)
        })
        .await;
    let view = workflow(&status, JOB);
    let requeue = view
        .actions
        .iter()
        .find(|a| a.kind == ActionKind::Requeue)
        .unwrap();
    assert_eq!(requeue.params.exclude_nodes, [HOT]);
    assert!(
        requeue.why.contains("it saved a checkpoint"),
        "{}",
        requeue.why
    );
    let checkpoints = cluster
        .rig
        .store()
        .db()
        .checkpoints(view.workflow.id)
        .unwrap();
    assert!(
        checkpoints
            .iter()
            .any(|c| c.attempt_index == 0 && c.iteration == 120),
        "{checkpoints:?}"
    );
    let writes = cluster.writes();
    assert_eq!(
        write_summary(&writes),
        vec![
            "DELETE /apis/kubeflow.org/v1/namespaces/ml/pytorchjobs/llama-pretrain",
            "POST /apis/kubeflow.org/v1/namespaces/ml/pytorchjobs",
        ],
        "the signal was no write; the restart re-created the job and nothing else"
    );
    let created = writes[1].body.clone().unwrap_or_default();
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

    // The operator starts the new incarnation where the scheduler lets it (it would take the
    // nodes the job ran on), and rank 0 resumes from the save.
    let nodes = run_pytorchjob(
        &cluster.kube,
        "ml",
        JOB,
        &["gpu-node-1", "gpu-node-2", HOT, "gpu-node-5"],
    );
    assert_eq!(nodes, ["gpu-node-1", "gpu-node-2", "gpu-node-5"]);
    cluster
        .until("the new attempt running", |status| {
            let view = workflow(status, JOB);
            view.attempts.len() == 2 && view.attempts[1].nodes.len() == 3
        })
        .await;
    cluster.kube.append_log("ml", PODS[0], "pytorch", LOADED);
    let status = cluster
        .until("the resume", |status| {
            log_of(workflow(status, JOB), 1).contains("successfully loaded checkpoint")
        })
        .await;
    let view = workflow(&status, JOB);
    let resumed = &view.attempts[1];
    assert!(
        !resumed.nodes.iter().any(|node| node == HOT),
        "{resumed:#?}"
    );
    assert_eq!(resumed.excluded_nodes, [HOT]);
    assert_eq!(view.last_checkpoint_iteration, Some(120));
    assert!(
        log_of(view, 1).contains("at iteration 120"),
        "{}",
        log_of(view, 1)
    );
    assert_eq!(
        cluster.kube.signals_received().len(),
        3,
        "asked once, not again for the new attempt"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_whitelisted_the_signal_is_what_runguard_would_have_done_and_nothing_is_sent() {
    let mut cluster = training(vec![ActionKind::Requeue]).await;
    heat_up(&cluster);
    let status = cluster
        .until("the proposed checkpoint request", |status| {
            workflow(status, JOB)
                .actions
                .iter()
                .any(|a| a.kind == ActionKind::CheckpointNow)
        })
        .await;
    let request = workflow(&status, JOB)
        .actions
        .iter()
        .find(|a| a.kind == ActionKind::CheckpointNow)
        .cloned()
        .unwrap();
    assert_eq!(request.state, ActionState::Proposed);
    assert!(!request.permitted);
    let command = request.command.clone().unwrap_or_default();
    assert_eq!(
        command,
        PODS.iter()
            .map(|pod| format!("kubectl exec -n ml {pod} -c pytorch -- kill -s USR1 1"))
            .collect::<Vec<_>>()
            .join("; "),
        "the kubectl commands, one a pod"
    );
    // A few more passes: nothing runs without approval.
    for _ in 0..5 {
        cluster.engine.tick().await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // As alerts and reports word it.
    let line = action_line(&ActionInfo {
        id: request.id,
        kind: request.kind.as_str().to_string(),
        state: request.state,
        permitted: request.permitted,
        why: request.why.clone(),
        command,
        result: request.result.clone(),
    });
    assert!(
        line.starts_with(
            "not permitted, would have run: kubectl exec -n ml llama-pretrain-master-0"
        ),
        "{line}"
    );
    assert!(cluster.kube.signals_received().is_empty());
    assert!(exec_requests(&cluster).is_empty());
    assert!(
        cluster.writes().is_empty(),
        "{:?}",
        write_summary(&cluster.writes())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_refused_by_rbac_fails_the_request_with_the_kubectl_commands() {
    let mut cluster = training(vec![ActionKind::Requeue, ActionKind::CheckpointNow]).await;
    cluster.kube.forbid("create", "pods/exec");
    heat_up(&cluster);
    let status = cluster
        .until("the refused checkpoint request", |status| {
            workflow(status, JOB)
                .actions
                .iter()
                .any(|a| a.kind == ActionKind::CheckpointNow && a.state == ActionState::Failed)
        })
        .await;
    let request = workflow(&status, JOB)
        .actions
        .iter()
        .find(|a| a.kind == ActionKind::CheckpointNow)
        .cloned()
        .unwrap();
    let result = request.result.unwrap_or_default();
    assert!(
        result.contains(
            "would have done `kubectl exec -n ml llama-pretrain-master-0 -c pytorch -- kill -s USR1 1;"
        ),
        "{result}"
    );
    assert!(
        result.contains("cannot create resource \"pods/exec\""),
        "{result}"
    );
    assert!(cluster.kube.signals_received().is_empty());
}
