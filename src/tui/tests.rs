//! Every pane drawn on ratatui's `TestBackend` from a store the simulated cluster filled, with the
//! buffer's text checked.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::app::{App, Pane, UiAction};
use super::panes;
use super::snapshot::Snapshot;
use super::theme::Theme;
use runguard_engine::attribute::Catalog;
use runguard_engine::backend::Backend;
use runguard_engine::backend::sim::{Scenario, SimCluster, SimOptions};
use runguard_engine::clock::{Clock, ManualClock};
use runguard_engine::config::Config;
use runguard_engine::engine::{Engine, EngineOptions};
use runguard_engine::recover::Policy;
use runguard_engine::store::Store;

/// An engine over the NCCL-timeout scenario in `dir`, on a manual clock starting at `start`, with the
/// store `store`.
pub(super) fn sim_engine(
    dir: &std::path::Path,
    store: Store,
    start: DateTime<Utc>,
    auto: bool,
) -> (Engine, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(start));
    let sim = SimCluster::open(
        SimOptions {
            dir: dir.join("sim"),
            scenario: Scenario::builtin("nccl-timeout").unwrap(),
            seed: 42,
            nodes: 16,
        },
        Arc::clone(&clock) as Arc<dyn Clock>,
    )
    .unwrap();
    // The panes are shown a failed attempt: the job runs into its watchdog rather than being failed
    // on its IB error while it still runs.
    let mut config = Config::default();
    config.detect.fatal_confirm_max_secs = 0;
    let engine = Engine::new(
        store,
        Arc::new(sim) as Arc<dyn Backend>,
        Arc::clone(&clock) as Arc<dyn Clock>,
        config,
        Catalog::builtin().unwrap(),
        EngineOptions { auto },
    );
    (engine, clock)
}

/// Ticks `engine` every five simulated seconds until `done` says so (at most `ticks` times).
pub(super) fn tick_until(
    engine: &mut Engine,
    clock: &ManualClock,
    ticks: usize,
    done: impl Fn(&Engine) -> bool,
) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for _ in 0..ticks {
        runtime.block_on(engine.tick()).unwrap();
        if done(engine) {
            return;
        }
        clock.advance(Duration::from_secs(5));
    }
}

/// A store after the NCCL-timeout scenario ran until its failure was decided, without `--auto`: the
/// requeue waits for approval.
pub(super) fn failed_and_proposed() -> (tempfile::TempDir, Store, DateTime<Utc>) {
    let dir = tempfile::tempdir().unwrap();
    let start = DateTime::parse_from_rfc3339("2026-01-05T08:00:00Z")
        .unwrap()
        .with_timezone(&Utc);
    let db = dir.path().join("runguard.sqlite");
    let (mut engine, clock) = sim_engine(dir.path(), Store::open(&db).unwrap(), start, false);
    tick_until(&mut engine, &clock, 600, |engine| {
        !engine
            .store()
            .db()
            .actions(1)
            .unwrap_or_default()
            .is_empty()
    });
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
    super::drawn_text(width, height, |frame| {
        panes::draw(frame, app, snapshot, &theme, now)
    })
}

fn setup() -> (tempfile::TempDir, Snapshot, DateTime<Utc>) {
    let (dir, store, now) = failed_and_proposed();
    let policy = Policy::from_config(&Config::default().recovery, true);
    let snapshot = Snapshot::load(&store.db(), &policy, Some(1)).unwrap();
    (dir, snapshot, now)
}

#[test]
fn the_overview_shows_the_failed_attempt_with_its_anomaly_marker_and_attribution() {
    let (_dir, snapshot, now) = setup();
    let app = App::new("alice".into(), true);
    let text = render(&app, &snapshot, now, 130, 30);
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
    // Every tab stays in view, with its short name.
    assert!(text.lines().next().unwrap().contains("9 Node"), "{text}");
    assert!(text.contains("Workflows"), "{text}");
}

