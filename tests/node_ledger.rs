//! The node ledger: what one job learned about a node protects every later job, and a node comes back
//! only after its health check, with exactly runguard's own marks undone.

use runguard_engine::model::{ActionKind, ActionState, NodeState};

use crate::support::backend::Call;
use crate::support::{EngineRig, append, job};

const XID_79: &str = "2026-01-05T08:00:40+00:00 n2 kernel: NVRM: Xid (PCI:0000:3a:00): 79, pid=4242, name=python, GPU has fallen off the bus.\n";

/// A rig whose nodes' kernel logs are `<dir>/<node>/kern.log`, with job 100 running on n1 and n2.
fn rig_with_job_on_n1_n2() -> EngineRig {
    let mut rig = EngineRig::default();
    for node in ["n1", "n2", "n3", "n4"] {
        std::fs::create_dir_all(rig.path().join(node)).unwrap();
        append(&rig.path().join(node).join("kern.log"), "");
    }
    rig.config.telemetry.node_log_pattern =
        Some(rig.path().join("{node}/kern.log").display().to_string());
    rig.backend.add([job("100").running_on(["n1", "n2"])]);
    rig
}

/// Job 100 loses a GPU to an Xid 79 on n2 and fails.
async fn xid_on_n2(rig: &EngineRig, engine: &mut runguard_engine::engine::Engine) {
    rig.step(engine, 5).await;
    append(&rig.path().join("n2/kern.log"), XID_79);
    rig.backend.fail("100");
    rig.step(engine, 5).await;
}

