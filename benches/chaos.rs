//! Chaos: the headless engine killed at random moments and at named points (during detection, between
//! the steps of a requeue, while an alert is delivered, inside a store write), restarted, and checked
//! against the scheduler's record and the store: every failure recovered exactly once, no action run
//! twice, no decision lost, no job left held, no alert lost or sent twice.
//!
//! `cargo bench --bench chaos` runs 200 seeded trials on the simulated cluster. Options:
//! `RUNGUARD_CHAOS_TRIALS` (200 on the simulator, 20 on Slurm), `RUNGUARD_CHAOS_SEED` (the first
//! trial's seed, 1), `RUNGUARD_CHAOS_SPEED` (simulated seconds per real second, 400),
//! `RUNGUARD_CHAOS_BACKEND` (`sim` or `slurm`: kills around a job's recovery on the local Slurm of
//! tests/slurm/cluster.sh, release `RUNGUARD_SLURM_RELEASE`, 22.05 or 24.11),
//! `RUNGUARD_CHAOS_MODE=outage` (Slurm: the controller stopped for `RUNGUARD_CHAOS_OUTAGE_SECS`, 120,
//! while a requeue is half done), `RUNGUARD_CHAOS_KEEP=1` (keep a failing trial's files),
//! `RUNGUARD_CHAOS_BIN` (the `runguard` to run instead of this build's: a copy stays put while
//! cargo rebuilds).
//! Exits non-zero when any invariant was broken.

#[path = "../tests/support/chaos/mod.rs"]
mod chaos;
mod lab;
#[path = "chaos/slurm.rs"]
mod slurm;

use std::collections::BTreeMap;

use std::time::Duration;

use chaos::{Outcome, SimTrial, Stop, run_sim_trial};

const BIN: &str = env!("CARGO_BIN_EXE_runguard");

/// The `runguard` binary the trials run.
fn bin() -> std::path::PathBuf {
    std::env::var_os("RUNGUARD_CHAOS_BIN").map_or_else(|| BIN.into(), Into::into)
}

fn main() {
    let trials = lab::count_from_env("RUNGUARD_CHAOS_TRIALS", 200);
    let seed = lab::count_from_env("RUNGUARD_CHAOS_SEED", 1) as u64;
    let speed = lab::count_from_env("RUNGUARD_CHAOS_SPEED", 400) as u32;
    let backend = std::env::var("RUNGUARD_CHAOS_BACKEND").unwrap_or_else(|_| "sim".into());
    let outcomes = match backend.as_str() {
        "sim" => sim(trials, seed, speed),
        "slurm" => on_slurm(lab::count_from_env("RUNGUARD_CHAOS_TRIALS", 20), seed),
        other => {
            eprintln!("RUNGUARD_CHAOS_BACKEND={other}: expected sim or slurm");
            std::process::exit(2);
        }
    };
    let broken = report(&format!("chaos on {backend}"), &outcomes);
    if broken > 0 {
        std::process::exit(1);
    }
}

