//! Every pane drawn on ratatui's `TestBackend` from a store the simulated cluster filled, with the
//! buffer's text checked.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use ratatui::Terminal;
use ratatui::backend::TestBackend;

use super::app::{App, Pane, UiAction};
use super::panes;
use super::snapshot::Snapshot;
use super::theme::Theme;
use crate::attribute::Catalog;
use crate::backend::Backend;
use crate::backend::sim::{Scenario, SimCluster, SimOptions};
use crate::clock::{Clock, ManualClock};
use crate::config::Config;
use crate::engine::{Engine, EngineOptions};
use crate::recover::Policy;
use crate::store::Store;

/// A store after the NCCL-timeout scenario ran until its failure was decided, without `--auto`: the
/// requeue waits for approval.
pub(super) fn failed_and_proposed() -> (tempfile::TempDir, Store, DateTime<Utc>) {
    let dir = tempfile::tempdir().unwrap();
    let start = DateTime::parse_from_rfc3339("2026-01-05T08:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    let clock = Arc::new(ManualClock::new(start));
    let sim = SimCluster::open(
        SimOptions {
            dir: dir.path().join("sim"),
            scenario: Scenario::builtin("nccl-timeout").unwrap(),
            seed: 42,
            nodes: 16,
        },
        Arc::clone(&clock) as Arc<dyn Clock>,
    )
    .unwrap();
    let db = dir.path().join("runguard.sqlite");
    let mut engine = Engine::new(
        Store::open(&db).unwrap(),
        Arc::new(sim) as Arc<dyn Backend>,
        Arc::clone(&clock) as Arc<dyn Clock>,
        Config::default(),
        Catalog::builtin().unwrap(),
        EngineOptions { auto: false },
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for _ in 0..600 {
        runtime.block_on(engine.tick()).unwrap();
        if !engine
            .store()
            .db()
            .actions(1)
            .unwrap_or_default()
            .is_empty()
        {
            break;
        }
        clock.advance(Duration::from_secs(5));
    }
    let now = clock.now();
    drop(engine);
    (dir, Store::open(&db).unwrap(), now)
}

pub(super) fn render(
    app: &App,
    snapshot: &Snapshot,
    now: DateTime<Utc>,
    width: u16,
    height: u16,
) -> String {
    let theme = Theme::load("dark", None).unwrap();
    let mut terminal = Terminal::new(TestBackend::new(width, height)).unwrap();
    terminal
        .draw(|frame| panes::draw(frame, app, snapshot, &theme, now))
        .unwrap();
    let buffer = terminal.backend().buffer();
    let mut text = String::new();
    for y in 0..buffer.area.height {
        for x in 0..buffer.area.width {
            text.push_str(buffer[(x, y)].symbol());
        }
        text.push('\n');
    }
    text
}

fn setup() -> (tempfile::TempDir, Snapshot, DateTime<Utc>) {
    let (dir, store, now) = failed_and_proposed();
    let policy = Policy::from_config(&Config::default().recovery, true);
    let snapshot = Snapshot::load(&store.db(), &policy, now).unwrap();
    (dir, snapshot, now)
}

#[test]
fn the_overview_shows_the_failed_attempt_with_its_anomaly_marker_and_attribution() {
    let (_dir, snapshot, now) = setup();
    let app = App::new("alice".into(), true);
    let text = render(&app, &snapshot, now, 120, 30);
    assert!(text.contains("1 Workflows"), "{text}");
    assert!(text.contains("5 Approvals (2)"), "{text}");
    assert!(text.contains("JOB.ATT"), "{text}");
    assert!(text.contains("4201.0"), "{text}");
    assert!(text.contains("llama3-8b-pretrain"), "{text}");
    assert!(text.contains("FAILED ▲"), "{text}");
    assert!(text.contains("nccl_timeout on node-07"), "{text}");
}

#[test]
fn the_overview_fits_80_by_24() {
    let (_dir, snapshot, now) = setup();
    let app = App::new("alice".into(), true);
    let text = render(&app, &snapshot, now, 80, 24);
    assert!(text.contains("4201.0"), "{text}");
    assert!(text.contains("Workflows"), "{text}");
}

#[test]
fn details_show_the_attempt_its_hardware_recovery_and_the_attribution_with_evidence() {
    let (_dir, snapshot, now) = setup();
    let mut app = App::new("alice".into(), true);
    app.update(UiAction::Enter, &snapshot, now);
    assert_eq!(app.pane, Pane::Details);
    let text = render(&app, &snapshot, now, 160, 50);
    for expected in [
        "4201 (attempt 0)",
        "alice",
        "FAILED",
        "node-05,node-06,node-07,node-08",
        "requeues",
        "0 of 3",
        "Attribution",
        "nccl_timeout",
        "on node-07",
        "NCCL WARN",
        "TFLOP/s/GPU",
    ] {
        assert!(text.contains(expected), "{expected:?} missing:\n{text}");
    }
}

#[test]
fn approvals_show_why_the_command_the_whitelist_and_the_evidence() {
    let (_dir, snapshot, now) = setup();
    let mut app = App::new("alice".into(), true);
    app.update(UiAction::Show(Pane::Approvals), &snapshot, now);
    let text = render(&app, &snapshot, now, 140, 40);
    assert!(text.contains("Waiting for approval · 2"), "{text}");
    assert!(text.contains("requeue"), "{text}");
    assert!(text.contains("ExcNodeList=node-07"), "{text}");
    assert!(text.contains("whitelist permits it"), "{text}");
    assert!(text.contains("a approve · x reject"), "{text}");
    let effect = app.update(UiAction::Approve, &snapshot, now);
    assert_eq!(effect, super::app::Effect::Approve(1));
}

#[test]
fn notifications_are_the_current_user_s_unless_all_are_asked_for() {
    let (_dir, snapshot, now) = setup();
    let mut app = App::new("bob".into(), true);
    app.update(UiAction::Show(Pane::Notifications), &snapshot, now);
    let text = render(&app, &snapshot, now, 120, 30);
    assert!(text.contains("Notifications · 0 · user bob"), "{text}");
    app.update(UiAction::ToggleAllUsers, &snapshot, now);
    let text = render(&app, &snapshot, now, 120, 30);
    assert!(text.contains("all users"), "{text}");
    assert!(text.contains("nccl_timeout"), "{text}");
}

#[test]
fn help_lists_the_keys_over_the_pane() {
    let (_dir, snapshot, now) = setup();
    let mut app = App::new("alice".into(), true);
    app.update(UiAction::ToggleHelp, &snapshot, now);
    let text = render(&app, &snapshot, now, 100, 36);
    assert!(text.contains("Keys (? or Esc to close)"), "{text}");
    assert!(
        text.contains("approve / reject the proposed action"),
        "{text}"
    );
    assert!(text.contains(":filter k=v"), "{text}");
}

#[test]
fn search_filters_and_sorts_change_the_rows() {
    let (_dir, snapshot, now) = setup();
    let mut app = App::new("alice".into(), true);
    for action in [
        UiAction::StartSearch,
        UiAction::Type('z'),
        UiAction::Type('z'),
    ] {
        app.update(action, &snapshot, now);
    }
    assert!(app.visible_rows(&snapshot, now).is_empty());
    app.update(UiAction::Dismiss, &snapshot, now);
    assert_eq!(app.visible_rows(&snapshot, now).len(), 1);
    for c in "filter state=running".chars() {
        app.update(UiAction::Type(c), &snapshot, now);
    }
    app.mode = super::app::Mode::Command;
    app.update(UiAction::Confirm, &snapshot, now);
    assert!(
        app.visible_rows(&snapshot, now).is_empty(),
        "{:?}",
        app.filters
    );
    let text = render(&app, &snapshot, now, 120, 30);
    assert!(text.contains("state=running"), "{text}");
    app.mode = super::app::Mode::Command;
    for c in "sort duration desc".chars() {
        app.update(UiAction::Type(c), &snapshot, now);
    }
    app.update(UiAction::Confirm, &snapshot, now);
    let text = render(&app, &snapshot, now, 120, 30);
    assert!(text.contains("DURATION▼"), "{text}");
}