fn exclusions_set(rig: &EngineRig) -> Vec<(String, Vec<String>)> {
    rig.backend
        .calls()
        .into_iter()
        .filter_map(|recorded| match recorded.call {
            Call::SetExclusions { job_id, nodes } => Some((job_id, nodes)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_fatal_gpu_fault_keeps_the_node_out_of_every_later_job_without_drain_rights() {
    let rig = rig_with_job_on_n1_n2();
    let mut engine = rig.engine();
    xid_on_n2(&rig, &mut engine).await;
    assert_eq!(rig.backend.requeues(), [["n2"]]);
    let db = rig.store();
    assert_eq!(db.db().quarantined_nodes().unwrap(), ["n2"]);
    let record = db.db().node_record("n2").unwrap().unwrap();
    assert!(record.reason.contains("xid_79"), "{}", record.reason);
    // Drain is not whitelisted: proposed, never run.
    let actions = db.db().all_actions().unwrap();
    let drains: Vec<_> = actions
        .iter()
        .filter(|a| a.kind == ActionKind::DrainNode)
        .collect();
    assert!(!drains.is_empty());
    assert!(drains.iter().all(|a| a.state == ActionState::Proposed));
    assert!(rig.backend.drained().is_empty());

    // Job 200, enrolled afterwards, waits in the queue: n2 is added to its exclusions.
    rig.backend.add([job("200").pending("Resources")]);
    rig.step(&mut engine, 5).await;
    rig.step(&mut engine, 5).await;
    assert_eq!(
        exclusions_set(&rig),
        [("200".to_string(), vec!["n2".to_string()])]
    );
    // Once: the job now excludes it.
    for _ in 0..3 {
        rig.step(&mut engine, 5).await;
    }
    assert_eq!(exclusions_set(&rig).len(), 1);
    let added = rig.store().db().exclusions_of_node("n2").unwrap();
    assert_eq!(added.len(), 1);
    assert_eq!(added[0].job_id, "200");

    // Job 300 was scheduled onto n2 before runguard saw it: it is requeued off it at once.
    let mut started = job("300").running_on(["n2", "n3"]).build();
    started.start_time = Some(rig.now());
    rig.backend.add([started]);
    rig.step(&mut engine, 5).await;
    rig.step(&mut engine, 5).await;
    let requeues: Vec<(String, Vec<String>)> = rig
        .backend
        .calls()
        .into_iter()
        .filter_map(|recorded| match recorded.call {
            Call::Requeue { job_id, exclude } => Some((job_id, exclude)),
            _ => None,
        })
        .collect();
    assert_eq!(
        requeues.last(),
        Some(&("300".to_string(), vec!["n2".to_string()])),
        "{requeues:?}"
    );
    assert_eq!(requeues.iter().filter(|(job, _)| job == "300").count(), 1);
}

#[tokio::test]
async fn a_node_comes_back_after_its_health_check_with_only_runguard_s_own_marks_undone() {
    let mut rig = rig_with_job_on_n1_n2();
    rig.config.recovery.whitelist = vec![
        ActionKind::Requeue,
        ActionKind::DrainNode,
        ActionKind::ResumeNode,
        ActionKind::UpdateExclusions,
    ];
    // The check passes once the node's flag file exists (argv, no shell).
    let flags = rig.path().join("healthy");
    std::fs::create_dir_all(&flags).unwrap();
    rig.config.ledger.health_check = vec![
        "test".into(),
        "-e".into(),
        flags.join("{node}").display().to_string(),
    ];
    rig.config.ledger.first_check_secs = 60;
    let mut engine = rig.engine();
    xid_on_n2(&rig, &mut engine).await;
    rig.step(&mut engine, 5).await;
    let drained = rig.backend.drained();
    assert_eq!(drained.len(), 1, "{drained:?}");
    assert_eq!(drained[0].0, "n2");
    assert!(
        drained[0].1.starts_with("runguard: quarantined"),
        "{drained:?}"
    );
    // An administrator's own drain of another node.
    rig.backend.drain_by_admin("n3", "bad fan, ticket 4411");
    rig.backend.add([job("200").pending("Resources")]);
    rig.step(&mut engine, 5).await;
    rig.step(&mut engine, 5).await;
    assert_eq!(exclusions_set(&rig).len(), 1);

    // The first check (60 s after the quarantine) fails: still out, next check in 120 s.
    rig.step(&mut engine, 60).await;
    rig.step(&mut engine, 5).await;
    let record = rig.store().db().node_record("n2").unwrap().unwrap();
    assert_eq!(record.state, NodeState::Quarantined);
    assert_eq!(record.failed_checks, 1);

    std::fs::write(flags.join("n2"), "").unwrap();
    rig.step(&mut engine, 125).await;
    rig.step(&mut engine, 5).await;
    rig.step(&mut engine, 5).await;
    let record = rig.store().db().node_record("n2").unwrap().unwrap();
    assert_eq!(record.state, NodeState::Probation, "{}", record.reason);
    assert_eq!(record.drain_reason, None);
    assert_eq!(
        rig.store().db().quarantined_nodes().unwrap(),
        Vec::<String>::new()
    );
    // Its own drain undone, the administrator's kept; its exclusion taken away from job 200.
    assert_eq!(
        rig.backend.drained(),
        [("n3".to_string(), "bad fan, ticket 4411".to_string())]
    );
    assert_eq!(
        exclusions_set(&rig).last(),
        Some(&("200".to_string(), Vec::new()))
    );
    assert!(
        rig.store()
            .db()
            .exclusions_of_node("n2")
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn a_job_s_own_failure_is_no_evidence_against_its_node() {
    let rig = EngineRig::default();
    let log = rig.path().join("train.log");
    append(&log, "");
    rig.backend
        .add([job("100").running_on(["n1", "n2"]).log(&log)]);
    let mut engine = rig.engine();
    rig.step(&mut engine, 5).await;
    append(
        &log,
        "1: Traceback (most recent call last):\n1:   File \"train.py\", line 3, in <module>\n1: KeyError: 'labels'\n",
    );
    rig.backend.fail("100");
    rig.step(&mut engine, 5).await;
    let status = rig.status();
    assert_eq!(
        status.workflows[0].attributions[0].category,
        "app_exception"
    );
    let db = rig.store();
    assert!(db.db().node_records().unwrap().is_empty());
    assert!(db.db().node_incidents("n1").unwrap().is_empty());
    assert!(db.db().node_incidents("n2").unwrap().is_empty());
}

#[tokio::test]
async fn a_gpu_lost_under_a_running_job_moves_the_run_off_its_node_at_once() {
    let rig = rig_with_job_on_n1_n2();
    let mut engine = rig.engine();
    rig.step(&mut engine, 5).await;
    // The job still runs: its collectives would time out only minutes later.
    append(&rig.path().join("n2/kern.log"), XID_79);
    rig.step(&mut engine, 5).await;
    assert_eq!(rig.backend.requeues(), [["n2"]]);
    let status = rig.status();
    let workflow = &status.workflows[0];
    assert!(
        workflow.anomalies[0]
            .summary
            .contains("quarantined under it"),
        "{:#?}",
        workflow.anomalies
    );
    assert_eq!(workflow.attributions[0].category, "xid_79");
    assert_eq!(workflow.attributions[0].culprit.node.as_deref(), Some("n2"));
    // Decided once.
    for _ in 0..3 {
        rig.step(&mut engine, 5).await;
    }
    assert_eq!(rig.backend.requeues().len(), 1);
}
