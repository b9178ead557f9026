//! The `runguard` binary end to end: the demo, status, approvals, the engine lock, and a headless engine
//! killed with SIGKILL mid-run and restarted.

use std::time::Duration;

use serde_json::Value;

use crate::support::{CliSandbox, WATCHDOG_ENDS_THE_JOB, stderr, stdout, terminate};

fn workflow(status: &Value) -> &Value {
    &status["workflows"][0]
}

fn completed(status: &Value) -> bool {
    workflow(status)["status"] == "completed"
}

/// A sandbox playing `scenario` at `speed` times real time, recovering with the actions of
/// `whitelist` (TOML).
fn sim_sandbox(scenario: &str, speed: u32, whitelist: &str) -> CliSandbox {
    let sandbox = CliSandbox::default();
    sandbox.write_config(&format!(
        "{}\n[recovery]\nwhitelist = {whitelist}\n{WATCHDOG_ENDS_THE_JOB}",
        sandbox.sim_section(scenario, Some(speed))
    ));
    sandbox
}

#[test]
fn the_demo_recovers_the_nccl_timeout_and_status_json_shows_it() {
    let sandbox = CliSandbox::new(WATCHDOG_ENDS_THE_JOB);
    let output = sandbox.run(&["demo", "--speed", "1500"]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.contains("nccl_timeout"), "{text}");
    assert!(text.contains("node-07"), "{text}");
    assert!(text.contains("completed"), "{text}");

    let status = sandbox.status().expect("status --json");
    let workflow = workflow(&status);
    assert_eq!(workflow["status"], "completed");
    assert_eq!(workflow["succeeded"], true);
    let attempts = workflow["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["job_id"], attempts[1]["job_id"]);
    assert!(
        attempts[1]["excluded_nodes"]
            .as_array()
            .unwrap()
            .contains(&Value::from("node-07"))
    );
    assert!(workflow["checkpoints"].as_u64().unwrap() >= 6);
    assert_eq!(workflow["anomalies"][0]["kind"], "crash");
    assert_eq!(workflow["attributions"][0]["category"], "nccl_timeout");
    assert_eq!(workflow["attributions"][0]["culprit"]["node"], "node-07");
    // The checkpoint advisor: the sim's saves hold the run 5 to 9 s; one failure in the run.
    let advice = &workflow["checkpoint_advice"];
    let figure = |name: &str| advice[name].as_f64().unwrap();
    let (cost, mtbf, restart) = (
        figure("save_cost_secs"),
        figure("mtbf_secs"),
        figure("restart_secs"),
    );
    assert!((5.0..=9.0).contains(&cost), "{advice:#}");
    assert!((figure("advised_interval_secs") - (2.0 * cost * mtbf).sqrt()).abs() < 1e-6);
    let ratio = |tau: f64| 1.0 - cost / tau - (tau / 2.0 + restart) / mtbf;
    assert!((figure("ratio_now") - ratio(figure("interval_secs"))).abs() < 1e-6);
    assert!((figure("ratio_advised") - ratio(figure("advised_interval_secs"))).abs() < 1e-6);
    assert!(figure("ratio_advised") >= figure("ratio_now"), "{advice:#}");

    // A second demo starts over instead of piling up records.
    let again = sandbox.run(&["demo", "--speed", "1500"]);
    assert!(again.status.success(), "{}", stderr(&again));
    let status = sandbox.status().unwrap();
    assert_eq!(status["workflows"].as_array().unwrap().len(), 1);

    let table = stdout(&sandbox.run(&["status"]));
    assert!(table.contains("llama3-8b-pretrain"), "{table}");
    assert!(table.contains("node-07"), "{table}");
}

#[test]
fn demo_lists_its_scenarios() {
    let sandbox = CliSandbox::default();
    let output = sandbox.run(&["demo", "--list"]);
    assert!(output.status.success());
    let text = stdout(&output);
    let scenarios = "nccl-timeout xid79 cuda-oom hang straggler app-bug crash-loop healthy";
    for scenario in scenarios.split(' ') {
        assert!(text.contains(scenario), "{scenario} missing from:\n{text}");
    }
}

#[test]
fn a_headless_engine_killed_mid_run_and_restarted_loses_nothing_and_requeues_once() {
    let sandbox = sim_sandbox("nccl-timeout", 400, r#"["requeue", "cancel"]"#);

    // First life: killed without warning once the failure has been seen.
    let mut engine = sandbox.spawn(&["run", "--auto"]);
    sandbox.wait_for("the NCCL failure to be handled", |status| {
        workflow(status)["actions"]
            .as_array()
            .is_some_and(|actions| !actions.is_empty())
    });
    engine.kill().unwrap();
    engine.wait().unwrap();
    let before = sandbox.status().unwrap();

    // Second life: it must pick up where the first one stopped.
    let mut engine = sandbox.spawn(&["run", "--auto"]);
    let status = sandbox.wait_for("the workflow to complete", completed);
    let output = terminate(&mut engine);
    assert!(output.status.success(), "clean exit on SIGTERM: {output:?}");

    let workflow = workflow(&status);
    assert_eq!(workflow["succeeded"], true, "{workflow:#}");
    assert_eq!(workflow["requeues_used"], 1);
    assert_eq!(workflow["attempts"].as_array().unwrap().len(), 2);
    assert_eq!(workflow["anomalies"].as_array().unwrap().len(), 1);
    let requeues: Vec<&Value> = workflow["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["kind"] == "requeue")
        .collect();
    assert_eq!(requeues.len(), 1);
    assert_eq!(requeues[0]["state"], "done");
    // Everything the first life recorded is still there.
    let first_checkpoints = workflow_checkpoints(&before);
    assert!(workflow["checkpoints"].as_u64().unwrap() >= first_checkpoints);
    assert_eq!(
        workflow["attributions"][0],
        before["workflows"][0]["attributions"][0]
    );
    // The headless engine logs JSON lines.
    let text = stdout(&output);
    let first_line = text.lines().next().unwrap_or_default();
    assert!(
        serde_json::from_str::<Value>(first_line).is_ok(),
        "{first_line}"
    );
}

fn workflow_checkpoints(status: &Value) -> u64 {
    status["workflows"][0]["checkpoints"].as_u64().unwrap_or(0)
}

#[test]
fn a_headless_engine_killed_before_any_failure_continues_the_same_run() {
    let sandbox = sim_sandbox("nccl-timeout", 400, r#"["requeue", "cancel"]"#);
    let mut engine = sandbox.spawn(&["run", "--auto"]);
    sandbox.wait_for("a first checkpoint", |status| {
        workflow_checkpoints(status) >= 1
    });
    engine.kill().unwrap();
    engine.wait().unwrap();

    let mut engine = sandbox.spawn(&["run", "--auto"]);
    let status = sandbox.wait_for("the workflow to complete", completed);
    terminate(&mut engine);
    let workflow = workflow(&status);
    assert_eq!(workflow["succeeded"], true);
    assert_eq!(workflow["attempts"].as_array().unwrap().len(), 2);
    assert_eq!(workflow["requeues_used"], 1);
}

#[test]
fn a_second_engine_on_the_same_store_is_refused() {
    let sandbox = sim_sandbox("healthy", 10, r#"["requeue"]"#);
    let mut first = sandbox.spawn(&["run", "--auto"]);
    sandbox.wait_for("the first engine to enrol jobs", |status| {
        !status["workflows"].as_array().unwrap().is_empty()
    });
    let second = sandbox.run(&["run", "--auto"]);
    assert!(!second.status.success());
    let message = stderr(&second);
    assert!(message.contains("already acting"), "{message}");
    terminate(&mut first);
}

#[test]
fn a_proposed_action_is_approved_from_the_command_line_while_the_engine_runs() {
    let sandbox = sim_sandbox("nccl-timeout", 400, "[]");
    let mut engine = sandbox.spawn(&["run", "--auto"]);
    let status = sandbox.wait_for("a proposed requeue", |status| {
        workflow(status)["actions"]
            .as_array()
            .is_some_and(|actions| actions.iter().any(|a| a["kind"] == "requeue"))
    });
    let action = workflow(&status)["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["kind"] == "requeue")
        .unwrap()
        .clone();
    assert_eq!(action["state"], "proposed");
    assert_eq!(action["permitted"], false);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        workflow(&sandbox.status().unwrap())["attempts"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "nothing happens before approval"
    );

    let id = action["id"].to_string();
    let approve = sandbox.run(&["approve", &id]);
    assert!(approve.status.success(), "{}", stderr(&approve));
    assert!(
        stdout(&approve).contains("approved"),
        "{}",
        stdout(&approve)
    );

    let status = sandbox.wait_for("the approved recovery to complete", completed);
    terminate(&mut engine);
    assert_eq!(workflow(&status)["succeeded"], true);
    assert_eq!(workflow(&status)["attempts"].as_array().unwrap().len(), 2);
}

#[test]
fn approving_an_unknown_action_is_a_clear_error() {
    let sandbox = CliSandbox::default();
    let demo = sandbox.run(&["demo", "--scenario", "app-bug", "--speed", "2000"]);
    assert!(demo.status.success(), "{}", stderr(&demo));
    let output = sandbox.run(&["approve", "999"]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("no action 999"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn a_bad_config_names_the_key_and_the_line() {
    let sandbox = CliSandbox::new("[engine]\npoll_interval_secs = 5\nheartbeat_timout_secs = 10\n");
    let output = sandbox.run(&["status"]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(message.contains("heartbeat_timout_secs"), "{message}");
    assert!(message.contains("line 3"), "{message}");
}

#[test]
fn status_without_a_store_says_so() {
    let sandbox = CliSandbox::default();
    let output = sandbox.run(&["status"]);
    assert!(!output.status.success());
    assert!(stderr(&output).contains("no store"), "{}", stderr(&output));
}

#[test]
fn an_unknown_scenario_lists_the_known_ones() {
    let sandbox = CliSandbox::default();
    let output = sandbox.run(&["demo", "--scenario", "meteor-strike"]);
    assert!(!output.status.success());
    let message = stderr(&output);
    assert!(message.contains("meteor-strike"), "{message}");
    assert!(message.contains("nccl-timeout"), "{message}");
}

#[test]
fn the_node_ledger_lists_the_node_an_xid_took_out_and_the_user_can_release_it() {
    let sandbox = CliSandbox::default();
    let demo = sandbox.run(&["demo", "--scenario", "xid79", "--speed", "2000"]);
    assert!(demo.status.success(), "{}", stderr(&demo));
    let status = sandbox.status().expect("status --json");
    let culprit = workflow(&status)["attributions"][0]["culprit"]["node"]
        .as_str()
        .expect("a culprit")
        .to_string();
    let listed = sandbox.run(&["nodes", "--json"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    let nodes: Value = serde_json::from_str(&stdout(&listed)).unwrap();
    let first = &nodes[0];
    assert_eq!(first["node"], culprit.as_str(), "{nodes:#}");
    assert_eq!(first["state"], "quarantined", "{nodes:#}");
    assert!(first["score"].as_f64().unwrap() >= 6.0, "{nodes:#}");
    assert!(
        first["incidents"]
            .as_array()
            .unwrap()
            .iter()
            .any(|incident| incident["kind"] == "xid_79"),
        "{nodes:#}"
    );
    let table = stdout(&sandbox.run(&["nodes"]));
    assert!(
        table.contains(&culprit) && table.contains("quarantined"),
        "{table}"
    );

    let released = sandbox.run(&["nodes", "--release", &culprit]);
    assert!(released.status.success(), "{}", stderr(&released));
    assert!(
        stdout(&released).contains("released"),
        "{}",
        stdout(&released)
    );
    let nodes: Value = serde_json::from_str(&stdout(&sandbox.run(&["nodes", "--json"]))).unwrap();
    assert_eq!(nodes[0]["state"], "probation", "{nodes:#}");
    let unknown = sandbox.run(&["nodes", "--release", "node-99"]);
    assert!(!unknown.status.success());
    assert!(
        stderr(&unknown).contains("not in the ledger"),
        "{}",
        stderr(&unknown)
    );
}
