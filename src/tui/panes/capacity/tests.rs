use chrono::{DateTime, Utc};
use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

use super::*;
use crate::tui::app::{App, Pane, UiAction};
use crate::tui::tests::{failed_and_proposed, render};
use runguard_engine::capacity::simulated;
use runguard_engine::store::Store;

fn shown(snapshot: &Snapshot, now: DateTime<Utc>) -> App {
    let mut app = App::new("alice".into(), true);
    let key = app.action_for_key(KeyEvent::new(KeyCode::Char('0'), KeyModifiers::NONE));
    assert_eq!(key, Some(UiAction::Show(Pane::Capacity)));
    app.update(UiAction::Show(Pane::Capacity), snapshot, now);
    assert_eq!(app.pane, Pane::Capacity);
    app
}

fn monday() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-02T00:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

#[test]
fn without_listings_the_pane_says_what_it_waits_for() {
    let store = Store::open_in_memory().unwrap();
    let mut snapshot = Snapshot::default();
    ensure(&mut snapshot, &store.db()).unwrap();
    assert!(snapshot.capacity.is_none());
    let app = shown(&snapshot, monday());
    let text = render(&app, &snapshot, monday(), 120, 30);
    assert!(text.contains("no capacity history yet"), "{text}");
    assert!(text.contains("0 Use"), "{text}");
}

#[test]
fn a_simulated_week_draws_its_waits_idle_gpus_and_demand_by_hour() {
    let week = simulated::month(5, monday(), 7);
    let mut store = Store::open_in_memory().unwrap();
    week.store(&mut store).unwrap();
    let mut snapshot = Snapshot::default();
    ensure(&mut snapshot, &store.db()).unwrap();
    let report = snapshot.capacity.clone().unwrap();
    // The window ends just after the last listing, and the next read without a new one keeps it.
    assert_eq!(
        report.window.to,
        week.instants.last().unwrap().time + TimeDelta::seconds(1)
    );
    ensure(&mut snapshot, &store.db()).unwrap();
    assert!(Arc::ptr_eq(&report, snapshot.capacity.as_ref().unwrap()));

    let now = week.end;
    let app = shown(&snapshot, now);
    let text = render(&app, &snapshot, now, 160, 50);
    for expected in [
        " Capacity · 02-06 23:55 – 03-08 23:55 UTC ".to_string(),
        "mean queue wait (min) by hour of submission".to_string(),
        "GPUs idle while jobs wait, by hour".to_string(),
        "GPUs asked for by hour".to_string(),
        format!(
            "idle while waiting {:.0} GPU-h",
            report.idle.idle_while_waiting_gpu_hours
        ),
        format!("lost to quarantine {:.0} GPU-h", report.lost.gpu_hours),
        "• Reserve pool:".to_string(),
        "00 01 02".to_string(),
    ] {
        assert!(text.contains(&expected), "{expected:?} not in\n{text}");
    }
    // The longest mean wait of an hour is printed on its bar.
    let longest = report
        .waits
        .all
        .by_hour
        .iter()
        .flatten()
        .fold(0.0f64, |a, b| a.max(*b));
    assert!(text.contains(&format!("{longest:.0}")), "{text}");
}

#[test]
fn the_engine_records_a_listing_the_pane_reads() {
    let (_dir, store, now) = failed_and_proposed();
    let mut snapshot = Snapshot::default();
    ensure(&mut snapshot, &store.db()).unwrap();
    let report = snapshot.capacity.clone().unwrap();
    // The simulated job was listed: waiting or running, it asked for GPUs at some hour; the simulated
    // nodes were listed with it, their GPUs allocated or idle.
    assert!(report.peaks.demand_by_hour.iter().any(|d| *d > 0.0));
    let listed: f64 = report
        .idle
        .gpu_hours_by_state
        .iter()
        .map(|s| s.gpu_hours)
        .sum();
    assert!(listed > 0.0, "{:?}", report.idle);
    let app = shown(&snapshot, now);
    let text = render(&app, &snapshot, now, 140, 44);
    assert!(text.contains("queue wait median"), "{text}");
}

#[test]
fn a_small_terminal_still_shows_the_pane_and_its_figures() {
    let week = simulated::month(5, monday(), 7);
    let mut store = Store::open_in_memory().unwrap();
    week.store(&mut store).unwrap();
    let mut snapshot = Snapshot::default();
    ensure(&mut snapshot, &store.db()).unwrap();
    let app = shown(&snapshot, week.end);
    let text = render(&app, &snapshot, week.end, 60, 20);
    assert!(text.contains("Capacity"), "{text}");
    assert!(text.contains("queue wait"), "{text}");
}
