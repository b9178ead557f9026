//! The engine driven against the simulated cluster on a manual clock: each scenario end to end, through
//! real log files, the store and the policy, with no real waiting.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use runguard::status::{StatusReport, WorkflowView};
use runguard_engine::backend::sim::{Scenario, SimCluster};
use runguard_engine::backend::{Backend, BackendError};
use runguard_engine::config::Config;
use runguard_engine::model::{
    ActionKind, ActionState, AlertEvent, AnomalyKind, Severity, WorkflowStatus,
};
use runguard_engine::store::CommandKind;

use crate::support::rig::TICK;
use crate::support::{EngineRig, Script, start_time};

/// The rig with `config`, and the simulated cluster playing the built-in `scenario`.
fn play(scenario: &str, config: Config) -> (EngineRig, Arc<SimCluster>) {
    let mut rig = EngineRig::default();
    rig.config = config;
    let sim = rig.sim(scenario, 42);
    (rig, sim)
}

fn only_workflow(status: &StatusReport) -> &WorkflowView {
    assert_eq!(status.workflows.len(), 1, "{:#?}", status.workflows);
    &status.workflows[0]
}

/// Where a scenario is stopped to look at the recovery before it runs.
fn an_action_is_proposed(status: &StatusReport) -> bool {
    status.workflows.iter().any(|w| !w.actions.is_empty())
}

fn log_text(path: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned()
}

#[tokio::test]
async fn nccl_timeout_is_blamed_on_node_07_requeued_without_it_and_completes() {
    // Without the fatal-line rule the job runs into its one-minute watchdog, and the crash is read.
    let mut config = Config::default();
    config.detect.fatal_confirm_max_secs = 0;
    let (rig, sim) = play("nccl-timeout", config);
    let mut engine = rig.engine_over(Arc::clone(&sim), true);
    let status = rig.run(&mut engine, |_| false).await;
    let view = only_workflow(&status);

    assert_eq!(view.workflow.status, WorkflowStatus::Completed);
    assert!(
        view.workflow.succeeded,
        "{:?}\n{:#?}",
        view.workflow.status_reason,
        view.journal.iter().map(|e| &e.decision).collect::<Vec<_>>()
    );
    assert_eq!(view.workflow.requeues_used, 1);
    assert_eq!(view.attempts.len(), 2);
    let (first, second) = (&view.attempts[0], &view.attempts[1]);
    assert_eq!(first.job_id, second.job_id, "a requeue keeps the job id");
    assert!(first.nodes.contains(&"node-07".to_string()));
    assert!(!second.nodes.contains(&"node-07".to_string()));
    assert!(second.excluded_nodes.contains(&"node-07".to_string()));

    assert_eq!(view.anomalies[0].kind, AnomalyKind::Crash);
    let attribution = &view.attributions[0];
    assert_eq!(attribution.category, "nccl_timeout");
    assert_eq!(attribution.culprit.node.as_deref(), Some("node-07"));
    assert!(
        attribution
            .evidence
            .iter()
            .any(|line| line.contains("node-07"))
    );

    let requeue = view
        .actions
        .iter()
        .find(|a| a.kind == ActionKind::Requeue)
        .expect("a requeue");
    assert_eq!(requeue.state, ActionState::Done);
    assert_eq!(requeue.params.exclude_nodes, vec!["node-07"]);
    let drain = view
        .actions
        .iter()
        .find(|a| a.kind == ActionKind::DrainNode)
        .expect("a drain proposal");
    assert_eq!(
        drain.state,
        ActionState::Proposed,
        "drain is not whitelisted"
    );

    // The second attempt resumed from the last checkpoint before the failure, not from scratch.
    assert_eq!(view.last_checkpoint_iteration, Some(600));
    let resumed = log_text(second.log_path.as_ref().unwrap());
    assert!(resumed.contains("loading checkpoint"), "{resumed:.2000}");
    assert!(resumed.contains("at iteration 300"), "{resumed:.2000}");
    assert!(second.last_iteration.unwrap() >= 600);
    assert!(view.checkpoints >= 6);
}