fn sim(trials: usize, seed: u64, speed: u32) -> Vec<(String, Outcome)> {
    println!("chaos: {trials} trials on the simulated cluster at {speed}x, seeds {seed}..");
    (0..trials as u64)
        .map(|n| {
            let trial = SimTrial::planned(seed + n, speed);
            let outcome = run_sim_trial(&bin(), &trial);
            let label = format!(
                "seed {} {} [{}]",
                trial.seed,
                trial.scenario,
                trial
                    .kills
                    .iter()
                    .map(|kill| kill.describe())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            progress(&label, &outcome);
            (label, outcome)
        })
        .collect()
}

fn on_slurm(trials: usize, seed: u64) -> Vec<(String, Outcome)> {
    let release = lab::release();
    if !lab::installed(&release, &["slurmctld", "slurmd", "sbatch"]) {
        println!("chaos: skipped, Slurm {release} is not installed");
        return Vec::new();
    }
    let mut work = tempfile::tempdir().expect("a temporary directory");
    // The trials' sandboxes live in it, where the jobs see them: kept with them when asked.
    work.disable_cleanup(std::env::var_os("RUNGUARD_CHAOS_KEEP").is_some());
    let cluster = match lab::Cluster::start(&work.path().join("slurm"), &release, work.path(), &[])
    {
        Ok(cluster) => cluster,
        Err(err) => {
            eprintln!("chaos: the local Slurm {release} did not start: {err}");
            std::process::exit(1);
        }
    };
    if std::env::var("RUNGUARD_CHAOS_MODE").as_deref() == Ok("outage") {
        let secs = lab::count_from_env("RUNGUARD_CHAOS_OUTAGE_SECS", 120) as u64;
        println!("chaos: slurmctld {release} stopped for {secs} s while a requeue is half done");
        let report = slurm::outage(&cluster, work.path(), &bin(), Duration::from_secs(secs));
        println!(
            "scheduler calls that failed during the {} s outage: {} (backoff capped at 30 s)",
            report.outage.as_secs(),
            report.failed_calls
        );
        println!(
            "controller back → job running again: {}",
            report
                .resumed_after
                .map_or("never".to_string(), |d| format!("{:.1} s", d.as_secs_f64()))
        );
        let label = format!("outage {secs} s on Slurm {release}");
        progress(&label, &report.outcome);
        return vec![(label, report.outcome)];
    }
    println!("chaos: {trials} trials on the local Slurm {release}, seeds {seed}..");
    (0..trials as u64)
        .map(|n| {
            let kills = slurm::plan(seed + n);
            let outcome = slurm::trial(&cluster, work.path(), &bin(), &kills);
            let label = format!(
                "seed {} Slurm {release} [{}]",
                seed + n,
                kills
                    .iter()
                    .map(|kill| kill.describe())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            progress(&label, &outcome);
            (label, outcome)
        })
        .collect()
}

fn progress(label: &str, outcome: &Outcome) {
    let verdict = if outcome.violations.is_empty() {
        "ok".to_string()
    } else {
        format!("BROKEN: {}", outcome.violations.join("; "))
    };
    println!(
        "  {label}: {} stops, {:.1} s, {verdict}",
        outcome.stops.len(),
        outcome.wall.as_secs_f64()
    );
}

/// Prints the report; returns the number of trials that broke an invariant.
fn report(title: &str, outcomes: &[(String, Outcome)]) -> usize {
    let mut hits: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut timed = 0;
    let mut recoveries = Vec::new();
    let mut walls = Vec::new();
    let mut repeats = 0;
    let mut broken = Vec::new();
    for (label, outcome) in outcomes {
        for stop in &outcome.stops {
            match stop {
                Stop::Aborted(at) => hits.entry(point_of(at)).or_default().0 += 1,
                Stop::Missed(at) => hits.entry(point_of(at)).or_default().1 += 1,
                Stop::Killed(_) => timed += 1,
            }
        }
        recoveries.extend(outcome.recovery_secs.iter().copied());
        walls.push(outcome.wall.as_secs_f64());
        repeats += outcome.repeats;
        if !outcome.violations.is_empty() {
            broken.push((label, &outcome.violations));
        }
    }
    println!("\n== {title} ==");
    println!("trials:                 {}", outcomes.len());
    println!(
        "engine kills:           {} ({} at named points, {} SIGKILL at random moments, {} planned kills not reached)",
        hits.values().map(|(hit, _)| hit).sum::<usize>() + timed,
        hits.values().map(|(hit, _)| hit).sum::<usize>(),
        timed,
        hits.values().map(|(_, missed)| missed).sum::<usize>()
    );
    for (point, (hit, missed)) in &hits {
        println!("  {point:<20} {hit:>4} hit {missed:>4} not reached");
    }
    println!("invariant violations:   {}", broken.len());
    for (label, violations) in &broken {
        println!("  {label}: {}", violations.join("; "));
    }
    println!("alert requests repeated after a crash (absorbed by the idempotency key): {repeats}");
    println!(
        "failures recovered:     {} (failure recorded → requeue done, s of the engine's clock: {})",
        recoveries.len(),
        summary(&mut recoveries)
    );
    println!("trial wall time, s:     {}", summary(&mut walls));
    broken.len()
}

/// `NAME` of `NAME:N`; every SIGKILL at a random moment under one name.
fn point_of(at: &str) -> String {
    if at.starts_with("sigkill@") {
        return "SIGKILL (random)".to_string();
    }
    at.split(':').next().unwrap_or(at).to_string()
}

/// Median, 95th percentile and maximum.
fn summary(values: &mut [f64]) -> String {
    if values.is_empty() {
        return "-".into();
    }
    values.sort_by(f64::total_cmp);
    let at = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    format!(
        "median {:.1}, p95 {:.1}, max {:.1}",
        at(0.5),
        at(0.95),
        at(1.0)
    )
}
