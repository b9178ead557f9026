use super::*;
use crate::model::JobState;
use crate::report::fixtures::{attempt, checkpoint, sample, t};

/// 1 s an iteration, a progress report every 10 iterations, a save every 100 iterations — after its
/// iteration's report, as Megatron saves — that holds the run for 30 s: 130 s between saves.
fn run(until_iteration: u64) -> (Vec<Checkpoint>, Vec<ThroughputSample>) {
    let mut checkpoints = Vec::new();
    let mut samples = Vec::new();
    let mut clock = 0;
    for iteration in (10..=until_iteration).step_by(10) {
        clock += 10;
        samples.push(sample(0, iteration, clock, 400.0));
        if iteration % 100 == 0 {
            clock += 30;
            checkpoints.push(checkpoint(0, iteration, clock));
        }
    }
    (checkpoints, samples)
}

#[test]
fn the_save_cost_interval_and_young_daly_interval_are_measured_from_the_run() {
    let (checkpoints, throughput) = run(1000);
    // 1300 s of running, one failure.
    let attempts = [attempt(0, JobState::Failed, [Some(0), Some(0), Some(1300)])];
    let advice = advise(&Inputs {
        attempts: &attempts,
        checkpoints: &checkpoints,
        throughput: &throughput,
        failures: 1,
        restart_secs: Some(60.0),
        fallback_rate: None,
        now: t(1300),
    })
    .unwrap();
    assert!((advice.save_cost_secs - 30.0).abs() < 1e-9, "{advice:?}");
    // The last save has no report after it.
    assert_eq!(advice.saves_measured, 9);
    assert!((advice.interval_secs - 130.0).abs() < 1e-9, "{advice:?}");
    assert!((advice.mtbf_secs - 1300.0).abs() < 1e-9, "{advice:?}");
    // √(2 · 30 · 1300) = √78000
    assert!((advice.advised_interval_secs - 78_000f64.sqrt()).abs() < 1e-9);
    // 1 − 30/130 − (65 + 60)/1300
    let now = 1.0 - 30.0 / 130.0 - (65.0 + 60.0) / 1300.0;
    assert!((advice.ratio_now - now).abs() < 1e-9, "{advice:?}");
    let tau = 78_000f64.sqrt();
    let advised = 1.0 - 30.0 / tau - (tau / 2.0 + 60.0) / 1300.0;
    assert!((advice.ratio_advised - advised).abs() < 1e-9, "{advice:?}");
    assert!(advice.ratio_advised > advice.ratio_now);
    assert!(
        advice.mtbf_basis.contains("1 failure in 0.4 h"),
        "{}",
        advice.mtbf_basis
    );
}

#[test]
fn young_daly_minimises_the_waste_of_the_model() {
    let (cost, mtbf, restart) = (120.0, 8.0 * 3600.0, 300.0);
    let best = young_daly(cost, mtbf);
    let at_best = effective_ratio(best, cost, mtbf, restart);
    for factor in [0.5, 0.8, 1.25, 2.0] {
        assert!(effective_ratio(best * factor, cost, mtbf, restart) < at_best);
    }
}

#[test]
fn a_run_that_never_failed_takes_the_ledger_s_rate_or_gets_no_advice() {
    let (checkpoints, throughput) = run(500);
    let attempts = [attempt(0, JobState::Running, [Some(0), Some(0), None])];
    let mut inputs = Inputs {
        attempts: &attempts,
        checkpoints: &checkpoints,
        throughput: &throughput,
        failures: 0,
        restart_secs: None,
        fallback_rate: None,
        now: t(650),
    };
    assert_eq!(advise(&inputs), None);
    inputs.fallback_rate = Some((1.0 / 36_000.0, "node ledger".to_string()));
    let advice = advise(&inputs).unwrap();
    assert!((advice.mtbf_secs - 36_000.0).abs() < 1e-6);
    assert_eq!(advice.mtbf_basis, "node ledger");
}

#[test]
fn without_a_measured_save_there_is_no_advice() {
    let (_, throughput) = run(90);
    let attempts = [attempt(0, JobState::Running, [Some(0), Some(0), None])];
    assert_eq!(
        advise(&Inputs {
            attempts: &attempts,
            checkpoints: &[],
            throughput: &throughput,
            failures: 1,
            restart_secs: None,
            fallback_rate: None,
            now: t(90),
        }),
        None
    );
}