#[tokio::test]
async fn a_fatal_ib_error_is_acted_on_at_once_not_after_the_run_hung_until_the_watchdog() {
    // The demo's IB fault with torch's default collective timeout: after NCCL's completion error the
    // ranks would hang ten minutes, and the silence bound (4 × the 35 s between reports) would end
    // them after more than two.
    let mut scenario = Scenario::builtin("nccl-timeout").unwrap();
    scenario.jobs[0].collective_timeout_s = 600;
    let rig = EngineRig::default();
    let sim = rig.sim_playing(scenario, 42);
    let mut engine = rig.engine_over(Arc::clone(&sim), true);
    let status = rig.run(&mut engine, an_action_is_proposed).await;
    let view = only_workflow(&status);
    let anomaly = &view.anomalies[0];
    assert_eq!(anomaly.kind, AnomalyKind::Hang);
    assert!(
        anomaly.summary.contains("printed a fatal")
            && anomaly.summary.contains("(status 12) on node-07")
            && anomaly.summary.contains("no progress for"),
        "{}",
        anomaly.summary
    );
    let struck = sim
        .progress("llama3-8b-pretrain")
        .unwrap()
        .struck_ms
        .unwrap();
    let after = (anomaly.time.timestamp_millis() - struck) as f64 / 1000.0;
    // NCCL's line within 4 s of the fault, read at the next poll, 5 s without progress, the next poll.
    assert!(after <= 4.0 + 2.0 * TICK.as_secs_f64() + 5.0, "{after} s");
    let attribution = &view.attributions[0];
    assert_eq!(attribution.category, "ib_link", "{attribution:#?}");
    assert_eq!(attribution.culprit.node.as_deref(), Some("node-07"));

    let status = rig.run(&mut engine, |_| false).await;
    let view = only_workflow(&status);
    assert!(view.workflow.succeeded, "{:?}", view.workflow.status_reason);
    let requeue = view
        .actions
        .iter()
        .find(|a| a.kind == ActionKind::Requeue)
        .expect("a requeue");
    assert_eq!(requeue.state, ActionState::Done);
    assert_eq!(requeue.params.exclude_nodes, vec!["node-07"]);
    assert_eq!(view.attempts.len(), 2);
    assert!(!view.attempts[1].nodes.contains(&"node-07".to_string()));
    // The first attempt never reached its watchdog: it was requeued while it hung.
    let first = log_text(view.attempts[0].log_path.as_ref().unwrap());
    assert!(first.contains("Got completion from peer"), "{first:.2000}");
    assert!(!first.contains("Watchdog caught collective operation timeout"));
}

#[tokio::test]
async fn a_fatal_line_fails_the_run_when_its_window_ends_not_at_the_next_poll() {
    // Polling once a minute with file events off: the engine reads NCCL's line at the first poll
    // after it, and the hung run writes nothing more. The window (5 s) ends long before the next
    // poll; the engine wakes itself then.
    let mut config = Config::default();
    config.engine.poll_interval_secs = 60.0;
    config.engine.file_events = false;
    let mut scenario = Scenario::builtin("nccl-timeout").unwrap();
    scenario.jobs[0].collective_timeout_s = 600;
    let mut rig = EngineRig::default();
    rig.config = config;
    let sim = rig.sim_playing(scenario, 42);
    let mut engine = rig.engine_over(Arc::clone(&sim), true);
    let (status, passes) = rig.run_paced(&mut engine, an_action_is_proposed).await;
    let view = only_workflow(&status);
    let anomaly = &view.anomalies[0];
    assert!(
        anomaly.summary.contains("printed a fatal") && anomaly.summary.contains("window 5 s"),
        "{}",
        anomaly.summary
    );
    // The pass that read the line was a poll; the one that failed the run came 5 s after it.
    let read = passes[passes.len() - 2];
    assert_eq!(passes.last(), Some(&anomaly.time));
    assert_eq!((anomaly.time - read).num_seconds(), 5, "{passes:?}");
    let shown = sim
        .progress("llama3-8b-pretrain")
        .unwrap()
        .shown_ms
        .unwrap();
    let after_line = (anomaly.time.timestamp_millis() - shown) as f64 / 1000.0;
    assert!((5.0..=65.0).contains(&after_line), "{after_line} s");
    // Acted on while the run still hung: the requeue leaves the node out.
    let status = rig.run(&mut engine, |_| false).await;
    let requeue = only_workflow(&status)
        .actions
        .iter()
        .find(|a| a.kind == ActionKind::Requeue)
        .cloned()
        .expect("a requeue");
    assert_eq!(requeue.params.exclude_nodes, vec!["node-07"]);
}

