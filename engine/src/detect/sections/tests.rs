use super::*;
use crate::config::DetectConfig;
use crate::model::JobState;
use crate::report::fixtures::{attempt, checkpoint, sample, t};

const HEARTBEAT: u64 = 120;

/// The bound of `attempts[index]` over its run's reports and saves, with the default thresholds.
fn bound_of(
    attempts: &[Attempt],
    index: usize,
    throughput: &[ThroughputSample],
    checkpoints: &[Checkpoint],
    saving: bool,
) -> Bound {
    let history = RunHistory {
        attempts,
        throughput,
        checkpoints,
    };
    silence_bound(
        &attempts[index],
        &history,
        saving,
        &DetectConfig::default(),
        HEARTBEAT,
    )
}

/// A running attempt that started at 0 and last reported `iteration` at `at`.
fn running(iteration: Option<u64>, at: i64) -> Attempt {
    let mut running = attempt(0, JobState::Running, [Some(0), Some(0), None]);
    running.last_iteration = iteration;
    running.last_progress_time = iteration.map(|_| t(at));
    running.last_log_time = Some(t(at));
    running
}

/// A report every 2 s (one per iteration), a save every 50 iterations holding the run `save` s.
fn steady(until: u64, save: i64) -> (Vec<ThroughputSample>, Vec<Checkpoint>) {
    let (mut samples, mut saves, mut clock) = (Vec::new(), Vec::new(), 0);
    for iteration in 1..=until {
        clock += 2;
        samples.push(sample(0, iteration, clock, 400.0));
        if iteration % 50 == 0 {
            clock += save;
            saves.push(checkpoint(0, iteration, clock));
        }
    }
    (samples, saves)
}

#[test]
fn a_run_stepping_every_two_seconds_is_hung_after_ten_seconds_of_silence_in_a_step() {
    let (throughput, checkpoints) = steady(120, 30);
    let attempts = [running(Some(120), 300)];
    let bound = bound_of(&attempts, 0, &throughput, &checkpoints, false);
    assert_eq!(bound.section, Section::Step);
    // 4 × 2 s is under the floor.
    assert_eq!(bound.secs, 10, "{bound:?}");
}

#[test]
fn a_slow_logging_run_gets_a_longer_step_bound_than_the_heartbeat() {
    // A report every 60 s: the fixed heartbeat would call every gap a hang.
    let throughput: Vec<_> = (1..=10)
        .map(|i| sample(0, i * 10, i as i64 * 60, 400.0))
        .collect();
    let attempts = [running(Some(100), 600)];
    let bound = bound_of(&attempts, 0, &throughput, &[], false);
    assert_eq!(
        (bound.section, bound.secs),
        (Section::Step, 240),
        "{bound:?}"
    );
}

#[test]
fn while_a_save_is_due_the_bound_is_four_times_the_longest_save_seen() {
    let (throughput, checkpoints) = steady(150, 45);
    // Iteration 150 reported, its save not confirmed yet.
    let checkpoints: Vec<_> = checkpoints
        .into_iter()
        .filter(|c| c.iteration < 150)
        .collect();
    let attempts = [running(Some(150), 500)];
    let bound = bound_of(&attempts, 0, &throughput, &checkpoints, false);
    assert_eq!(bound.section, Section::Save);
    assert_eq!(bound.secs, 180, "{bound:?}");
}

#[test]
fn a_first_save_gets_the_configured_save_bound() {
    let (throughput, _) = steady(50, 0);
    // A save every 50 iterations is known from the resumed checkpoint only.
    let checkpoints = [checkpoint(0, 0, 0), checkpoint(0, 0, 0)];
    let attempts = [running(Some(50), 100)];
    let bound = bound_of(&attempts, 0, &throughput, &checkpoints, false);
    assert_eq!(
        bound.section,
        Section::Step,
        "nothing says a save is due: {bound:?}"
    );

    let checkpoints = [checkpoint(0, 25, 50)];
    let bound = bound_of(&attempts, 0, &throughput[..25], &checkpoints, false);
    assert_eq!(
        (bound.section, bound.secs),
        (Section::Save, 1800),
        "{bound:?}"
    );
}

#[test]
fn before_the_first_report_the_setup_bound_applies_and_grows_with_earlier_start_ups() {
    let attempts = [running(None, 0)];
    let bound = bound_of(&attempts, 0, &[], &[], false);
    assert_eq!((bound.section, bound.secs), (Section::Setup, 1800));

    // The first attempt took 20 minutes to its first report: the second may take three times that.
    let first = attempt(0, JobState::Failed, [Some(0), Some(0), Some(5000)]);
    let mut second = attempt(1, JobState::Running, [Some(5000), Some(5100), None]);
    second.last_log_time = Some(t(5100));
    let throughput = [sample(0, 1, 1200, 400.0)];
    let attempts = [first, second];
    let bound = bound_of(&attempts, 1, &throughput, &[], false);
    assert_eq!(
        (bound.section, bound.secs),
        (Section::Setup, 3600),
        "{bound:?}"
    );
}

#[test]
fn with_too_few_gaps_the_heartbeat_applies() {
    let throughput: Vec<_> = (1..=3).map(|i| sample(0, i, i as i64 * 2, 400.0)).collect();
    let attempts = [running(Some(3), 6)];
    let bound = bound_of(&attempts, 0, &throughput, &[], false);
    assert_eq!((bound.section, bound.secs), (Section::Step, HEARTBEAT));
}

#[test]
fn an_announced_save_is_the_save_section_even_before_the_interval_is_known() {
    let (throughput, _) = steady(30, 0);
    let attempts = [running(Some(30), 60)];
    let bound = bound_of(&attempts, 0, &throughput, &[], true);
    assert_eq!(
        (bound.section, bound.secs),
        (Section::Save, 1800),
        "{bound:?}"
    );
    let bound = bound_of(&attempts, 0, &throughput, &[], false);
    assert_eq!(bound.section, Section::Step, "{bound:?}");
}
