//! The report built from hand-made histories: which anomalies are failures, what each failure is
//! linked to, why an action was not taken, and the three renderings.

use chrono::TimeDelta;

use super::fixtures::{anomaly, attempt, history, recovered_once, requeue, t};
use super::*;
use crate::model::{
    Action, ActionParams, Attribution, BackendKind, JobSpec, JobState, Narrative, RecoveryLimits,
    Remedy, RemedyKind, RemedyParams, Workflow,
};
use crate::store::Store;

fn attribution(attempt_index: u32, category: &str, at: i64) -> Attribution {
    Attribution {
        id: at,
        workflow_id: 1,
        attempt_index,
        category: category.into(),
        component: Component::Network,
        culprit: Culprit {
            node: Some("node-07".into()),
            rank: Some(17),
            gpu: None,
            suspects: Vec::new(),
        },
        confidence: 0.9,
        recoverable: true,
        signature: Some("nccl-collective-timeout".into()),
        explanation: "A collective timed out;\nthe first rank to warn sits on node-07.".into(),
        remedies: vec![Remedy {
            kind: RemedyKind::ExcludeCulprit,
            description: "requeue without the node".into(),
            params: RemedyParams::default(),
        }],
        evidence: vec![
            "[rank17]: NCCL WARN NET/IB : Got completion from peer node-07 with status 12".into(),
        ],
        time: t(at),
    }
}

fn drain(id: ActionId, state: ActionState) -> Action {
    Action {
        id,
        kind: ActionKind::DrainNode,
        params: ActionParams {
            node: Some("node-07".into()),
            reason: Some("runguard: nccl_timeout".into()),
            ..ActionParams::default()
        },
        state,
        permitted: false,
        why: "hardware or network fault on node-07".into(),
        command: Some(
            "scontrol update NodeName=node-07 State=DRAIN Reason=\"runguard: nccl_timeout\"".into(),
        ),
        ..requeue(0, state, 1012, 1012)
    }
}

/// The crash of `recovered_once` with its attribution, a requeue that ran and a drain nobody approved.
fn recovered_with_a_drain() -> WorkflowHistory {
    let mut history = recovered_once();
    history.workflow.requeues_used = 1;
    history.workflow.status_reason = Some("the run completed".into());
    history.attempts[0].nodes = vec!["node-05".into(), "node-07".into()];
    history.attempts[0].exit_code = Some(1);
    history.anomalies[1].summary = "job 4201 FAILED (exit 1)".into();
    history.anomalies[1].evidence = vec![
        "[rank17]: [E ProcessGroupNCCL.cpp:607] Watchdog caught collective operation timeout"
            .into(),
    ];
    history.attributions = vec![attribution(0, "nccl_timeout", 1010)];
    history.actions[0].command =
        Some("scontrol requeuehold 4201 && scontrol update JobId=4201 ExcNodeList=node-07".into());
    history.actions[0].result = Some("requeued job 4201 excluding node-07".into());
    history.actions.push(drain(2, ActionState::Proposed));
    history
}

#[test]
fn a_recovered_crash_reports_its_evidence_attribution_actions_and_gaps() {
    let report = Report::from_history(&recovered_with_a_drain(), t(5000));
    assert_eq!(report.workflow.job_ids, vec!["4201".to_string()]);
    assert_eq!(report.workflow.requeues_used, 1);
    assert_eq!(report.workflow.requeue_limit, 3);
    let goodput = report.workflow.goodput.unwrap();
    assert_eq!((goodput.useful_seconds, goodput.wall_seconds), (1700, 1900));

    assert_eq!(report.failures.len(), 1);
    let failure = &report.failures[0];
    assert_eq!((failure.attempt, failure.kind), (0, AnomalyKind::Crash));
    assert_eq!(failure.job_id.as_deref(), Some("4201"));
    assert_eq!(failure.exit_code, Some(1));
    assert!(failure.evidence[0].contains("Watchdog caught collective operation timeout"));
    let attribution = failure.attribution.as_ref().unwrap();
    assert_eq!(attribution.category, "nccl_timeout");
    assert_eq!(attribution.culprit.node.as_deref(), Some("node-07"));
    assert_eq!(
        attribution.recommended,
        vec!["exclude_culprit: requeue without the node".to_string()]
    );

    assert_eq!(failure.actions_taken.len(), 1);
    assert_eq!(failure.actions_taken[0].kind, ActionKind::Requeue);
    assert_eq!(failure.actions_taken[0].not_taken_because, None);
    assert_eq!(failure.actions_not_taken.len(), 1);
    let drain = &failure.actions_not_taken[0];
    assert_eq!(drain.kind, ActionKind::DrainNode);
    assert!(
        drain
            .command
            .as_deref()
            .unwrap()
            .contains("NodeName=node-07")
    );
    assert_eq!(
        drain.not_taken_because.as_deref(),
        Some("not in the recovery whitelist; never approved")
    );

    let downtime = failure.downtime.as_ref().unwrap();
    let seconds: Vec<(GapKind, i64)> = downtime.gaps.iter().map(|g| (g.kind, g.seconds)).collect();
    assert_eq!(
        seconds,
        vec![
            (GapKind::Detection, 10),
            (GapKind::Analysis, 2),
            (GapKind::Requeue, 8),
            (GapKind::Pending, 80),
            (GapKind::CheckpointLoad, 30),
        ]
    );
    assert_eq!(downtime.total_seconds, 130);
    assert_eq!(
        (
            downtime.resumed_from,
            downtime.lost_iterations,
            downtime.lost_seconds
        ),
        (Some(300), 50, 100)
    );

    // The straggler warning raised earlier is listed, not counted as a failure.
    assert_eq!(report.warnings.len(), 1);
    assert_eq!(report.warnings[0].kind, AnomalyKind::Straggler);
}