#[tokio::test]
async fn an_application_bug_is_not_requeued() {
    let (rig, sim) = play("app-bug", Config::default());
    let mut engine = rig.engine_over(Arc::clone(&sim), true);
    let status = rig.run(&mut engine, |_| false).await;
    let view = only_workflow(&status);
    assert_eq!(view.workflow.status, WorkflowStatus::Completed);
    assert!(!view.workflow.succeeded);
    assert!(
        view.workflow
            .status_reason
            .as_deref()
            .unwrap()
            .contains("not recoverable"),
        "{:?}",
        view.workflow.status_reason
    );
    assert_eq!(view.attempts.len(), 1);
    assert_eq!(view.workflow.requeues_used, 0);
    assert!(view.actions.iter().all(|a| !a.kind.restarts_the_run()));
    assert_eq!(view.attributions[0].category, "app_exception");
    // The crash is shown with the traceback, from its first line to the exception.
    let block = &view.anomalies[0].evidence;
    assert!(
        block[0].contains("Traceback (most recent call last)"),
        "{block:?}"
    );
    assert!(block.last().unwrap().contains("KeyError"), "{block:?}");
    assert!(
        view.attributions[0]
            .evidence
            .iter()
            .any(|l| l.contains("Error"))
    );
}

#[tokio::test]
async fn a_cuda_oom_is_not_requeued() {
    let (rig, sim) = play("cuda-oom", Config::default());
    let mut engine = rig.engine_over(Arc::clone(&sim), true);
    let status = rig.run(&mut engine, |_| false).await;
    let view = only_workflow(&status);
    assert_eq!(view.attributions[0].category, "cuda_oom");
    assert_eq!(view.attempts.len(), 1);
    assert!(!view.workflow.succeeded);
}

#[tokio::test]
async fn a_crash_loop_is_stopped_after_three_attempts_without_a_checkpoint() {
    let (rig, sim) = play("crash-loop", Config::default());
    let mut engine = rig.engine_over(Arc::clone(&sim), true);
    let status = rig.run(&mut engine, |_| false).await;
    let view = only_workflow(&status);
    assert_eq!(view.workflow.status, WorkflowStatus::Completed);
    assert!(!view.workflow.succeeded);
    let reason = view.workflow.status_reason.as_deref().unwrap();
    assert!(reason.starts_with("crash loop"), "{reason}");
    assert_eq!(
        view.attempts.len(),
        3,
        "threshold 3 stops at the third failure"
    );
    assert_eq!(view.workflow.requeues_used, 2);
    assert!(
        view.anomalies
            .iter()
            .any(|a| a.kind == AnomalyKind::CrashLoop)
    );
}

#[tokio::test]
async fn the_crash_loop_threshold_comes_from_the_config() {
    let mut config = Config::default();
    config.recovery.crash_loop_threshold = 2;
    let (rig, sim) = play("crash-loop", config);
    let mut engine = rig.engine_over(Arc::clone(&sim), true);
    let status = rig.run(&mut engine, |_| false).await;
    assert_eq!(only_workflow(&status).attempts.len(), 2);
}

#[tokio::test]
async fn a_silent_job_is_detected_as_a_hang_and_requeued() {
    let (rig, sim) = play("hang", Config::default());
    let mut engine = rig.engine_over(Arc::clone(&sim), true);
    let status = rig.run(&mut engine, |_| false).await;
    let view = only_workflow(&status);
    assert_eq!(view.anomalies[0].kind, AnomalyKind::Hang);
    assert_eq!(view.attributions[0].category, "hang");
    assert!(view.workflow.succeeded);
    assert_eq!(view.attempts.len(), 2);
}

#[tokio::test]
async fn an_xid_79_in_the_kernel_log_names_the_culprit_node() {
    let (rig, sim) = play("xid79", Config::default());
    let mut engine = rig.engine_over(Arc::clone(&sim), true);
    let status = rig.run(&mut engine, |_| false).await;
    let view = only_workflow(&status);
    let attribution = &view.attributions[0];
    assert_eq!(attribution.category, "xid_79");
    let culprit = attribution.culprit.node.clone().unwrap();
    assert!(view.attempts[0].nodes.contains(&culprit));
    assert!(!view.attempts[1].nodes.contains(&culprit));
    assert!(view.workflow.succeeded);
}

