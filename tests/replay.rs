//! The failure-mix replay through the real engine on the simulator: a GPU that stays broken on
//! node-02 and a bug of the training script, under runguard, a blind requeue and a paged person.

use runguard_engine::replay::{
    self, FailureRecord, Handler, Onset, Policy, PolicyResult, ReplayOptions, Trace,
};

fn trace() -> Trace {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/replay/small.toml"
    );
    Trace::resolve(path).unwrap()
}

/// The GPU of node-02 fails at 40 min and stays failed; the script raises at 2 h 30.
fn onsets() -> Vec<Onset> {
    vec![
        Onset {
            at_s: 2_400,
            cause: 0,
            node: 2,
            gpu: 3,
        },
        Onset {
            at_s: 9_000,
            cause: 1,
            node: 1,
            gpu: 0,
        },
    ]
}

async fn run(policy: Policy, dir: &std::path::Path) -> PolicyResult {
    let options = ReplayOptions {
        dir: dir.join(policy.as_str()),
        days: 0.15,
        nodes: 4,
        spare_nodes: 2,
        checkpoint_minutes: 5.0,
        policy,
        poll_s: 5.0,
    };
    replay::replay(&trace(), &onsets(), &options).await.unwrap()
}

fn on(result: &PolicyResult, node: &str) -> Vec<FailureRecord> {
    result
        .failures
        .iter()
        .filter(|f| f.node == node)
        .cloned()
        .collect()
}

#[tokio::test]
async fn runguard_leaves_the_broken_node_out_and_it_never_fails_the_run_again() {
    let dir = tempfile::tempdir().unwrap();
    let result = run(Policy::Runguard, dir.path()).await;
    let gpu = on(&result, "node-02");
    assert_eq!(gpu.len(), 1, "{:#?}", result.failures);
    assert_eq!(gpu[0].handler, Handler::Runguard);
    assert_eq!(result.repeats, 0);
    // The bug of the script is not runguard's to requeue: a person resubmits it.
    let bug: Vec<_> = result
        .failures
        .iter()
        .filter(|f| f.cause == "Software Bug")
        .collect();
    assert_eq!(bug.len(), 1, "{:#?}", result.failures);
    assert_eq!(bug[0].handler, Handler::Person);
    assert_eq!(result.pages, 1);
    // It acted on the GPU within its own seconds, measured on the simulated clock.
    let share = gpu[0].own_share_s(20.0);
    assert!(share > 0.0 && share < 60.0, "{share}");
    assert!(result.ettr > 0.5 && result.ettr < result.ettr_without_failures);
}

#[tokio::test]
async fn a_blind_requeue_puts_the_run_back_on_the_broken_node_until_a_person_is_paged() {
    let dir = tempfile::tempdir().unwrap();
    let blind = run(Policy::Blind, dir.path()).await;
    let gpu = on(&blind, "node-02");
    // Three failures in a row ring the crash-loop alarm; the paged person then leaves node-02 out.
    assert_eq!(gpu.len(), 3, "{:#?}", blind.failures);
    assert_eq!(blind.repeats, 2);
    assert_eq!(
        gpu.iter().map(|f| f.handler).collect::<Vec<_>>(),
        [Handler::Blind, Handler::Blind, Handler::Person]
    );
    let runguard = run(Policy::Runguard, dir.path()).await;
    assert!(
        runguard.ettr > blind.ettr,
        "{} vs {}",
        runguard.ettr,
        blind.ettr
    );
}

#[tokio::test]
async fn a_paged_person_reacts_at_night_in_the_off_hours_time() {
    let dir = tempfile::tempdir().unwrap();
    let paged = run(Policy::Paged, dir.path()).await;
    assert_eq!(paged.repeats, 0);
    assert_eq!(paged.pages, paged.failures.len());
    // 00:40 on a Monday: 30 min to acknowledge and 10 to decide, to within a poll.
    let gpu = &on(&paged, "node-02")[0];
    let response = gpu.action_s.unwrap() - gpu.exit_s;
    assert!((2_400.0..2_410.0).contains(&response), "{response}");
}