#[test]
fn a_crash_loop_is_the_reason_its_crash_stopped_recovery_and_a_failure_only_alone() {
    let mut stopped = recovered_with_a_drain();
    let mut looped = anomaly(0, AnomalyKind::CrashLoop, 1010);
    looped.id = 1011;
    looped.summary = "crash loop: 3 consecutive failed attempts without a new checkpoint".into();
    stopped.anomalies.push(looped.clone());
    let report = Report::from_history(&stopped, t(5000));
    assert_eq!(report.failures.len(), 1);
    assert_eq!(report.failures[0].kind, AnomalyKind::Crash);
    assert_eq!(
        report.failures[0].crash_loop.as_deref(),
        Some(looped.summary.as_str())
    );

    let mut alone = stopped.clone();
    alone.anomalies.retain(|a| a.kind != AnomalyKind::Crash);
    let report = Report::from_history(&alone, t(5000));
    assert_eq!(report.failures.len(), 1);
    assert_eq!(report.failures[0].kind, AnomalyKind::CrashLoop);
    assert_eq!(
        report.failures[0].crash_loop.as_deref(),
        Some(looped.summary.as_str())
    );
}

#[test]
fn an_action_not_taken_says_whether_the_whitelist_or_a_person_held_it_back() {
    let mut waiting = recovered_with_a_drain();
    waiting.workflow.status = WorkflowStatus::Recovering;
    waiting.attempts.truncate(1);
    waiting.actions[0].state = ActionState::Proposed;
    waiting.actions[0].permitted = true;
    waiting.actions.push(drain(3, ActionState::Rejected));
    let mut rejected = requeue(0, ActionState::Rejected, 1012, 1030);
    rejected.id = 4;
    waiting.actions.push(rejected);
    let report = Report::from_history(&waiting, t(1100));
    let reasons: Vec<(ActionId, String)> = report.failures[0]
        .actions_not_taken
        .iter()
        .map(|a| (a.id, a.not_taken_because.clone().unwrap()))
        .collect();
    assert_eq!(
        reasons,
        vec![
            (
                1,
                "the engine runs without --auto; waiting for approval (`runguard approve 1`)"
                    .into()
            ),
            (
                2,
                "not in the recovery whitelist; waiting for approval (`runguard approve 2`)".into()
            ),
            (
                3,
                "not in the recovery whitelist; rejected by a user".into()
            ),
            (4, "rejected by a user".into()),
        ]
    );
    assert!(report.failures[0].actions_taken.is_empty());
    // Nothing restarted the run yet: the requeue gap runs to the report's time.
    let downtime = report.failures[0].downtime.as_ref().unwrap();
    let requeue = downtime.gap(GapKind::Requeue).unwrap();
    assert!(requeue.ongoing);
    assert_eq!(requeue.end, t(1100));
    assert!(render::text(&report).contains(
        "downtime:    100 s so far since the failure at 2026-01-05 08:16:40 UTC, still recovering"
    ));
}