#[tokio::test]
async fn healthy_and_straggling_runs_complete_without_any_action() {
    for scenario in ["healthy", "straggler"] {
        let (rig, sim) = play(scenario, Config::default());
        let mut engine = rig.engine_over(Arc::clone(&sim), true);
        let status = rig.run(&mut engine, |_| false).await;
        for view in &status.workflows {
            assert!(view.workflow.succeeded, "{scenario}: {:?}", view.workflow);
            assert!(view.actions.is_empty(), "{scenario}: {:?}", view.actions);
            if scenario == "healthy" {
                assert!(view.anomalies.is_empty(), "{:?}", view.anomalies);
            }
            assert!(view.checkpoints > 0);
        }
    }
}

#[tokio::test]
async fn an_action_outside_the_whitelist_waits_for_approval() {
    let mut config = Config::default();
    config.recovery.whitelist = vec![ActionKind::Cancel];
    let (rig, sim) = play("nccl-timeout", config);
    let mut engine = rig.engine_over(Arc::clone(&sim), true);
    let status = rig.run(&mut engine, an_action_is_proposed).await;
    let requeue = only_workflow(&status)
        .actions
        .iter()
        .find(|a| a.kind == ActionKind::Requeue)
        .cloned()
        .unwrap();
    assert_eq!(requeue.state, ActionState::Proposed);
    assert!(!requeue.permitted);

    // Hours pass: nothing happens without a human.
    for _ in 0..200 {
        rig.clock.advance(TICK);
        engine.tick().await.unwrap();
    }
    let view = rig.status();
    let view = only_workflow(&view);
    assert_eq!(view.attempts.len(), 1);
    assert_eq!(view.workflow.status, WorkflowStatus::Recovering);
    assert_eq!(view.actions[0].state, ActionState::Proposed);

    // Another process approves through the store; the engine executes it.
    rig.command(CommandKind::Approve, requeue.id);
    let status = rig.run(&mut engine, |_| false).await;
    let view = only_workflow(&status);
    assert!(view.workflow.succeeded);
    assert_eq!(view.attempts.len(), 2);
    let requeue = view.actions.iter().find(|a| a.id == requeue.id).unwrap();
    assert_eq!(requeue.state, ActionState::Done);
}

#[tokio::test]
async fn a_recovery_waiting_past_the_watchdog_raises_one_critical_alert() {
    let mut config = Config::default();
    config.recovery.whitelist = vec![ActionKind::Cancel];
    config.recovery.watchdog_secs = 600;
    let (rig, sim) = play("nccl-timeout", config);
    let mut engine = rig.engine_over(Arc::clone(&sim), true);
    let status = rig.run(&mut engine, an_action_is_proposed).await;
    let failed_at = only_workflow(&status).anomalies[0].time;
    let stalled = |status: &StatusReport| {
        only_workflow(status)
            .anomalies
            .iter()
            .filter(|a| a.kind == AnomalyKind::RecoveryStalled)
            .count()
    };
    // Not before the watchdog's time...
    while rig.now() < failed_at + chrono::TimeDelta::seconds(590) {
        rig.clock.advance(TICK);
        engine.tick().await.unwrap();
    }
    assert_eq!(stalled(&rig.status()), 0);
    // ...then once, however long it goes on.
    for _ in 0..100 {
        rig.clock.advance(TICK);
        engine.tick().await.unwrap();
    }
    let status = rig.status();
    assert_eq!(stalled(&status), 1);
    let alert = status
        .notifications
        .iter()
        .find(|n| n.event == AlertEvent::Watchdog)
        .expect("a watchdog notification");
    assert_eq!(alert.severity, Severity::Critical);
    assert!(alert.body.contains("waits for approval"), "{}", alert.body);
    assert!(
        alert.body.contains("recovering for 10 min"),
        "{}",
        alert.body
    );
}

#[tokio::test]
async fn without_auto_even_whitelisted_actions_are_only_proposed() {
    let (rig, sim) = play("nccl-timeout", Config::default());
    let mut engine = rig.engine_over(Arc::clone(&sim), false);
    let status = rig.run(&mut engine, an_action_is_proposed).await;
    let requeue = &only_workflow(&status).actions[0];
    assert!(requeue.permitted);
    assert_eq!(requeue.state, ActionState::Proposed);
}

