//! Dead nodes, early: a node the scheduler says no longer answers, or whose ranks went quiet while the
//! others go on, is a node failure of its running job at once.

use runguard_engine::model::ActionKind;

use crate::support::{EngineRig, append, job};

#[tokio::test]
async fn a_node_the_scheduler_says_is_not_responding_is_excluded_from_the_running_job_at_once() {
    let rig = EngineRig::default();
    rig.backend.add([job("4201").running_on(["n1", "n2"])]);
    let mut engine = rig.engine();
    rig.step(&mut engine, 5).await;
    assert!(rig.backend.requeues().is_empty());
    rig.backend
        .kill_node("n2", "not responding: sinfo state mix*");
    // The next node query is due 15 s after the first.
    for _ in 0..3 {
        rig.step(&mut engine, 5).await;
    }
    assert_eq!(
        rig.backend.requeues(),
        [["n2"]],
        "{:#?}",
        rig.status().workflows
    );
    let status = rig.status();
    let attribution = &status.workflows[0].attributions[0];
    assert_eq!(attribution.category, "node_failure");
    assert_eq!(attribution.culprit.node.as_deref(), Some("n2"));
    assert!(
        attribution
            .evidence
            .iter()
            .any(|line| line.contains("n2") && line.contains("not responding")),
        "{attribution:#?}"
    );
}

/// Job 4201 on n1 and n2, two ranks a node (srun -l labels 0-3), with its log.
fn two_ranks_a_node() -> (EngineRig, std::path::PathBuf) {
    let rig = EngineRig::default();
    let log = rig.path().join("train.log");
    append(&log, "");
    let mut spec = job("4201").running_on(["n1", "n2"]).log(&log).build();
    spec.spec.gpus_per_node = 2;
    rig.backend.add([spec]);
    (rig, log)
}

#[tokio::test]
async fn a_node_whose_ranks_go_quiet_while_the_others_write_is_excluded() {
    let (rig, log) = two_ranks_a_node();
    let mut engine = rig.engine();
    // Every rank writing every 5 s.
    for step in 0..12 {
        for rank in 0..4 {
            append(&log, &format!("{rank}: step {step} loss 1.0\n"));
        }
        rig.step(&mut engine, 5).await;
    }
    assert!(rig.backend.requeues().is_empty(), "healthy so far");
    // n2's ranks (2 and 3) stop; n1's go on.
    for step in 12..20 {
        for rank in 0..2 {
            append(&log, &format!("{rank}: step {step} loss 1.0\n"));
        }
        rig.step(&mut engine, 5).await;
    }
    assert_eq!(
        rig.backend.requeues(),
        [["n2"]],
        "{:#?}",
        rig.status().workflows
    );
    let status = rig.status();
    assert_eq!(
        status.workflows[0].attributions[0].culprit.node.as_deref(),
        Some("n2")
    );
    assert!(
        status.workflows[0]
            .actions
            .iter()
            .any(|a| a.kind == ActionKind::Requeue),
        "{:#?}",
        status.workflows[0].actions
    );
}

#[tokio::test]
async fn a_job_that_logs_from_one_rank_only_is_not_a_quiet_node() {
    let (rig, log) = two_ranks_a_node();
    let mut engine = rig.engine();
    // Every rank says hello, then only the last rank (on n2) reports progress, as Megatron does.
    for rank in 0..4 {
        append(
            &log,
            &format!("{rank}: NCCL INFO comm 0x1 rank {rank} nranks 4 - Init COMPLETE\n"),
        );
    }
    for step in 0..30 {
        append(&log, &format!("3: iteration {step}/100 | loss 1.0\n"));
        rig.step(&mut engine, 5).await;
    }
    assert!(
        rig.backend.requeues().is_empty(),
        "{:#?}",
        rig.status().workflows
    );
}