#[test]
fn the_attribution_of_a_failure_is_the_one_made_closest_to_it() {
    let mut two = history(
        WorkflowStatus::Completed,
        vec![
            attempt(0, JobState::Failed, [Some(0), Some(10), Some(100)]),
            attempt(1, JobState::Failed, [Some(110), Some(120), Some(300)]),
        ],
    );
    two.anomalies = vec![
        anomaly(0, AnomalyKind::Crash, 105),
        anomaly(1, AnomalyKind::Crash, 305),
    ];
    two.attributions = vec![
        attribution(0, "xid_79", 106),
        attribution(1, "correlated_step", 400),
        attribution(1, "nccl_timeout", 306),
    ];
    let report = Report::from_history(&two, t(1000));
    let categories: Vec<&str> = report
        .failures
        .iter()
        .map(|f| f.attribution.as_ref().unwrap().category.as_str())
        .collect();
    assert_eq!(categories, vec!["xid_79", "nccl_timeout"]);
    // The second attempt ended the run: its failure has no next attempt.
    let last = report.failures[1].downtime.as_ref().unwrap();
    assert_eq!(last.next_attempt, None);
}

#[test]
fn the_text_names_every_gap_the_culprit_and_the_command_it_would_have_run() {
    let report = Report::from_history(&recovered_with_a_drain(), t(5000));
    let text = render::text(&report);
    for expected in [
        "Recovery report: workflow 1 llama (sim)",
        "status:    completed — the run completed",
        "requeues:  1 of 3",
        "goodput:   89.5%",
        "Failure 1 of 1: crash of attempt 0 (job 4201) at 2026-01-05 08:16:50 UTC",
        "attempt:     FAILED, exit code 1, on node-05,node-07",
        "│ [rank17]: [E ProcessGroupNCCL.cpp:607] Watchdog caught collective operation timeout",
        "attribution: nccl_timeout (network), culprit node-07, rank 17, confidence 90%, recoverable by requeue",
        "A collective timed out; the first rank to warn sits on node-07.",
        "│ [rank17]: NCCL WARN NET/IB : Got completion from peer node-07 with status 12",
        "action 1 requeue: done",
        "would have done (not permitted or never approved):",
        "action 2 drain_node: proposed, not in the recovery whitelist; never approved",
        "command: scontrol update NodeName=node-07 State=DRAIN Reason=\"runguard: nccl_timeout\"",
        "downtime:    130 s from the failure at 2026-01-05 08:16:40 UTC to training again (attempt 0 → 1)",
        "detection        10 s",
        "analysis         2 s",
        "requeue          8 s",
        "pending          80 s",
        "checkpoint load  30 s",
        "lost work        50 iterations after the checkpoint of iteration 300, 100 s of running",
        "▲ 2026-01-05 08:08:20 UTC attempt 0 straggler: straggler seen",
    ] {
        assert!(text.contains(expected), "{expected:?} missing:\n{text}");
    }
    assert!(!text.contains("Narrative"), "{text}");
}

#[test]
fn markdown_keeps_evidence_with_backticks_inside_its_code_block() {
    let mut history = recovered_with_a_drain();
    history.anomalies[1].evidence = vec!["```".into(), "a `quoted` ``` fence".into()];
    history.actions[1].command = Some("echo `hostname`".into());
    let markdown = render::markdown(&Report::from_history(&history, t(5000)));
    assert!(
        markdown.contains("````text\n```\na `quoted` ``` fence\n````\n"),
        "{markdown}"
    );
    assert!(
        markdown.contains("- command: `` echo `hostname` ``"),
        "{markdown}"
    );
    for expected in [
        "# Recovery report: llama (workflow 1)",
        "| requeues | 1 of 3 |",
        "## Failure 1 of 1: crash of attempt 0 (job 4201)",
        "### Would have done (not permitted or never approved)",
        "- **action 2 drain_node: proposed, not in the recovery whitelist; never approved**",
        "| detection | 10 s |",
        "| checkpoint load | 30 s |",
        "| **total** | 130 s |",
        "Lost work: 50 iterations after the checkpoint of iteration 300, 100 s of running.",
        "## Warnings (the run went on)",
    ] {
        assert!(
            markdown.contains(expected),
            "{expected:?} missing:\n{markdown}"
        );
    }
}