#[tokio::test]
async fn a_rejected_recovery_stops_the_workflow() {
    let (rig, sim) = play("nccl-timeout", Config::default());
    let mut engine = rig.engine_over(Arc::clone(&sim), false);
    let status = rig.run(&mut engine, an_action_is_proposed).await;
    let requeue = only_workflow(&status).actions[0].clone();
    rig.command(CommandKind::Reject, requeue.id);
    engine.tick().await.unwrap();
    let status = rig.status();
    let view = only_workflow(&status);
    assert_eq!(view.workflow.status, WorkflowStatus::Completed);
    assert!(
        view.workflow
            .status_reason
            .as_deref()
            .unwrap()
            .contains("rejected")
    );
    assert_eq!(view.actions[0].state, ActionState::Rejected);
}

#[tokio::test]
async fn an_engine_that_died_after_requeueing_but_before_recording_it_does_not_requeue_again() {
    let mut config = Config::default();
    config.recovery.whitelist = vec![];
    let (rig, sim) = play("nccl-timeout", config);
    let mut engine = rig.engine_over(Arc::clone(&sim), true);
    let status = rig.run(&mut engine, an_action_is_proposed).await;
    let requeue = only_workflow(&status).actions[0].clone();
    let job_id = requeue.params.job_id.clone().unwrap();
    drop(engine);

    // What a dying engine leaves behind: the action marked executing, the requeue done on the cluster,
    // and the outcome never recorded.
    {
        let mut store = rig.store();
        store
            .write(|db| {
                let mut action = db.action(requeue.id)?.unwrap();
                action.state = ActionState::Executing;
                db.update_action(&action)
            })
            .unwrap();
        sim.requeue(&job_id, &requeue.params.exclude_nodes)
            .await
            .unwrap();
    }

    let mut restarted = rig.engine_over(Arc::clone(&sim), true);
    let status = rig.run(&mut restarted, |_| false).await;
    let view = only_workflow(&status);
    let job = sim.job(&job_id).await.unwrap().unwrap();
    assert_eq!(job.restart_count, 1, "requeued exactly once");
    assert_eq!(view.attempts.len(), 2);
    assert_eq!(view.workflow.requeues_used, 1);
    assert!(view.workflow.succeeded);
    let action = view.actions.iter().find(|a| a.id == requeue.id).unwrap();
    assert_eq!(action.state, ActionState::Done);
    assert!(
        action
            .result
            .as_deref()
            .unwrap()
            .contains("already requeued")
    );
}

#[tokio::test]
async fn a_restarted_engine_continues_from_its_offsets_without_raising_old_anomalies_again() {
    let (rig, sim) = play("nccl-timeout", Config::default());
    let mut engine = rig.engine_over(Arc::clone(&sim), true);
    // Stop just after the failure was handled and the job requeued.
    rig.run(&mut engine, |status| {
        status
            .workflows
            .iter()
            .any(|w| w.actions.iter().any(|a| a.state == ActionState::Done))
    })
    .await;
    drop(engine);
    let mut restarted = rig.engine_over(Arc::clone(&sim), true);
    let status = rig.run(&mut restarted, |_| false).await;
    let view = only_workflow(&status);
    assert_eq!(view.anomalies.len(), 1);
    assert_eq!(view.attributions.len(), 1);
    assert_eq!(view.workflow.requeues_used, 1);
    let iterations: Vec<u64> = rig
        .status()
        .workflows
        .iter()
        .flat_map(|_| {
            let store = rig.store();
            store
                .db()
                .checkpoints(view.workflow.id)
                .unwrap()
                .into_iter()
                .map(|c| c.iteration)
                .collect::<Vec<_>>()
        })
        .collect();
    let mut unique = iterations.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        iterations.len(),
        "no checkpoint recorded twice: {iterations:?}"
    );
}

#[tokio::test]
async fn a_scheduler_that_is_down_is_counted_and_waited_out_without_losing_state() {
    let (rig, sim) = play("nccl-timeout", Config::default());
    let flaky = rig.wrap(sim, Outage(|calls_before, _| calls_before < 40));
    let mut engine = rig.engine_over(flaky, true);
    let status = rig.run(&mut engine, |_| false).await;
    let view = only_workflow(&status);
    assert!(view.workflow.succeeded);
    assert_eq!(view.attempts.len(), 2);
    let (_, count, last) = status
        .warnings
        .iter()
        .find(|(kind, _, _)| kind == "backend_unavailable")
        .expect("counted warning");
    assert_eq!(*count, 40);
    assert!(
        last.contains("Unable to contact slurm controller"),
        "{last}"
    );
}

/// The scheduler not answering when `down` says so, from the number of calls before it and the time.
struct Outage<F>(F);

