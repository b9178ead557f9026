//! Hangs by section, on the simulated cluster: how long after a run stops mid-step the engine calls it
//! hung, and whether a long first compile or a long checkpoint save is called hung (it must not be),
//! with the section-aware bounds and with a fixed 120 s silence bound as before them.
//!
//! `cargo bench --bench hangs`. Simulated time on a manual clock, a tick every simulated second.

use std::sync::Arc;
use std::time::Duration;

use runguard_engine::attribute::Catalog;
use runguard_engine::backend::Backend;
use runguard_engine::backend::sim::{Scenario, SimCluster, SimOptions};
use runguard_engine::clock::{Clock, ManualClock};
use runguard_engine::config::Config;
use runguard_engine::engine::{Engine, EngineOptions};
use runguard_engine::model::AnomalyKind;
use runguard_engine::store::Store;

/// A 2-node run of 2 s iterations, a progress line every iteration, `extra` TOML for its job.
fn scenario(extra: &str, faults: &str) -> Scenario {
    let text = format!(
        "name = \"hangs\"\ndescription = \"section-aware hang bounds\"\n\n[[jobs]]\nname = \"bench\"\n\
         user = \"bench\"\nnodes = 2\niterations = 200\nseconds_per_iteration = 2.0\nlog_interval = 1\n\
         checkpoint_interval = 50\ntflops_per_gpu = 400.0\nmax_requeue_times = 3\n{extra}\n{faults}"
    );
    match Scenario::parse(&text, "bench") {
        Ok(scenario) => scenario,
        Err(err) => panic!("scenario: {err}"),
    }
}

/// What one case showed: when (if) a hang was raised, in simulated seconds from the start, and how
/// long after the run's last progress line.
struct Outcome {
    hang_raised_at: Option<i64>,
    after_last_line: Option<i64>,
    summary: Option<String>,
}

fn run(case: &str, scenario: Scenario, fixed_bound: bool, seconds: u64) -> Outcome {
    let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("{case}: temp dir: {err}"));
    let start = chrono::DateTime::parse_from_rfc3339("2026-01-05T08:00:00Z")
        .map(|t| t.with_timezone(&chrono::Utc))
        .unwrap_or_else(|err| panic!("{err}"));
    let clock = Arc::new(ManualClock::new(start));
    let sim = SimCluster::open(
        SimOptions {
            dir: dir.path().join("sim"),
            scenario,
            seed: 7,
            nodes: 4,
        },
        Arc::clone(&clock) as Arc<dyn Clock>,
    )
    .unwrap_or_else(|err| panic!("{case}: sim: {err}"));
    let mut config = Config::default();
    config.engine.poll_interval_secs = 1.0;
    config.engine.file_events = false;
    if fixed_bound {
        // Before the section-aware bounds: 120 s of silence was a hang, whatever the run did.
        config.detect.step_timeout_floor_secs = 120;
        config.detect.step_gap_factor = 0.0;
        config.detect.setup_timeout_secs = 120;
        config.detect.save_timeout_secs = 120;
    }
    let store = Store::open(&dir.path().join("runguard.sqlite"))
        .unwrap_or_else(|err| panic!("{case}: store: {err}"));
    let mut engine = Engine::new(
        store,
        Arc::new(sim) as Arc<dyn Backend>,
        Arc::clone(&clock) as Arc<dyn Clock>,
        config,
        Catalog::builtin().unwrap_or_else(|err| panic!("{err}")),
        EngineOptions { auto: false },
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|err| panic!("{err}"));
    for second in 0..seconds {
        runtime
            .block_on(engine.tick())
            .unwrap_or_else(|err| panic!("{case}: tick: {err}"));
        let hang = engine
            .store()
            .db()
            .all_anomalies()
            .unwrap_or_default()
            .into_iter()
            .find(|anomaly| anomaly.kind == AnomalyKind::Hang);
        if let Some(hang) = hang {
            let last_line = engine
                .store()
                .db()
                .throughput(1)
                .unwrap_or_default()
                .iter()
                .map(|sample| sample.time)
                .max();
            return Outcome {
                hang_raised_at: Some(second as i64),
                after_last_line: last_line.map(|line| (clock.now() - line).num_seconds()),
                summary: Some(hang.summary),
            };
        }
        clock.advance(Duration::from_secs(1));
    }
    Outcome {
        hang_raised_at: None,
        after_last_line: None,
        summary: None,
    }
}

fn main() {
    let hang = "[[jobs.faults]]\nkind = \"hang\"\nat_iteration = 60\nattempts = \"first\"\n";
    println!("Hangs by section, simulated cluster (2 s iterations, a progress line each)\n");
    for (label, fixed) in [("section-aware bounds", false), ("fixed 120 s bound", true)] {
        // Stops mid-step at iteration 60: the gap from its last line to the hang raised.
        let stops = run("stops", scenario("save_s = 20", hang), fixed, 900);
        let healthy = run("healthy", scenario("save_s = 20", ""), fixed, 900);
        let compile = run(
            "compile",
            scenario("compile_s = 900\nsave_s = 20", ""),
            fixed,
            1500,
        );
        let save = run("save", scenario("save_s = 600", ""), fixed, 900);
        println!("{label}:");
        match (stops.after_last_line, &stops.summary) {
            (Some(after), Some(summary)) => println!(
                "  a run stopping mid-step at iteration 60: called hung {after} s after its last line\n    ({summary})"
            ),
            _ => println!("  a run stopping mid-step at iteration 60: not called hung"),
        }
        let verdict = |outcome: &Outcome| match outcome.hang_raised_at {
            Some(at) => format!("called hung at {at} s (wrong)"),
            None => "not called hung (right)".to_string(),
        };
        println!(
            "  a healthy run with 20 s saves:          {}",
            verdict(&healthy)
        );
        println!(
            "  a fifteen-minute first compile:         {}",
            verdict(&compile)
        );
        println!(
            "  ten-minute checkpoint saves:            {}",
            verdict(&save)
        );
    }
}
