//! The scheduler is asked at most once per poll interval, whatever the logs do.

use crate::support::{EngineRig, append, job};

#[tokio::test]
async fn log_wake_ups_between_two_polls_read_the_log_but_do_not_list_the_jobs() {
    let mut rig = EngineRig::default();
    // Polling only: every tick reads every log, so the test does not wait for inotify's events.
    rig.config.engine.file_events = false;
    let log = rig.path().join("train.log");
    append(&log, "iteration 1/100 | loss 1.0\n");
    rig.backend
        .add([job("4201").running_on(["n1", "n2"]).log(&log)]);
    let mut engine = rig.engine();
    rig.step(&mut engine, 1).await;
    assert_eq!(rig.backend.listings(), 1);
    // A line a second for four seconds: each wake-up reads the log, none asks the scheduler.
    for second in 2..=5 {
        append(&log, &format!("iteration {second}/100 | loss 1.0\n"));
        rig.step(&mut engine, 1).await;
    }
    assert_eq!(rig.backend.listings(), 1, "{:#?}", rig.backend.calls());
    let attempts = rig.store().db().attempts(1).unwrap();
    assert_eq!(attempts[0].last_iteration, Some(5), "the lines were read");
    // The poll interval (5 s) is over: the next tick lists again.
    rig.step(&mut engine, 1).await;
    assert_eq!(rig.backend.listings(), 2);
}

#[tokio::test]
async fn node_states_are_asked_for_the_running_jobs_nodes_only_and_less_often() {
    let rig = EngineRig::default();
    rig.backend.add([job("4201").running_on(["n1", "n2"])]);
    rig.backend.add([job("4202").pending("Resources")]);
    let mut engine = rig.engine();
    for _ in 0..12 {
        rig.step(&mut engine, 5).await;
    }
    let asked: Vec<Vec<String>> = rig
        .backend
        .calls()
        .into_iter()
        .filter_map(|recorded| match recorded.call {
            crate::support::backend::Call::DeadNodes(nodes) => Some(nodes),
            _ => None,
        })
        .collect();
    // One minute: twelve listings, four node queries (every 15 s), about n1 and n2 only.
    assert_eq!(rig.backend.listings(), 12);
    assert_eq!(asked.len(), 4, "{asked:?}");
    assert!(
        asked.iter().all(|nodes| nodes == &["n1", "n2"]),
        "{asked:?}"
    );
}

/// Job 4201 running, ticked four times a poll interval apart, each listing taking 1.4 s of real time
/// (over a quarter of the 5 s interval: slow); returns how many listings the scheduler saw and the engine's warnings.
async fn slow_listings(from_cache: bool) -> (usize, Vec<String>) {
    let rig = EngineRig::default();
    rig.backend.add([job("4201").running_on(["n1", "n2"])]);
    rig.backend
        .list_slowly(std::time::Duration::from_millis(1_400), from_cache);
    let mut engine = rig.engine();
    for _ in 0..4 {
        rig.step(&mut engine, 5).await;
    }
    let warnings = rig
        .status()
        .warnings
        .into_iter()
        .map(|(kind, _, _)| kind)
        .collect();
    (rig.backend.listings(), warnings)
}

#[tokio::test]
async fn a_slow_controller_is_asked_less_often_but_a_slow_cache_is_not_a_controller() {
    let (listings, warnings) = slow_listings(false).await;
    assert!(listings < 6, "the gap stretches: {listings} listings");
    assert!(
        warnings.iter().any(|kind| kind == "scheduler_slow"),
        "{warnings:?}"
    );
    // The same slowness reading the backend's own watch caches: every poll interval lists.
    let (listings, warnings) = slow_listings(true).await;
    assert_eq!(listings, 4);
    assert!(
        !warnings.iter().any(|kind| kind == "scheduler_slow"),
        "{warnings:?}"
    );
}