#[tokio::test]
async fn a_network_fault_is_requeued_when_its_confirmation_window_ends_between_two_looks() {
    use runguard_engine::backend::sim::FaultKind;
    use runguard_engine::replay::trace::Cause;

    // node-03's link fails at 40 min while the run trains; the replay looks every 2 s, the
    // confirmation window is 5 s (progress every 20 s, twice that clamped to the bound).
    let mut trace = trace();
    trace.causes.push(Cause {
        name: "Network Switch/Cable".into(),
        component: "Network".into(),
        count: 1,
        share: 0.0,
        fault: FaultKind::NcclTimeout,
        stays: true,
        recur_after_s: Some(1_800),
    });
    let onsets = [Onset {
        at_s: 2_400,
        cause: 2,
        node: 3,
        gpu: 1,
    }];
    let dir = tempfile::tempdir().unwrap();
    let options = ReplayOptions {
        dir: dir.path().join("runguard"),
        days: 0.05,
        nodes: 4,
        spare_nodes: 2,
        checkpoint_minutes: 5.0,
        policy: Policy::Runguard,
        poll_s: 2.0,
    };
    let result = replay::replay(&trace, &onsets, &options).await.unwrap();
    let network = &on(&result, "node-03")[0];
    assert_eq!(network.handler, Handler::Runguard);
    let (shown, action) = (network.shown_s.unwrap(), network.action_s.unwrap());
    // Requeued while the run hung: the requeue ended it, not its watchdog minutes later.
    assert_eq!(action, network.exit_s, "{network:?}");
    // NCCL's line 1.5 - 4 s after the fault, read at the next look (the looks fall on even seconds),
    // and the run failed 5 s after that read: at an odd second, between two looks.
    assert!(
        (1.5..4.0).contains(&(shown - network.fault_s)),
        "{network:?}"
    );
    assert_eq!(action % 2.0, 1.0, "{network:?}");
    let from_line = network.from_line_s().unwrap();
    assert!(
        (5.0..7.5).contains(&from_line),
        "{from_line} s: {network:?}"
    );
    assert_eq!(result.repeats, 0);
}

#[tokio::test]
async fn the_same_trace_replays_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let first = run(Policy::Runguard, &dir.path().join("a")).await;
    let second = run(Policy::Runguard, &dir.path().join("b")).await;
    let strip = |result: &PolicyResult| {
        result
            .failures
            .iter()
            .map(|f| FailureRecord {
                engine_wall_ms: 0.0,
                ..f.clone()
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(strip(&first), strip(&second));
    assert_eq!(first.ettr, second.ettr);
    let seeded = |seed| replay::onsets::generate(&trace(), 6, 3.0, seed);
    assert_eq!(seeded(7), seeded(7));
}

#[test]
fn the_command_line_prints_every_policy_as_json_and_writes_the_plot() {
    let sandbox = crate::support::cli::CliSandbox::new("");
    let svg = sandbox.path().join("replay.svg");
    let output = sandbox
        .command()
        .args([
            "replay",
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/replay/small.toml"
            ),
        ])
        .args(["--days", "0.2", "--seed", "5", "--policy", "runguard,blind"])
        .args(["--checkpoint-interval", "5,30", "--json", "--svg"])
        .arg(&svg)
        .arg("--work-dir")
        .arg(sandbox.path().join("work"))
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(report["onset_count"], 2);
    let results = report["results"].as_array().unwrap();
    let policies: Vec<&str> = results
        .iter()
        .map(|r| r["policy"].as_str().unwrap())
        .collect();
    assert_eq!(policies, ["runguard", "blind", "runguard", "blind"]);
    assert!(results.iter().all(|r| r["ettr"].as_f64().unwrap() > 0.5));
    let plot = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(plot.matches("<polyline").count(), 3);
    let bad = sandbox
        .command()
        .args(["replay", "llama3-405b", "--policy", "hope"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown policy `hope`"));
}
