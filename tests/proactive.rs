//! Proactive checkpoints: a precursor of failure on a node of a running job makes runguard ask the job
//! to save now, then requeue it off the node once it has saved, requeued itself, or the wait is over.

use runguard_engine::model::{ActionKind, ActionState, JobState};

use crate::support::backend::Call;
use crate::support::{EngineRig, append, job, queued_again};

/// The line Linux's machine-check handler writes when a CPU package overheats.
const HOT: &str = "2026-01-05T08:00:20+00:00 n2 kernel: mce: CPU0: Core temperature above threshold, cpu clock throttled (total events = 1)\n";

/// Job 100 on n1 and n2 writing its log, n2's kernel log followed; `checkpoint_now` whitelisted.
fn rig() -> (EngineRig, std::path::PathBuf) {
    let mut rig = EngineRig::default();
    for node in ["n1", "n2"] {
        std::fs::create_dir_all(rig.path().join(node)).unwrap();
        append(&rig.path().join(node).join("kern.log"), "");
    }
    rig.config.telemetry.node_log_pattern =
        Some(rig.path().join("{node}/kern.log").display().to_string());
    rig.config.recovery.whitelist = vec![ActionKind::Requeue, ActionKind::CheckpointNow];
    rig.config.ledger.checkpoint_wait_secs = 60;
    let log = rig.path().join("train.log");
    append(&log, "");
    rig.backend
        .add([job("100").running_on(["n1", "n2"]).log(&log)]);
    (rig, log)
}

