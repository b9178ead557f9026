use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::*;
use crate::tui::app::{App, Pane, UiAction};
use crate::tui::panes::timeline::tests::recovered;
use crate::tui::snapshot::AttemptRow;
use crate::tui::snapshot::Snapshot;
use crate::tui::tests::{failed_and_proposed, render};
use runguard_engine::config::Config;
use runguard_engine::model::{AnomalyKind, JobState, WorkflowStatus};
use runguard_engine::recover::Policy;
use runguard_engine::report::fixtures::{anomaly, attempt, checkpoint, history, sample, t};

fn show_charts(snapshot: &Snapshot, now: DateTime<Utc>) -> App {
    let mut app = App::new("alice".into(), true);
    app.update(UiAction::Show(Pane::Charts), snapshot, now);
    assert_eq!(app.pane, Pane::Charts);
    app
}

/// A snapshot of one hand-built workflow, as the overview would list it.
fn snapshot_of(detail: WorkflowHistory) -> Snapshot {
    let rows = detail
        .attempts
        .iter()
        .map(|attempt| AttemptRow {
            workflow_id: detail.workflow.id,
            workflow: detail.workflow.name.clone(),
            user: "alice".into(),
            partition: None,
            backend: runguard_engine::model::BackendKind::Sim,
            attempt: attempt.clone(),
            checkpoints: 0,
            last_checkpoint: None,
            anomalies: vec![],
            attribution: None,
        })
        .collect();
    Snapshot {
        rows,
        details: vec![detail],
        ..Snapshot::default()
    }
}

#[test]
fn keys_3_and_4_open_the_charts_and_the_timeline_and_the_others_move_up() {
    let app = App::new("alice".into(), true);
    let key = |c| app.action_for_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
    assert_eq!(key('3'), Some(UiAction::Show(Pane::Charts)));
    assert_eq!(key('4'), Some(UiAction::Show(Pane::Timeline)));
    assert_eq!(key('5'), Some(UiAction::Show(Pane::Approvals)));
    assert_eq!(key('6'), Some(UiAction::Show(Pane::Notifications)));
    assert_eq!(
        Pane::ALL.map(Pane::title),
        [
            "Workflows",
            "Details",
            "Charts",
            "Timeline",
            "Approvals",
            "Notifications",
            "Log",
            "Compare",
            "Nodes",
            "Usage"
        ]
    );
    assert_eq!(key('7'), Some(UiAction::Show(Pane::Log)));
    assert_eq!(key('8'), Some(UiAction::Show(Pane::Compare)));
    assert_eq!(key('9'), Some(UiAction::Show(Pane::Nodes)));
}

#[test]
fn a_failed_run_charts_its_throughput_the_crash_and_its_checkpoints() {
    let (_dir, store, now) = failed_and_proposed();
    let policy = Policy::from_config(&Config::default().recovery, true);
    let snapshot = Snapshot::load(&store.db(), &policy, Some(1)).unwrap();
    let app = show_charts(&snapshot, now);
    let text = render(&app, &snapshot, now, 140, 44);
    let detail = &snapshot.details[0];
    let first = detail.anomalies[0].kind.as_str();
    for expected in [
        "3 Charts",
        "llama3-8b-pretrain · throughput",
        "TFLOP/s/GPU",
        "time (UTC)",
        "━ attempt 0",
        "▲ anomaly",
        first,
        "Checkpoints · iteration saved",
        "iteration",
        "last: iteration 300",
        "08:00",
    ] {
        assert!(text.contains(expected), "{expected:?} missing:\n{text}");
    }
    // The y axis reaches a tenth above the highest reported throughput.
    let highest = detail
        .throughput
        .iter()
        .map(|s| s.tflops_per_gpu)
        .fold(0.0, f64::max);
    assert!(highest > 300.0, "{highest}");
    assert!(text.contains(&format!("{:.0}", ceiling(highest))), "{text}");
}

