//! Kueue-queued workloads: restarted by suspending them when a resume carries everything the restart
//! changes, so that Kueue admits them again; re-created (keeping the queue label) otherwise.

use runguard_engine::model::{ActionKind, ActionState, AnomalyKind};
use serde_json::json;

use super::{Cluster, has_workflow, workflow, write_summary};
use crate::kube_fake;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_queued_jobset_is_suspended_for_kueue_to_admit_again_not_re_created() {
    let mut cluster = Cluster::on_gpu_pool(&[], |config| {
        config.recovery.whitelist = vec![ActionKind::Requeue, ActionKind::Cancel];
        config.engine.heartbeat_timeout_secs = 3;
        // The fixture's pods write nothing at all: a run silent since its start is hung after the
        // start-up bound, set as short as the heartbeat here.
        config.detect.setup_timeout_secs = 3;
    })
    .await;
    // The TrainJob fixture's JobSet run on its own, opted in and queued in Kueue.
    for mut object in kube_fake::fixture("trainjob-running.json") {
        match object["kind"].as_str() {
            Some("TrainJob" | "Workload") => continue,
            Some("JobSet") => {
                if let Some(metadata) = object["metadata"].as_object_mut() {
                    metadata.remove("ownerReferences");
                }
                object["metadata"]["labels"]["runguard.io/enabled"] = json!("true");
            }
            _ => {}
        }
        cluster.kube.apply(object);
    }
    cluster
        .until("enrolled", |status| {
            has_workflow(status, "qwen-sft")
                && workflow(status, "qwen-sft").attempts[0].job_id == "jobset/ml/qwen-sft"
        })
        .await;
    // Its ranks stop writing: a hang names no node.
    let status = cluster
        .until("the restart", |status| {
            workflow(status, "qwen-sft")
                .actions
                .iter()
                .any(|a| a.kind == ActionKind::Requeue && a.state == ActionState::Done)
        })
        .await;
    let view = workflow(&status, "qwen-sft");
    assert_eq!(view.anomalies[0].kind, AnomalyKind::Hang, "{view:#?}");
    let writes = cluster.writes();
    assert_eq!(
        write_summary(&writes),
        vec!["PATCH /apis/jobset.x-k8s.io/v1alpha2/namespaces/ml/jobsets/qwen-sft"],
        "suspended, not deleted"
    );
    let patch = writes[0].body.clone().unwrap_or_default();
    assert_eq!(patch["spec"]["suspend"], true, "{patch:#}");
    assert_eq!(
        patch["metadata"]["annotations"]["runguard.io/restart-count"],
        "1"
    );
    let jobset = cluster
        .kube
        .get("JobSet", "ml", "qwen-sft")
        .unwrap_or_default();
    assert_eq!(
        jobset["metadata"]["labels"]["kueue.x-k8s.io/queue-name"],
        "research"
    );
    assert_eq!(
        jobset["spec"]["network"]["subdomain"], "qwen-sft",
        "the rest of the spec is the user's"
    );
    let done = view
        .actions
        .iter()
        .find(|a| a.kind == ActionKind::Requeue)
        .and_then(|a| a.result.clone())
        .unwrap_or_default();
    assert!(done.contains("Kueue admits it again"), "{done}");
    // The restart is the workflow's next attempt.
    cluster
        .until("the next attempt", |status| {
            workflow(status, "qwen-sft").attempts.len() == 2
        })
        .await;
}