impl<F: Fn(usize, DateTime<Utc>) -> bool + Send + Sync + 'static> Script for Outage<F> {
    fn interrupt(&self, calls_before: usize, now: DateTime<Utc>) -> Option<BackendError> {
        (self.0)(calls_before, now).then(|| {
            BackendError::Unavailable(
                "squeue: error: Unable to contact slurm controller (connect failure)".into(),
            )
        })
    }
}

#[tokio::test]
async fn a_scheduler_outage_backs_off_marks_the_workflow_and_runs_no_action_until_it_answers() {
    let (rig, sim) = play("nccl-timeout", Config::default());
    // Down from before the job fails (about 1290 s in) until well after.
    let down_from = start_time() + chrono::TimeDelta::seconds(1000);
    let down_until = start_time() + chrono::TimeDelta::seconds(2500);
    let backend = rig.wrap(
        sim,
        Outage(move |_, now: DateTime<Utc>| now >= down_from && now < down_until),
    );
    let mut engine = rig.engine_over(Arc::clone(&backend), true);
    let during = rig
        .run(&mut engine, |status| {
            let now = rig.now();
            now > start_time() + chrono::TimeDelta::seconds(2000) && now < down_until
                || status.workflows.iter().any(|w| w.workflow.succeeded)
        })
        .await;
    // Mid-outage: the workflow is marked, the failure was seen in the log, and nothing ran.
    let view = only_workflow(&during);
    let reason = view.workflow.status_reason.clone().unwrap_or_default();
    assert!(
        reason.starts_with("scheduler unreachable since") && reason.contains("Unable to contact"),
        "{reason}"
    );
    assert!(!view.anomalies.is_empty(), "{view:#?}");
    assert!(
        view.actions
            .iter()
            .all(|a| a.state == ActionState::Approved),
        "{:#?}",
        view.actions
    );

    let status = rig.run(&mut engine, |_| false).await;
    let view = only_workflow(&status);
    assert!(view.workflow.succeeded, "{view:#?}");
    assert_eq!(view.attempts.len(), 2);
    let requeue = &view.actions[0];
    assert_eq!(requeue.state, ActionState::Done);
    assert!(requeue.updated_at >= down_until, "{requeue:#?}");
    assert!(
        view.journal.iter().any(|entry| entry
            .decision
            .starts_with("scheduler reachable again after")),
        "{:#?}",
        view.journal
    );
    // The calls during the outage spread out: each wait at least as long as the one before, the
    // longest reaching the maximum backoff, and far fewer calls than one per poll interval.
    let calls: Vec<DateTime<Utc>> = backend.calls().iter().map(|call| call.at).collect();
    let outage: Vec<_> = calls
        .iter()
        .filter(|t| **t >= down_from && **t < down_until)
        .collect();
    let gaps: Vec<i64> = outage
        .windows(2)
        .map(|pair| (*pair[1] - *pair[0]).num_seconds())
        .collect();
    assert!(gaps.windows(2).all(|g| g[1] >= g[0]), "{gaps:?}");
    assert_eq!(gaps.last().copied(), Some(300), "{gaps:?}");
    assert!(outage.len() < 15, "{} calls in 1500 s", outage.len());
}

#[tokio::test]
async fn a_job_that_ends_between_two_ticks_still_has_its_last_lines_read() {
    let (rig, sim) = play("nccl-timeout", Config::default());
    let mut engine = rig.engine_over(Arc::clone(&sim), true);
    // Ticks hours apart: each one sees a job that already ended.
    for _ in 0..6 {
        engine.tick().await.unwrap();
        rig.clock.advance(Duration::from_secs(3 * 3600));
    }
    let status = rig.status();
    let view = only_workflow(&status);
    assert!(view.workflow.succeeded, "{:?}", view.workflow);
    assert_eq!(view.last_checkpoint_iteration, Some(600));
    assert_eq!(view.checkpoints, 6);
    assert_eq!(
        view.attributions[0].culprit.node.as_deref(),
        Some("node-07")
    );
}

#[test]
fn the_engine_loop_can_run_on_a_spawned_task() {
    fn assert_send<T: Send>(_: &T) {}
    let (rig, sim) = play("healthy", Config::default());
    let mut engine = rig.engine_over(Arc::clone(&sim), true);
    let run = engine.run(std::future::pending::<()>(), true);
    assert_send(&run);
}