#[test]
fn a_recovered_run_draws_one_line_per_attempt() {
    let (_dir, snapshot, now) = recovered();
    let app = show_charts(&snapshot, now);
    let text = render(&app, &snapshot, now, 140, 44);
    assert!(text.contains("━ attempt 0"), "{text}");
    assert!(text.contains("━ attempt 1"), "{text}");
    assert!(text.contains("last: iteration 600"), "{text}");
}

#[test]
fn without_samples_the_chart_says_no_throughput_reported_yet() {
    let pending = history(
        WorkflowStatus::Enabled,
        vec![attempt(0, JobState::Running, [Some(0), Some(10), None])],
    );
    let snapshot = snapshot_of(pending);
    let app = show_charts(&snapshot, t(60));
    let text = render(&app, &snapshot, t(60), 100, 30);
    assert!(text.contains("no throughput reported yet"), "{text}");
    assert!(text.contains("no checkpoint saved yet"), "{text}");
    assert!(text.contains("no anomaly"), "{text}");
}

#[test]
fn one_sample_is_drawn_on_a_widened_axis() {
    let mut one = history(
        WorkflowStatus::Completed,
        vec![attempt(0, JobState::Completed, [Some(0), None, None])],
    );
    one.throughput = vec![sample(0, 10, 30, 380.0)];
    let axis = TimeAxis::of(&one, t(999)).unwrap();
    assert_eq!((axis.from, axis.to), (t(-30), t(90)));
    let snapshot = snapshot_of(one);
    let app = show_charts(&snapshot, t(999));
    let text = render(&app, &snapshot, t(999), 100, 30);
    assert!(text.contains("TFLOP/s/GPU"), "{text}");
    assert!(text.contains("418"), "{text}");
    assert!(text.contains("07:59"), "{text}");
}

#[test]
fn series_are_split_by_attempt_and_anomalies_sit_on_their_attempt_s_line() {
    let mut two = history(
        WorkflowStatus::Completed,
        vec![
            attempt(0, JobState::Failed, [Some(0), Some(0), Some(100)]),
            attempt(1, JobState::Completed, [Some(110), Some(120), Some(300)]),
        ],
    );
    two.throughput = vec![
        sample(0, 10, 20, 400.0),
        sample(0, 20, 40, 200.0),
        sample(1, 30, 150, 390.0),
    ];
    two.anomalies = vec![
        anomaly(0, AnomalyKind::ThroughputDrop, 50),
        anomaly(1, AnomalyKind::Straggler, 130),
    ];
    let axis = TimeAxis::of(&two, t(999)).unwrap();
    assert_eq!((axis.from, axis.to), (t(0), t(150)));
    assert_eq!(
        throughput_series(&two, &axis),
        vec![
            (0, vec![(20.0, 400.0), (40.0, 200.0)]),
            (1, vec![(150.0, 390.0)])
        ]
    );
    // The drop sits on attempt 0's last sample before it; the straggler, raised before attempt
    // 1 reported, on its first.
    assert_eq!(
        anomaly_points(&two, &axis),
        vec![(50.0, 200.0), (130.0, 390.0)]
    );
    assert_eq!(attempt_boundaries(&two, &axis), vec![120.0]);
    assert_eq!(axis.labels(), vec!["08:00", "08:01", "08:02"]);
}

#[test]
fn checkpoints_make_a_staircase_of_the_latest_saved_iteration() {
    let mut saved = history(
        WorkflowStatus::Enabled,
        vec![attempt(0, JobState::Running, [Some(0), Some(0), None])],
    );
    saved.checkpoints = vec![checkpoint(0, 200, 80), checkpoint(0, 100, 40)];
    let axis = TimeAxis::of(&saved, t(120)).unwrap();
    assert_eq!(
        checkpoint_steps(&saved, &axis),
        vec![
            (0.0, 0.0),
            (40.0, 0.0),
            (40.0, 100.0),
            (80.0, 100.0),
            (80.0, 200.0),
            (120.0, 200.0)
        ]
    );
    assert_eq!(ceiling(200.0), 220.0);
    assert_eq!(ceiling(0.0), 1.0);
    assert_eq!(value_labels(220.0), vec!["0", "110", "220"]);
}