#[test]
fn the_nodes_pane_shows_the_ledger_with_the_node_the_failure_named() {
    let (_dir, snapshot, now) = setup();
    let mut app = App::new("alice".into(), true);
    app.update(UiAction::Show(Pane::Nodes), &snapshot, now);
    let text = render(&app, &snapshot, now, 120, 30);
    assert!(
        text.contains("Nodes · 1 in the ledger · 0 quarantined"),
        "{text}"
    );
    assert!(text.contains("node-07"), "{text}");
    // An NCCL timeout only names its node: suspect, not quarantined.
    assert!(text.contains("suspect"), "{text}");
    assert!(text.contains("nccl_timeout"), "{text}");
    assert!(text.contains("attribution (job 4201)"), "{text}");
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
        "cluster       sim",
        "cpus          448",
        "memory        8192G",
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
fn a_kubernetes_workload_shows_its_kind_namespace_and_pods_per_node() {
    let (dir, mut store, now) = failed_and_proposed();
    // A workflow keeps its backend for life; the store offers no way to change it.
    rusqlite::Connection::open(dir.path().join("runguard.sqlite"))
        .unwrap()
        .execute(
            "UPDATE workflows SET backend = 'kubernetes' WHERE id = 1",
            [],
        )
        .unwrap();
    store
        .write(|db| {
            let mut workflow = db.workflow(1)?.unwrap();
            workflow.spec.partition = Some("ml".into());
            workflow.spec.nodes = 3;
            db.update_workflow(&workflow)?;
            let mut attempt = db.attempts(1)?.remove(0);
            attempt.job_id = "pytorchjob/ml/llama3-8b-pretrain".into();
            attempt.nodes = vec!["gpu-1".into(), "gpu-1".into(), "gpu-2".into()];
            db.save_attempt(&attempt)
        })
        .unwrap();
    let policy = Policy::from_config(&Config::default().recovery, true);
    let snapshot = Snapshot::load(&store.db(), &policy, Some(1)).unwrap();
    let mut app = App::new("alice".into(), true);
    app.update(UiAction::Enter, &snapshot, now);
    let text = render(&app, &snapshot, now, 160, 50);
    for expected in [
        "pytorchjob/ml/llama3-8b-pretrain (attempt 0)",
        "workload      llama3-8b-pretrain (pytorchjob)",
        "namespace     ml",
        "pods          3 of 3 replicas (gpu-1 ×2, gpu-2 ×1)",
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

#[test]
fn the_log_pane_follows_the_attempt_s_log_and_marks_the_attribution_s_evidence() {
    let (_dir, snapshot, now) = setup();
    let mut app = App::new("alice".into(), true);
    app.update(UiAction::Show(Pane::Log), &snapshot, now);
    let path = app
        .focused(&snapshot, now)
        .and_then(|row| row.attempt.log_path.clone());
    app.log_height = 26;
    app.log.reload(path.as_deref(), app.log_height);
    assert!(app.log.follow);
    let text = render(&app, &snapshot, now, 160, 30);
    assert!(text.contains("· following"), "{text}");
    assert!(text.contains("» "), "an evidence line is marked:\n{text}");
    assert!(
        text.contains("Watchdog caught collective operation timeout"),
        "{text}"
    );
    app.update(UiAction::Top, &snapshot, now);
    assert!(!app.log.follow);
    app.update(UiAction::NextError, &snapshot, now);
    let text = render(&app, &snapshot, now, 160, 30);
    assert!(text.contains("f: follow"), "{text}");
}

#[test]
fn compare_puts_selected_attempts_side_by_side() {
    let (dir, store, now) = failed_and_proposed();
    let _keep = dir;
    let policy = Policy::from_config(&Config::default().recovery, true);
    let snapshot = Snapshot::load(&store.db(), &policy, Some(1)).unwrap();
    let mut app = App::new("alice".into(), true);
    app.update(UiAction::Show(Pane::Compare), &snapshot, now);
    let text = render(&app, &snapshot, now, 140, 30);
    assert!(text.contains("0 attempt(s) selected"), "{text}");
    // The one attempt selected twice over: a second workflow would do the same.
    app.update(UiAction::Show(Pane::Overview), &snapshot, now);
    app.update(UiAction::ToggleSelect, &snapshot, now);
    let mut twice = snapshot.clone();
    let mut other = twice.rows[0].clone();
    other.attempt.index = 1;
    other.attempt.job_id = "4202".into();
    other.attempt.state = runguard_engine::model::JobState::Running;
    other.attempt.state_raw = "RUNNING".into();
    other.anomalies.clear();
    twice.rows.push(other);
    app.selected.insert((1, 1));
    app.update(UiAction::Show(Pane::Compare), &twice, now);
    let text = render(&app, &twice, now, 160, 30);
    assert!(text.contains("Compare · 2 attempts"), "{text}");
    assert!(text.contains("4201.0"), "{text}");
    assert!(text.contains("4202.1"), "{text}");
    assert!(text.contains("TFLOP/s/GPU"), "{text}");
    assert!(
        text.contains("FAILED") && text.contains("RUNNING"),
        "{text}"
    );
    assert!(text.contains("nccl_timeout on node-07"), "{text}");
}

#[test]
fn a_click_on_a_heading_finds_its_column() {
    let (_dir, snapshot, now) = setup();
    let app = App::new("alice".into(), true);
    let text = render(&app, &snapshot, now, 120, 30);
    let header = text.lines().nth(2).unwrap();
    for (heading, column) in [
        ("JOB.ATT", super::app::Column::Job),
        ("STATE", super::app::Column::State),
        ("DURATION", super::app::Column::Duration),
    ] {
        let x = header.find(heading).unwrap();
        // Byte offsets are columns here: the heading line's border is the only wide character before.
        let x = header[..x].chars().count() as u16;
        assert_eq!(
            panes::overview::column_at(&app, 120, x + 1),
            Some(column),
            "{heading} in {header}"
        );
    }
}

#[test]
fn r_opens_the_recovery_report_of_the_focused_workflow_with_its_kept_narrative() {
    let (_dir, mut store, now) = failed_and_proposed();
    let crash = store.db().anomalies(1).unwrap()[0].clone();
    store
        .write(|db| {
            db.save_narrative(&runguard_engine::model::Narrative {
                workflow_id: 1,
                anomaly_id: crash.id,
                source: "model test at http://127.0.0.1:8000".into(),
                text: "node-07's InfiniBand link failed mid-collective.".into(),
                created_at: now,
            })
        })
        .unwrap();
    let policy = Policy::from_config(&Config::default().recovery, true);
    let snapshot = Snapshot::load(&store.db(), &policy, Some(1)).unwrap();
    let mut app = App::new("alice".into(), true);
    let key = |app: &App, code| {
        app.action_for_key(ratatui::crossterm::event::KeyEvent::new(
            code,
            ratatui::crossterm::event::KeyModifiers::NONE,
        ))
    };
    use ratatui::crossterm::event::KeyCode;
    let open = key(&app, KeyCode::Char('R')).unwrap();
    assert_eq!(open, UiAction::ToggleReport);
    app.update(open, &snapshot, now);
    let text = render(&app, &snapshot, now, 150, 64);
    for expected in [
        "Recovery report · llama3-8b-pretrain · j/k scroll · Esc closes",
        "Recovery report: workflow 1 llama3-8b-pretrain (sim)",
        "status:    recovering",
        "advice:      every",
        "Failure 1 of 1: crash of attempt 0 (job 4201)",
        "Watchdog caught collective operation timeout",
        "attribution: nccl_timeout (network), culprit node-07",
        "would have done (not permitted or never approved):",
        "ExcNodeList=node-07",
        "the engine runs without --auto; waiting for approval (`runguard approve 1`)",
        "drain_node: proposed, not in the recovery whitelist; waiting for approval",
        "NodeName=node-07",
        "detection",
        "so far since the failure at",
        "still running",
    ] {
        assert!(text.contains(expected), "{expected:?} missing:\n{text}");
    }
    // The overlay scrolls to the report's end and back, and keys move it, not the workflows.
    assert_eq!(key(&app, KeyCode::Char('G')), Some(UiAction::Bottom));
    app.update(UiAction::Bottom, &snapshot, now);
    let view = app.report.clone().unwrap();
    assert!(
        view.scroll > 0 && view.scroll == view.max_scroll.get(),
        "{view:?}"
    );
    let text = render(&app, &snapshot, now, 150, 64);
    assert!(
        !text.contains("Recovery report: workflow 1"),
        "scrolled past the top: {text}"
    );
    assert!(
        text.contains(
            "Narrative (written by a language model from the evidence above; runguard did not use it"
        ),
        "{text}"
    );
    assert!(
        text.contains("node-07's InfiniBand link failed mid-collective."),
        "{text}"
    );
    app.update(UiAction::Up, &snapshot, now);
    assert_eq!(
        app.report.as_ref().unwrap().scroll,
        view.max_scroll.get() - 1
    );
    assert_eq!(app.cursor, 0);
    assert_eq!(key(&app, KeyCode::Esc), Some(UiAction::ToggleReport));
    app.update(UiAction::ToggleReport, &snapshot, now);
    assert!(app.report.is_none());
    let text = render(&app, &snapshot, now, 150, 60);
    assert!(!text.contains("Recovery report"), "{text}");
    // The key is listed in the help.
    app.update(UiAction::ToggleHelp, &snapshot, now);
    let text = render(&app, &snapshot, now, 100, 40);
    assert!(
        text.contains("recovery report of the focused workflow"),
        "{text}"
    );
}
