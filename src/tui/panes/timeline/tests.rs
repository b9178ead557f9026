use super::*;
use crate::tui::app::{App, Pane, UiAction};
use crate::tui::snapshot::Snapshot;
use crate::tui::tests::{failed_and_proposed, render, sim_engine, tick_until};
use runguard_engine::clock::Clock;
use runguard_engine::config::Config;
use runguard_engine::model::{ActionState, WorkflowStatus};
use runguard_engine::recover::Policy;
use runguard_engine::store::CommandKind;

/// The NCCL-timeout scenario after the user approved the proposed actions and the engine ran on
/// until the workflow completed: two attempts, one recovery.
pub(crate) fn recovered() -> (tempfile::TempDir, Snapshot, DateTime<Utc>) {
    let (dir, store, now) = failed_and_proposed();
    for action in store.db().actions(1).unwrap() {
        if action.state == ActionState::Proposed {
            store
                .db()
                .push_command(CommandKind::Approve, action.id, now)
                .unwrap();
        }
    }
    // The same simulated cluster goes on, now with `--auto`, until the run completes.
    let (mut engine, clock) = sim_engine(dir.path(), store, now, true);
    tick_until(&mut engine, &clock, 2000, |engine| {
        engine
            .store()
            .db()
            .workflow(1)
            .unwrap()
            .is_some_and(|w| w.status == WorkflowStatus::Completed)
    });
    let now = clock.now();
    let policy = Policy::from_config(&Config::default().recovery, false);
    let snapshot = Snapshot::load(&engine.store().db(), &policy, Some(1)).unwrap();
    (dir, snapshot, now)
}

fn show_timeline(snapshot: &Snapshot, now: DateTime<Utc>) -> App {
    let mut app = App::new("alice".into(), true);
    app.update(UiAction::Show(Pane::Timeline), snapshot, now);
    assert_eq!(app.pane, Pane::Timeline);
    app
}

#[test]
fn a_recovered_workflow_shows_both_attempts_every_gap_and_its_goodput() {
    let (_dir, snapshot, now) = recovered();
    let detail = &snapshot.details[0];
    assert_eq!(detail.attempts.len(), 2, "{:?}", detail.attempts);
    assert_eq!(detail.workflow.status, WorkflowStatus::Completed);
    let app = show_timeline(&snapshot, now);
    let text = render(&app, &snapshot, now, 140, 30);
    let expected_goodput = goodput(detail, now).unwrap().ratio() * 100.0;
    for expected in [
        "4 Timeline",
        "llama3-8b-pretrain · attempts timeline",
        "attempt 0 FAILED",
        "attempt 1 COMPLETED",
        "recovery",
        "Recovery gaps (seconds)",
        "detection",
        "analysis",
        "requeue",
        "pending",
        "checkpoint load",
        "0 → 1",
        "it from 300,",
        &format!("goodput {expected_goodput:.1}%"),
    ] {
        assert!(text.contains(expected), "{expected:?} missing:\n{text}");
    }
    let recovery = &recoveries(detail, now)[0];
    assert_eq!(recovery.resumed_from, Some(300));
    assert!(recovery.lost_iterations >= 40, "{recovery:?}");
    // Every gap of a finished recovery was measured.
    assert_eq!(recovery.gaps.len(), GapKind::ALL.len(), "{recovery:?}");
    let requeue_seconds = recovery
        .gap(GapKind::Requeue)
        .unwrap()
        .duration()
        .num_seconds();
    assert!(text.contains(&format!("{requeue_seconds}s")), "{text}");
}

#[test]
fn a_recovery_waiting_for_approval_shows_its_requeue_gap_running() {
    let (_dir, store, now) = failed_and_proposed();
    let policy = Policy::from_config(&Config::default().recovery, true);
    let snapshot = Snapshot::load(&store.db(), &policy, Some(1)).unwrap();
    let app = show_timeline(&snapshot, now);
    let text = render(&app, &snapshot, now, 120, 30);
    assert!(text.contains("attempt 0 FAILED"), "{text}");
    assert!(text.contains("0 → …"), "{text}");
    assert!(text.contains("s…"), "an ongoing gap is marked:\n{text}");
    assert!(text.contains("lost work: "), "{text}");
}

#[test]
fn a_scale_keeps_a_short_gap_visible_and_inside_the_bar() {
    let from = DateTime::parse_from_rfc3339("2026-01-05T08:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    let scale = Scale {
        from,
        to: from + TimeDelta::seconds(1000),
        width: 100,
    };
    assert_eq!(scale.cells(from, from + TimeDelta::seconds(500)), 0..50);
    assert_eq!(
        scale.cells(
            from + TimeDelta::seconds(501),
            from + TimeDelta::seconds(502)
        ),
        50..51
    );
    assert_eq!(
        scale.cells(
            from + TimeDelta::seconds(990),
            from + TimeDelta::seconds(2000)
        ),
        99..100
    );
    assert_eq!(scale.cells(from, from), 0..0);
}

#[test]
fn the_time_axis_labels_start_middle_and_end() {
    let from = DateTime::parse_from_rfc3339("2026-01-05T08:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    let axis = time_axis(from, from + TimeDelta::minutes(60), 40);
    assert_eq!(axis.chars().count(), 40);
    assert!(axis.starts_with("08:00"), "{axis:?}");
    assert!(axis.contains("08:30"), "{axis:?}");
    assert!(axis.ends_with("09:00"), "{axis:?}");
}