#[test]
fn a_kept_narrative_is_shown_under_its_label_in_text_markdown_and_json() {
    let mut history = recovered_with_a_drain();
    history.narratives = vec![Narrative {
        workflow_id: 1,
        anomaly_id: 1010,
        source: "model m at http://127.0.0.1:8000".into(),
        text: "node-07's link went down.\nCheck its port.".into(),
        created_at: t(6000),
    }];
    let report = Report::from_history(&history, t(7000));
    let text = render::text(&report);
    assert!(
        text.contains(&format!(
            "  {NARRATIVE_LABEL}, by model m at http://127.0.0.1:8000:\n    node-07's link went down.\n    Check its port.\n"
        )),
        "{text}"
    );
    let markdown = render::markdown(&report);
    assert!(
        markdown.contains(&format!("### {NARRATIVE_LABEL}")),
        "{markdown}"
    );
    assert!(
        markdown.contains("> node-07's link went down.\n> Check its port."),
        "{markdown}"
    );
    let json = serde_json::to_value(&report).unwrap();
    let narrative = &json["failures"][0]["narrative"];
    assert_eq!(narrative["status"], "written");
    assert_eq!(narrative["label"], NARRATIVE_LABEL);
    assert_eq!(
        narrative["text"],
        "node-07's link went down.\nCheck its port."
    );

    let mut unavailable = report.clone();
    unavailable.failures[0].narrative = Some(NarrativeStatus::Unavailable {
        reason: "no answer within 1 s".into(),
    });
    assert!(render::text(&unavailable).contains("  narrative unavailable: no answer within 1 s\n"));
    let json = serde_json::to_value(&unavailable).unwrap();
    assert_eq!(json["failures"][0]["narrative"]["status"], "unavailable");
}

#[test]
fn a_workflow_without_failures_says_so() {
    let healthy = history(
        WorkflowStatus::Completed,
        vec![attempt(
            0,
            JobState::Completed,
            [Some(0), Some(10), Some(100)],
        )],
    );
    let report = Report::from_history(&healthy, t(200));
    assert!(report.failures.is_empty());
    assert!(render::text(&report).contains("\nNo failure recorded.\n"));
    assert!(render::markdown(&report).contains("No failure recorded."));
}

#[test]
fn a_workflow_is_found_by_its_id_or_by_a_job_id_of_its_attempts() {
    let mut store = Store::open_in_memory().unwrap();
    let workflow = |name: &str, backend: BackendKind| Workflow {
        id: 0,
        name: name.into(),
        backend,
        spec: JobSpec::default(),
        limits: RecoveryLimits::default(),
        status: WorkflowStatus::Completed,
        status_reason: None,
        succeeded: true,
        requeues_used: 0,
        failures_since_checkpoint: 0,
        created_at: t(0),
        updated_at: t(0),
    };
    let (first, second) = store
        .write(|db| {
            let first = db.insert_workflow(&workflow("a", BackendKind::Sim))?;
            let second = db.insert_workflow(&workflow("b", BackendKind::Slurm))?;
            let mut run = attempt(0, JobState::Completed, [Some(0), Some(10), Some(100)]);
            run.workflow_id = first;
            run.job_id = "4201".into();
            db.save_attempt(&run)?;
            run.workflow_id = second;
            run.job_id = "88123".into();
            db.save_attempt(&run)?;
            Ok((first, second))
        })
        .unwrap();
    let db = store.db();
    assert_eq!(resolve(&db, "1").unwrap(), Some(first));
    assert_eq!(resolve(&db, " 4201 ").unwrap(), Some(first));
    assert_eq!(resolve(&db, "88123").unwrap(), Some(second));
    assert_eq!(resolve(&db, "77").unwrap(), None);
    assert_eq!(resolve(&db, "node-07").unwrap(), None);
    let policy = Policy::from_config(&crate::config::Config::default().recovery, false);
    let report = build(&db, &policy, second, t(200) + TimeDelta::seconds(1))
        .unwrap()
        .unwrap();
    assert_eq!(report.workflow.job_ids, vec!["88123".to_string()]);
    assert_eq!(build(&db, &policy, 99, t(200)).unwrap(), None);
}

#[test]
fn the_json_masks_credentials_in_every_string_and_keeps_the_rest() {
    let mut history = recovered_with_a_drain();
    history.anomalies[1]
        .evidence
        .push("0: wandb: env WANDB_API_KEY=3f9c2a7e51d04b8c9e6f".into());
    history.attributions[0].explanation = "handshake with sk-local-5d1c9e2b7a failed".into();
    let report = Report::from_history(&history, t(5000));
    let redactor = crate::redact::Redactor::new(["sk-local-5d1c9e2b7a".to_string()]);
    let json = report.to_redacted_json(&redactor).unwrap();
    let failure = &json["failures"][0];
    assert_eq!(
        failure["evidence"][1],
        "0: wandb: env WANDB_API_KEY=[redacted]"
    );
    assert_eq!(
        failure["attribution"]["explanation"],
        "handshake with [redacted] failed"
    );
    assert_eq!(failure["attribution"]["culprit"]["node"], "node-07");
    assert_eq!(failure["downtime"]["total_seconds"], 130);
}
