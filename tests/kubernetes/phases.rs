//! Multiphase workflows on Kubernetes: each phase's manifest is created with runguard's enrolment
//! label and tag once the phase before it completed, and followed like any enrolled workload.

use runguard_engine::model::{ActionKind, BackendKind, PhaseJob, PhaseSpec, PhaseState};
use runguard_engine::phases::{WorkflowFile, record};
use serde_json::json;

use super::Cluster;

fn manifest_phase(dir: &std::path::Path, name: &str) -> PhaseSpec {
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(
        &path,
        format!(
            "apiVersion: batch/v1\nkind: Job\nmetadata:\n  name: {name}\nspec:\n  template:\n\
             \x20   spec:\n      restartPolicy: Never\n      containers:\n      - name: train\n\
             \x20       image: trainer:1\n"
        ),
    )
    .unwrap();
    PhaseSpec {
        name: name.into(),
        job: PhaseJob::Manifest { path },
        nodes: None,
        min_nodes: None,
        max_failures: None,
        checkpoint_dir: Some(dir.join(format!("ckpt/{name}"))),
        work_dir: None,
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn each_phase_s_manifest_is_created_enrolled_once_the_previous_phase_completed() {
    let mut cluster = Cluster::healthy(&[], |config| {
        config.recovery.whitelist = vec![ActionKind::Requeue, ActionKind::Submit];
    })
    .await;
    let dir = cluster.rig.path().to_path_buf();
    let file = WorkflowFile {
        name: "llama".into(),
        phases: vec![
            manifest_phase(&dir, "pretrain"),
            manifest_phase(&dir, "finetune"),
        ],
    };
    let now = cluster.rig.now();
    let id = cluster
        .rig
        .store()
        .write(|db| record::store_multiphase(db, &file, BackendKind::Kubernetes, None, now))
        .unwrap();
    let phases = |cluster: &Cluster| cluster.rig.store().db().phases(id).unwrap();

    cluster
        .until("the first phase's workload followed", |status| {
            status
                .workflows
                .iter()
                .any(|w| w.workflow.name == "llama.pretrain" && !w.attempts.is_empty())
        })
        .await;
    let created = cluster.kube.get("Job", "default", "pretrain").unwrap();
    assert_eq!(created["metadata"]["labels"]["runguard.io/enabled"], "true");
    assert!(
        created["metadata"]["annotations"]["runguard.io/tag"]
            .as_str()
            .unwrap()
            .starts_with("runguard:workflow=")
    );
    assert_eq!(
        created["spec"]["template"]["spec"]["containers"][0]["env"][1]["name"],
        "RUNGUARD_CHECKPOINT_DIR"
    );
    assert_eq!(phases(&cluster)[0].state, PhaseState::Running);
    assert_eq!(
        phases(&cluster)[0].job_id.as_deref(),
        Some("job/default/pretrain")
    );
    assert!(cluster.kube.get("Job", "default", "finetune").is_none());

    cluster.kube.modify("Job", "default", "pretrain", |job| {
        job["status"] = json!({"conditions": [{"type": "Complete", "status": "True"}],
                               "succeeded": 1});
    });
    cluster
        .until("the second phase created", |status| {
            status
                .workflows
                .iter()
                .any(|w| w.workflow.name == "llama.finetune" && !w.attempts.is_empty())
        })
        .await;
    assert_eq!(phases(&cluster)[0].state, PhaseState::Succeeded);
    assert!(cluster.kube.get("Job", "default", "finetune").is_some());
    let creations = cluster
        .writes()
        .into_iter()
        .filter(|request| request.method == "POST" && request.path.contains("/jobs"))
        .count();
    assert_eq!(creations, 2, "{:#?}", cluster.writes());
}