fn signals(rig: &EngineRig) -> Vec<(String, String)> {
    rig.backend
        .calls()
        .into_iter()
        .filter_map(|recorded| match recorded.call {
            Call::Signal { job_id, signal } => Some((job_id, signal)),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_hot_gpu_makes_the_job_save_now_and_move_off_the_node_once_it_has_saved() {
    let (rig, log) = rig();
    let mut engine = rig.engine();
    append(
        &log,
        "7: iteration 100/1000 | elapsed time per iteration (ms): 1000.0 |\n",
    );
    rig.step(&mut engine, 5).await;
    append(&rig.path().join("n2/kern.log"), HOT);
    rig.step(&mut engine, 1).await;
    assert_eq!(signals(&rig), [("100".to_string(), "USR1".to_string())]);
    assert!(rig.backend.requeues().is_empty(), "not before the save");
    rig.step(&mut engine, 1).await;
    assert!(rig.backend.requeues().is_empty(), "not before the save");
    // The job saves on its signal.
    append(
        &log,
        "0: saving checkpoint at iteration 101 to /ckpt (SIGUSR1)\n0:   successfully saved checkpoint from iteration 101 to /ckpt [ t 0/1, p 0/1 ]\n",
    );
    rig.step(&mut engine, 1).await;
    rig.step(&mut engine, 1).await;
    assert_eq!(rig.backend.requeues(), [["n2"]]);
    // Once.
    for _ in 0..3 {
        append(&rig.path().join("n2/kern.log"), HOT);
        rig.step(&mut engine, 5).await;
    }
    assert_eq!(rig.backend.requeues().len(), 1);
    assert_eq!(signals(&rig).len(), 1);
    let status = rig.status();
    assert!(
        status.workflows[0]
            .anomalies
            .iter()
            .all(|a| a.kind.as_str() != "crash")
    );
}

#[tokio::test]
async fn a_job_that_requeues_itself_on_the_signal_is_kept_off_the_node_and_started_now() {
    let (rig, log) = rig();
    let mut engine = asked_and_saved(&rig, &log).await;
    // Lightning runs `scontrol requeue` itself once saved: the job waits in the queue (BeginTime).
    rig.backend
        .update("100", |job| queued_again(job, 1, Some("BeginTime")));
    for _ in 0..4 {
        rig.step(&mut engine, 1).await;
    }
    assert_eq!(
        rig.backend.requeues(),
        [["n2"]],
        "{:#?}",
        rig.status().workflows[0]
    );
    let status = rig.status();
    assert!(
        status.workflows[0]
            .anomalies
            .iter()
            .all(|a| !matches!(a.kind.as_str(), "crash" | "hang")),
        "its own requeue is no failure: {:#?}",
        status.workflows[0].anomalies
    );
    // The run that goes on is watched to its end like any other.
    rig.backend.update("100", |job| {
        job.state = JobState::Completed;
        job.state_raw = "COMPLETED".into();
        job.nodes = vec!["n1".into(), "n3".into()];
    });
    for _ in 0..3 {
        rig.step(&mut engine, 5).await;
    }
    let status = rig.status();
    assert_eq!(status.workflows[0].workflow.status.as_str(), "completed");
    assert!(status.workflows[0].workflow.succeeded);
}

/// Slurm shows a job that ran `scontrol requeue` itself as REQUEUED for a moment while it leaves its
/// nodes, already with its new restart count: runguard's requeue meeting it then must wait for it to
/// be pending, not take it as done (it would start again on the hot node after its BeginTime wait).
#[tokio::test]
async fn a_job_caught_leaving_its_nodes_after_its_own_requeue_still_gets_the_exclusion() {
    let (rig, log) = rig();
    let mut engine = asked_and_saved(&rig, &log).await;
    rig.backend.update("100", |job| {
        job.state = JobState::Requeued;
        job.state_raw = "REQUEUED".into();
        job.restart_count = 1;
    });
    for _ in 0..3 {
        rig.step(&mut engine, 1).await;
    }
    assert!(
        rig.backend.requeues().is_empty(),
        "a job still leaving its nodes cannot take the exclusion yet"
    );
    let requeue = the_requeue(&rig);
    assert_eq!(requeue.state, ActionState::Approved, "{requeue:#?}");
    rig.backend
        .update("100", |job| queued_again(job, 1, Some("BeginTime")));
    requeued_off_n2(&rig, &mut engine).await;
    // Waiting for the job was no outage of the scheduler.
    assert!(
        rig.status().workflows[0]
            .workflow
            .status_reason
            .as_deref()
            .is_none_or(|reason| !reason.contains("unreachable")),
        "{:#?}",
        rig.status().workflows[0].workflow
    );
}

#[tokio::test]
async fn a_requeue_cut_short_after_its_exclusion_is_finished_not_left_waiting_on_begin_time() {
    let (rig, log) = rig();
    let mut engine = asked_and_saved(&rig, &log).await;
    // An earlier try got as far as the exclusion and the release; starting it now did not happen, so
    // it waits on Slurm's BeginTime after a requeue.
    rig.backend.update("100", |job| {
        queued_again(job, 1, Some("BeginTime"));
        job.excluded_nodes = vec!["n2".into()];
    });
    let requeue = requeued_off_n2(&rig, &mut engine).await;
    assert!(
        !requeue
            .result
            .as_deref()
            .unwrap_or_default()
            .starts_with("found done"),
        "{requeue:#?}"
    );
}

#[tokio::test]
async fn without_a_save_within_the_wait_it_is_requeued_from_its_last_checkpoint() {
    let (rig, _log) = rig();
    let mut engine = rig.engine();
    rig.step(&mut engine, 5).await;
    append(&rig.path().join("n2/kern.log"), HOT);
    rig.step(&mut engine, 30).await;
    assert!(rig.backend.requeues().is_empty());
    rig.step(&mut engine, 31).await;
    rig.step(&mut engine, 1).await;
    assert_eq!(rig.backend.requeues(), [["n2"]]);
}

/// Three more seconds of the engine: the job is requeued off n2 and the requeue is done.
async fn requeued_off_n2(
    rig: &EngineRig,
    engine: &mut runguard_engine::engine::Engine,
) -> runguard_engine::model::Action {
    for _ in 0..3 {
        rig.step(engine, 1).await;
    }
    assert_eq!(rig.backend.requeues(), [["n2"]]);
    let requeue = the_requeue(rig);
    assert_eq!(requeue.state, ActionState::Done, "{requeue:#?}");
    requeue
}

/// The requeue the engine planned for workflow 1.
fn the_requeue(rig: &EngineRig) -> runguard_engine::model::Action {
    rig.store()
        .db()
        .actions(1)
        .unwrap()
        .into_iter()
        .find(|action| action.kind == ActionKind::Requeue)
        .expect("the requeue is planned")
}

/// Runs the engine 5 s, then n2 overheats: the job is asked to save and saves (a line in `log`).
async fn asked_and_saved(
    rig: &EngineRig,
    log: &std::path::Path,
) -> runguard_engine::engine::Engine {
    let mut engine = rig.engine();
    rig.step(&mut engine, 5).await;
    append(&rig.path().join("n2/kern.log"), HOT);
    rig.step(&mut engine, 1).await;
    assert_eq!(signals(rig).len(), 1);
    append(
        log,
        "0: successfully saved checkpoint from iteration 7 to /ckpt\n",
    );
    engine
}

/// Runs the engine 5 s, then n2 overheats and it runs 10 s more; returns the actions.
async fn precursor_on_n2(rig: &EngineRig) -> Vec<runguard_engine::model::Action> {
    let mut engine = rig.engine();
    rig.step(&mut engine, 5).await;
    append(&rig.path().join("n2/kern.log"), HOT);
    rig.step(&mut engine, 5).await;
    rig.step(&mut engine, 5).await;
    rig.store().db().all_actions().unwrap()
}

#[tokio::test]
async fn not_whitelisted_the_checkpoint_request_is_only_proposed() {
    let (mut rig, _log) = rig();
    rig.config.recovery.whitelist = vec![ActionKind::Requeue];
    let actions = precursor_on_n2(&rig).await;
    assert!(signals(&rig).is_empty());
    let request = actions
        .iter()
        .find(|a| a.kind == ActionKind::CheckpointNow)
        .expect("a checkpoint request");
    assert_eq!(request.state, ActionState::Proposed);
    assert!(request.why.contains("precursor"), "{}", request.why);
    assert!(rig.backend.requeues().is_empty());
}

#[tokio::test]
async fn a_job_that_takes_no_signal_is_not_asked_to_save() {
    let (rig, _log) = rig();
    rig.backend.refuse_signals("100");
    let actions = precursor_on_n2(&rig).await;
    assert!(signals(&rig).is_empty());
    assert!(
        actions.iter().all(|a| a.kind != ActionKind::CheckpointNow),
        "no request planned only to fail: {actions:?}"
    );
    // The node's precursor still counts against it.
    let incidents = rig.store().db().node_incidents("n2").unwrap();
    assert!(!incidents.is_empty(), "the precursor is n2's incident");
}
