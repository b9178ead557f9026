//! `runguard report` end to end: a simulated recovery reported in text, Markdown and JSON, and an
//! unknown id.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde::Deserialize;
use serde_json::Value;

use runguard::model::{
    Action, Anomaly, Attempt, Attribution, Checkpoint, ThroughputSample, Workflow,
};
use runguard::store::Store;

const BIN: &str = env!("CARGO_BIN_EXE_runguard");

struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new(config: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        Self { dir }
    }

    fn db(&self) -> PathBuf {
        self.dir.path().join("runguard.sqlite")
    }

    fn run(&self, args: &[&str]) -> Output {
        Command::new(BIN)
            .arg("--config")
            .arg(self.dir.path().join("config.toml"))
            .arg("--db")
            .arg(self.db())
            .args(args)
            .env("XDG_CONFIG_HOME", self.dir.path().join("xdg-config"))
            .env("XDG_DATA_HOME", self.dir.path().join("xdg-data"))
            .env_remove("RUNGUARD_CONFIG")
            .env_remove("RUNGUARD_DB")
            .output()
            .unwrap()
    }

    /// `runguard report ARGS`, which must succeed; its stdout.
    fn report(&self, args: &[&str]) -> String {
        let mut all = vec!["report"];
        all.extend_from_slice(args);
        let output = self.run(&all);
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output)
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn assert_contains(text: &str, expected: &[&str]) {
    for expected in expected {
        assert!(text.contains(expected), "{expected:?} missing:\n{text}");
    }
}

/// The nccl-timeout demo's records (with two secrets planted in the crash's evidence).
#[derive(Deserialize)]
struct Recorded {
    workflow: Workflow,
    attempts: Vec<Attempt>,
    checkpoints: Vec<Checkpoint>,
    throughput: Vec<ThroughputSample>,
    anomalies: Vec<Anomaly>,
    attributions: Vec<Attribution>,
    actions: Vec<Action>,
}

/// A store holding `tests/fixtures/report/nccl_timeout_recovered.json`, under `config`.
fn recorded_sandbox(config: &str) -> Sandbox {
    let sandbox = Sandbox::new(config);
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/report/nccl_timeout_recovered.json");
    let recorded: Recorded = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut store = Store::open(&sandbox.db()).unwrap();
    store
        .write(|db| {
            let id = db.insert_workflow(&recorded.workflow)?;
            assert_eq!(id, recorded.workflow.id);
            for attempt in &recorded.attempts {
                db.save_attempt(attempt)?;
            }
            for checkpoint in &recorded.checkpoints {
                db.insert_checkpoint(checkpoint)?;
            }
            for sample in &recorded.throughput {
                db.insert_throughput(sample)?;
            }
            for anomaly in &recorded.anomalies {
                db.insert_anomaly(anomaly)?;
            }
            for attribution in &recorded.attributions {
                db.insert_attribution(attribution)?;
            }
            for action in &recorded.actions {
                db.insert_action(action)?;
            }
            Ok(())
        })
        .unwrap();
    sandbox
}

#[test]
fn a_recovered_run_is_reported_in_text_markdown_and_json() {
    let sandbox = Sandbox::new("");
    let demo = sandbox.run(&["demo", "--speed", "1500"]);
    assert!(demo.status.success(), "{}", stderr(&demo));

    let text = sandbox.report(&["1"]);
    assert_contains(
        &text,
        &[
            "Recovery report: workflow 1 llama3-8b-pretrain (sim)",
            "requeues:  1 of 3",
            "Failure 1 of 1: crash of attempt 0 (job 4201)",
            "Watchdog caught collective operation timeout",
            "attribution: nccl_timeout (network), culprit node-07",
            "action 1 requeue: done",
            "ExcNodeList=node-07",
            "would have done (not permitted or never approved):",
            "action 2 drain_node: proposed, not in the recovery whitelist; never approved",
            "command: scontrol update NodeName=node-07 State=DRAIN Reason=\"runguard: nccl_timeout\"",
            "to training again (attempt 0 → 1)",
            "    detection ",
            "    analysis ",
            "    requeue ",
            "    pending ",
            "    checkpoint load ",
            "    lost work        50 iterations after the checkpoint of iteration 300",
        ],
    );
    assert!(
        !text.contains("arrative"),
        "no endpoint, no narrative:\n{text}"
    );
    // The job id names the same workflow.
    assert_contains(
        &sandbox.report(&["4201"]),
        &["Recovery report: workflow 1 llama3-8b-pretrain (sim)"],
    );

    let markdown = sandbox.report(&["1", "--markdown"]);
    assert_contains(
        &markdown,
        &[
            "# Recovery report: llama3-8b-pretrain (workflow 1)",
            "## Failure 1 of 1: crash of attempt 0 (job 4201)",
            "```text\n",
            "Watchdog caught collective operation timeout",
            "**nccl_timeout (network), culprit node-07",
            "### Would have done (not permitted or never approved)",
            "- command: `scontrol update NodeName=node-07 State=DRAIN Reason=\"runguard: nccl_timeout\"`",
            "| detection |",
            "| analysis |",
            "| requeue |",
            "| pending |",
            "| checkpoint load |",
            "Lost work: 50 iterations after the checkpoint of iteration 300",
        ],
    );

    let json: Value = serde_json::from_str(&sandbox.report(&["1", "--json"])).unwrap();
    assert_eq!(json["workflow"]["name"], "llama3-8b-pretrain");
    assert_eq!(json["workflow"]["job_ids"], serde_json::json!(["4201"]));
    let failure = &json["failures"][0];
    assert_eq!(failure["kind"], "crash");
    assert_eq!(failure["attribution"]["culprit"]["node"], "node-07");
    assert!(
        failure["evidence"]
            .as_array()
            .unwrap()
            .iter()
            .any(|line| line
                .as_str()
                .unwrap()
                .contains("Watchdog caught collective operation timeout")),
        "{failure:#}"
    );
    assert_eq!(failure["actions_taken"][0]["kind"], "requeue");
    assert_eq!(failure["actions_taken"][0]["state"], "done");
    let drain = &failure["actions_not_taken"][0];
    assert_eq!(drain["kind"], "drain_node");
    assert_eq!(drain["permitted"], false);
    assert!(
        drain["command"]
            .as_str()
            .unwrap()
            .starts_with("scontrol update NodeName=node-07 State=DRAIN"),
        "{drain:#}"
    );
    let gaps: Vec<&str> = failure["downtime"]["gaps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|gap| gap["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        gaps,
        [
            "detection",
            "analysis",
            "requeue",
            "pending",
            "checkpoint_load"
        ]
    );
    assert_eq!(failure["downtime"]["resumed_from"], 300);
    assert!(failure.get("narrative").is_none(), "{failure:#}");
}

#[test]
fn an_unknown_id_is_a_clear_error() {
    let sandbox = recorded_sandbox("");
    let output = sandbox.run(&["report", "77"]);
    assert!(!output.status.success());
    assert_contains(
        &stderr(&output),
        &["no workflow or job \"77\"", "runguard status"],
    );
    let empty = Sandbox::new("");
    let output = empty.run(&["report", "1"]);
    assert!(!output.status.success());
    assert_contains(&stderr(&output), &["no store"]);
}
