//! A handful of chaos trials: the headless engine on the simulated cluster aborted at named points
//! (and killed at random moments) and restarted, then checked against the cluster's record and the
//! store. `cargo bench --bench chaos` runs hundreds; these keep the guarantees in every test run.

use std::path::Path;
use std::time::Duration;

use crate::support::chaos::check::{Facts, SchedulerJob, StoredAction, StoredDelivery, key};
use crate::support::chaos::{Kill, SimTrial, Stop, run_sim_trial};
use crate::support::cli::BIN;

/// Simulated seconds per real second: fast, and still slow enough for a loaded machine's engine.
const SPEED: u32 = 400;

fn trial(seed: u64, scenario: &'static str, kills: Vec<Kill>) -> SimTrial {
    SimTrial {
        seed,
        scenario,
        injected: 1,
        speed: SPEED,
        kills,
    }
}

fn assert_clean(trial: &SimTrial) {
    let outcome = run_sim_trial(Path::new(BIN), trial);
    assert!(
        outcome.violations.is_empty(),
        "{trial:?}\nstops: {:?}\n{:#?}",
        outcome.stops,
        outcome.violations
    );
    let aborted = outcome
        .stops
        .iter()
        .filter(|stop| matches!(stop, Stop::Aborted(_)))
        .count();
    let planned = trial
        .kills
        .iter()
        .filter(|kill| matches!(kill, Kill::At { .. }))
        .count();
    assert_eq!(aborted, planned, "{trial:?}: {:?}", outcome.stops);
    assert_eq!(outcome.recovery_secs.len(), 1, "{outcome:?}");
}

#[test]
fn killed_after_the_failure_is_recorded_and_before_the_requeue_records_it_recovers_once() {
    assert_clean(&trial(
        1,
        "xid79",
        vec![
            Kill::At {
                point: "failure_recorded",
                passage: 1,
            },
            Kill::At {
                point: "action_ran",
                passage: 1,
            },
        ],
    ));
}

#[test]
fn killed_while_the_requeue_is_marked_executing_recovers_once() {
    assert_clean(&trial(
        2,
        "nccl-timeout",
        vec![Kill::At {
            point: "action_executing",
            passage: 1,
        }],
    ));
}

#[test]
fn killed_between_an_alert_sent_and_its_record_the_receiver_keeps_one() {
    assert_clean(&trial(
        3,
        "xid79",
        vec![
            Kill::At {
                point: "alert_sent",
                passage: 1,
            },
            Kill::At {
                point: "alert_sent",
                passage: 2,
            },
        ],
    ));
}

#[test]
fn killed_inside_store_writes_and_at_random_moments_loses_nothing() {
    assert_clean(&trial(
        4,
        "nccl-timeout",
        vec![
            Kill::At {
                point: "store_commit",
                passage: 40,
            },
            Kill::After(Duration::from_millis(1500)),
            Kill::At {
                point: "store_commit",
                passage: 150,
            },
        ],
    ));
}

#[test]
fn a_seeded_random_trial_keeps_the_invariants() {
    let trial = SimTrial::planned(5, SPEED);
    let outcome = run_sim_trial(Path::new(BIN), &trial);
    assert!(
        outcome.violations.is_empty(),
        "{trial:?}\n{:#?}",
        outcome.violations
    );
}

/// Facts of a clean trial: one job failed once and was requeued once, every alert arrived once.
fn clean_facts() -> Facts {
    let mut facts = Facts {
        jobs: vec![SchedulerJob {
            job_id: "1".into(),
            restart_count: 1,
            completed: true,
            held: false,
        }],
        workflows: vec![(1, "completed".into(), vec!["1".into(), "1".into()])],
        actions: vec![StoredAction {
            id: 1,
            workflow_id: 1,
            attempt_index: 0,
            kind: "requeue".into(),
            state: "done".into(),
        }],
        failures: vec![(1, 0)],
        notifications: vec![(1, "failure".into()), (2, "recovered".into())],
        deliveries: vec![
            StoredDelivery {
                notification_id: 1,
                channel: "hook".into(),
                event: "failure".into(),
                state: "delivered".into(),
            },
            StoredDelivery {
                notification_id: 2,
                channel: "hook".into(),
                event: "recovered".into(),
                state: "delivered".into(),
            },
        ],
        ..Facts::default()
    };
    facts.injected.insert("1".into(), 1);
    facts.received.insert(key("hook", 1), 1);
    facts.received.insert(key("hook", 2), 2);
    facts
}

#[test]
fn the_checker_passes_a_clean_trial_and_counts_a_repeat_the_key_absorbs() {
    let facts = clean_facts();
    assert_eq!(facts.violations(), Vec::<String>::new());
    assert_eq!(facts.repeats(), 1);
}

#[test]
fn the_checker_catches_each_broken_guarantee() {
    let broken: [(&str, fn(&mut Facts)); 9] = [
        ("restarted 2 times", |f| f.jobs[0].restart_count = 2),
        ("did not complete", |f| f.jobs[0].completed = false),
        ("left held", |f| f.jobs[0].held = true),
        ("attempt 0 was restarted twice", |f| {
            let again = f.actions[0].clone();
            f.actions.push(StoredAction { id: 2, ..again });
            f.jobs[0].restart_count = 2;
            f.injected.insert("1".into(), 2);
        }),
        ("no failure recorded", |f| f.failures.clear()),
        ("2 failures recorded", |f| f.failures.push((1, 0))),
        ("left approved", |f| f.actions[0].state = "approved".into()),
        ("never arrived", |f| {
            f.received.remove(&key("hook", 1));
        }),
        ("never queued", |f| {
            f.deliveries.remove(1);
            f.received.remove(&key("hook", 2));
        }),
    ];
    for (expected, breaks) in broken {
        let mut facts = clean_facts();
        breaks(&mut facts);
        let found = facts.violations();
        assert!(
            found.iter().any(|violation| violation.contains(expected)),
            "{expected:?} not caught: {found:#?}"
        );
    }
}
