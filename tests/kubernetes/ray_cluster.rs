//! A RayCluster run on its own (a Ray Serve or interactive cluster, without a RayJob) is watched for
//! the loss of its head, which takes the GCS and every actor with it.

use runguard_engine::model::{ActionKind, SpecChange, WorkflowStatus};
use serde_json::json;

use super::{Cluster, has_workflow, log_of, workflow};
use crate::kube_fake;

const CLUSTER: &str = "ray-tune-sweep-raycluster-7xk2f";
const HEAD: &str = "ray-tune-sweep-raycluster-7xk2f-head-c9x2p";
const WORKER: &str = "ray-tune-sweep-raycluster-7xk2f-gpu-group-worker-8h4tq";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standalone_raycluster_whose_head_dies_is_proposed_again_with_gcs_fault_tolerance() {
    let mut cluster = Cluster::healthy(&[], |_| {}).await;
    // The fixture's cluster without its RayJob: opted in itself, its worker running.
    for mut object in kube_fake::fixture("rayjob.json") {
        match object["kind"].as_str() {
            Some("RayJob") => continue,
            Some("RayCluster") => {
                if let Some(metadata) = object["metadata"].as_object_mut() {
                    metadata.remove("ownerReferences");
                }
                object["metadata"]["labels"]["runguard.io/enabled"] = json!("true");
                object["status"]["state"] = json!("ready");
            }
            Some("Pod") if object["metadata"]["name"] == WORKER => {
                object["status"]["phase"] = json!("Running");
                object["status"]["containerStatuses"][0]["state"] =
                    json!({"running": {"startedAt": "2025-06-10T09:21:00Z"}});
            }
            _ => {}
        }
        cluster.kube.apply(object);
    }
    let status = cluster
        .until("enrolled and running", |status| {
            has_workflow(status, CLUSTER)
                && workflow(status, CLUSTER).attempts[0].state
                    == runguard_engine::model::JobState::Running
        })
        .await;
    let view = workflow(&status, CLUSTER);
    assert_eq!(view.attempts[0].job_id, format!("raycluster/ml/{CLUSTER}"));
    assert_eq!(view.workflow.spec.nodes, 2, "the head and one worker");

    cluster.kube.append_log(
        "ml",
        WORKER,
        "ray-worker",
        "[2025-06-10 09:30:00,000 E 41 41] gcs_rpc_client.h:179: Failed to connect to GCS within 60 seconds. GCS may have been killed.",
    );
    cluster
        .until("the worker's line", |status| {
            log_of(workflow(status, CLUSTER), 0).contains("Failed to connect to GCS")
        })
        .await;
    // The head's container exits; KubeRay has not replaced it yet.
    cluster.kube.modify("Pod", "ml", HEAD, |pod| {
        pod["status"]["phase"] = json!("Failed");
        pod["status"]["containerStatuses"][0]["state"] = json!({"terminated": {
            "reason": "Error", "exitCode": 1, "finishedAt": "2025-06-10T09:30:30Z"}});
    });
    let status = cluster
        .until("the proposal", |status| {
            !workflow(status, CLUSTER).actions.is_empty()
        })
        .await;
    let view = workflow(&status, CLUSTER);
    assert_eq!(view.attempts[0].state_raw, "HeadPodFailed", "{view:#?}");
    assert_eq!(
        view.attributions[0].category,
        "ray_cluster",
        "{view:#?}\n{}",
        log_of(view, 0)
    );
    assert_eq!(view.workflow.status, WorkflowStatus::Recovering);
    let recreate = &view.actions[0];
    assert_eq!(recreate.kind, ActionKind::Recreate, "{:#?}", view.actions);
    assert_eq!(
        recreate.params.changes,
        vec![SpecChange::RayGcsFaultTolerance]
    );
    let command = recreate.command.clone().unwrap_or_default();
    assert!(
        command.contains(&format!(
            "DELETE /apis/ray.io/v1/namespaces/ml/rayclusters/{CLUSTER}"
        )),
        "{command}"
    );
    assert!(
        command.contains("+") && command.contains("ray.io/ft-enabled"),
        "{command}"
    );
    assert!(cluster.writes().is_empty(), "nothing before the approval");
}
