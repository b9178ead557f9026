//! Attribution across jobs through the engine: a node that fails several jobs, and a job blocked by a
//! failed upstream dependency.

use std::time::Duration;

use runguard_engine::model::AnomalyKind;

use crate::support::{EngineRig, job};

#[tokio::test]
async fn three_jobs_failing_on_one_node_blame_the_node() {
    let rig = EngineRig::default();
    rig.backend.add([
        job("11")
            .running_on(["node-01", "node-09"])
            .log(rig.path().join("11.log")),
        job("12")
            .running_on(["node-09", "node-02"])
            .log(rig.path().join("12.log")),
        job("13")
            .running_on(["node-03", "node-09"])
            .log(rig.path().join("13.log")),
    ]);
    let mut engine = rig.engine();
    engine.tick().await.unwrap();
    for id in ["11", "12", "13"] {
        rig.clock.advance(Duration::from_secs(30));
        rig.backend.fail(id);
        engine.tick().await.unwrap();
    }
    let status = rig.status();
    let third = status
        .workflows
        .iter()
        .find(|w| w.workflow.name == "train-13")
        .unwrap();
    let attribution = &third.attributions[0];
    assert_eq!(
        attribution.culprit.node.as_deref(),
        Some("node-09"),
        "{attribution:?}"
    );
    assert_eq!(attribution.category, "node_failure");
    assert!(
        attribution
            .evidence
            .iter()
            .any(|l| l.starts_with("correlated:"))
    );
    // The first job alone had nothing to correlate with.
    let first = status
        .workflows
        .iter()
        .find(|w| w.workflow.name == "train-11")
        .unwrap();
    assert_eq!(first.attributions[0].category, "unknown");
}

#[tokio::test]
async fn a_job_blocked_by_a_failed_upstream_job_is_escalated_with_the_upstream_cause() {
    let rig = EngineRig::default();
    std::fs::write(
        rig.path().join("76.log"),
        "3: [2026-01-05 08:01:00] [rank3]:[E0105 08:01:00.1 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600050 milliseconds before timing out.\n",
    )
    .unwrap();
    rig.backend.add([
        job("76")
            .running_on(["node-04"])
            .log(rig.path().join("76.log")),
        job("77")
            .pending("DependencyNeverSatisfied")
            .after("76")
            .log(rig.path().join("77.log")),
    ]);
    let mut engine = rig.engine();
    engine.tick().await.unwrap();
    rig.backend.fail("76");
    rig.clock.advance(Duration::from_secs(5));
    engine.tick().await.unwrap();
    engine.tick().await.unwrap();
    let status = rig.status();
    let downstream = status
        .workflows
        .iter()
        .find(|w| w.workflow.name == "train-77")
        .unwrap();
    let anomaly = downstream
        .anomalies
        .iter()
        .find(|a| a.kind == AnomalyKind::StuckPending)
        .expect("escalated");
    assert!(
        anomaly.summary.contains("waits on job 76"),
        "{}",
        anomaly.summary
    );
    assert!(
        anomaly.summary.contains("nccl_timeout"),
        "{}",
        anomaly.summary
    );
}
