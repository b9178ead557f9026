//! `runguard report` end to end: a simulated recovery reported in text, Markdown and JSON; an unknown
//! id; and the optional narrative against a local stand-in for a chat-completions endpoint
//! (`tests/servers/chat_completions.py`) that answers, stalls, fails or talks nonsense.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde::Deserialize;
use serde_json::Value;

use runguard_engine::model::{
    Action, Anomaly, Attempt, Attribution, Checkpoint, ThroughputSample, Workflow,
};
use runguard_engine::store::Store;

use crate::support::{CliSandbox, WATCHDOG_ENDS_THE_JOB, json_lines, stderr, stdout};

/// The label every narrative carries.
const LABEL: &str = "Narrative (written by a language model from the evidence above; runguard did not use it for any decision)";

/// The narrative endpoint's key, planted in the fixture's evidence too: it may only reach the
/// endpoint in the Authorization header.
const API_KEY: &str = "sk-rg-test-5d1c9e2b7a4f";
const KEY_VARIABLE: &str = "RG_TEST_NARRATIVE_KEY";
/// The WANDB_API_KEY value planted in the fixture's evidence.
const WANDB_KEY: &str = "3f9c2a7e51d04b8c9e6fa1b2c3d4e5f6";

/// A sandbox under `config` whose commands can reach the stand-in endpoint.
fn report_sandbox(config: &str) -> CliSandbox {
    CliSandbox::new(config)
        .env(KEY_VARIABLE, API_KEY)
        // The stand-in endpoint is on the loopback: no proxy may carry the requests.
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("all_proxy")
        .env_remove("ALL_PROXY")
}

/// `runguard report ARGS`, which must succeed; its stdout.
fn report(sandbox: &CliSandbox, args: &[&str]) -> String {
    let mut all = vec!["report"];
    all.extend_from_slice(args);
    let output = sandbox.run(&all);
    assert!(output.status.success(), "{}", stderr(&output));
    stdout(&output)
}

fn assert_contains(text: &str, expected: &[&str]) {
    for expected in expected {
        assert!(text.contains(expected), "{expected:?} missing:\n{text}");
    }
}

/// The nccl-timeout demo's records with two secrets planted in the crash's evidence.
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
fn recorded_sandbox(config: &str) -> CliSandbox {
    let sandbox = report_sandbox(config);
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

/// The stand-in endpoint, stopped when dropped.
struct ChatServer {
    child: Child,
    port: u16,
    record: PathBuf,
}

impl ChatServer {
    fn start(mode: &str, dir: &Path) -> Self {
        let record = dir.join(format!("requests-{mode}.jsonl"));
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/servers/chat_completions.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args(["0", mode])
            .arg(&record)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python3 runs the stand-in endpoint");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut first)
            .unwrap();
        let port = first.trim().parse().unwrap_or_else(|_| {
            let _ = child.kill();
            panic!("the stand-in endpoint printed {first:?} instead of its port")
        });
        Self {
            child,
            port,
            record,
        }
    }

    /// The `[narrative]` section pointing at this server.
    fn config(&self, timeout_secs: u64) -> String {
        format!(
            "[narrative]\nendpoint = \"http://127.0.0.1:{}/v1/chat/completions\"\nmodel = \"test-model\"\n\
             api_key_env = \"{KEY_VARIABLE}\"\ntimeout_secs = {timeout_secs}\n",
            self.port
        )
    }

    /// Every request received so far.
    fn requests(&self) -> Vec<Value> {
        json_lines(&self.record)
    }
}

impl Drop for ChatServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the rule-based report of the fixture says in any format.
const RULE_BASED: [&str; 4] = [
    "node-07",
    "Watchdog caught collective operation timeout",
    "scontrol update NodeName=node-07 State=DRAIN",
    "WANDB_API_KEY=[redacted]",
];

fn assert_no_secret(text: &str) {
    assert!(!text.contains(WANDB_KEY), "{text}");
    assert!(!text.contains(API_KEY), "{text}");
}

#[cfg(feature = "sim")]
#[test]
fn a_recovered_run_is_reported_in_text_markdown_and_json() {
    let sandbox = report_sandbox(WATCHDOG_ENDS_THE_JOB);
    let demo = sandbox.run(&["demo", "--speed", "1500"]);
    assert!(demo.status.success(), "{}", stderr(&demo));

    let text = report(&sandbox, &["1"]);
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
        &report(&sandbox, &["4201"]),
        &["Recovery report: workflow 1 llama3-8b-pretrain (sim)"],
    );

    let markdown = report(&sandbox, &["1", "--markdown"]);
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

    let json: Value = serde_json::from_str(&report(&sandbox, &["1", "--json"])).unwrap();
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
    let empty = report_sandbox("");
    let output = empty.run(&["report", "1"]);
    assert!(!output.status.success());
    assert_contains(&stderr(&output), &["no store"]);
}

#[test]
fn an_answering_endpoint_adds_a_labelled_narrative_written_from_redacted_evidence() {
    let dir = tempfile::tempdir().unwrap();
    let server = ChatServer::start("ok", dir.path());
    let sandbox = recorded_sandbox(&server.config(10));

    let text = report(&sandbox, &["1"]);
    assert_contains(&text, &RULE_BASED);
    assert_contains(
        &text,
        &[
            &format!(
                "  {LABEL}, by model test-model at http://127.0.0.1:{}:\n",
                server.port
            ),
            "    The all-reduce stalled when node-07's InfiniBand link failed",
        ],
    );
    assert_no_secret(&text);

    let requests = server.requests();
    assert_eq!(requests.len(), 1, "{requests:#?}");
    let request = &requests[0];
    assert_eq!(request["path"], "/v1/chat/completions");
    assert_eq!(request["authorization"], format!("Bearer {API_KEY}"));
    let raw = request["body"].as_str().unwrap();
    assert_no_secret(raw);
    let body: Value = serde_json::from_str(raw).unwrap();
    assert_eq!(body["model"], "test-model");
    assert_eq!(body["temperature"], 0);
    assert_eq!(body["messages"][0]["role"], "system");
    assert_eq!(body["messages"][1]["role"], "user");
    let bundle = body["messages"][1]["content"].as_str().unwrap();
    assert_contains(
        bundle,
        &[
            "Watchdog caught collective operation timeout",
            "culprit node-07",
            "scontrol update NodeName=node-07 State=DRAIN",
            "WANDB_API_KEY=[redacted]",
            "tracker handshake with [redacted] failed",
            "checkpoint load",
        ],
    );
    assert!(bundle.len() <= 16384, "{}", bundle.len());

    // The narrative is kept: the other formats show it without asking again.
    let markdown = report(&sandbox, &["1", "--markdown"]);
    assert_contains(
        &markdown,
        &[
            &format!("### {LABEL}\n"),
            "> The all-reduce stalled when node-07's InfiniBand link failed",
        ],
    );
    assert_no_secret(&markdown);
    let json_text = report(&sandbox, &["1", "--json"]);
    assert_no_secret(&json_text);
    let json: Value = serde_json::from_str(&json_text).unwrap();
    let narrative = &json["failures"][0]["narrative"];
    assert_eq!(narrative["status"], "written");
    assert_eq!(narrative["label"], LABEL);
    assert!(
        narrative["text"]
            .as_str()
            .unwrap()
            .starts_with("The all-reduce stalled"),
        "{narrative:#}"
    );
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn a_slow_endpoint_is_given_up_on_and_the_rule_based_report_is_printed() {
    let dir = tempfile::tempdir().unwrap();
    // The server answers after 30 s; the report waits 1 s.
    let server = ChatServer::start("slow", dir.path());
    let sandbox = recorded_sandbox(&server.config(1));
    let text = report(&sandbox, &["1"]);
    assert_contains(&text, &RULE_BASED);
    // The client's own timeout ended the wait, not the server's answer.
    assert_contains(&text, &["  narrative unavailable: no answer within 1 s\n"]);
    assert!(!text.contains(LABEL), "{text}");
    assert_eq!(server.requests().len(), 1);
    // Nothing is kept: the next report asks again.
    let store = Store::open(&sandbox.db()).unwrap();
    assert!(store.db().narratives(1).unwrap().is_empty());
}

/// The report of the fixture with a server in `mode`: the text and the JSON's narrative.
fn unusable(mode: &str) -> (String, Value) {
    let dir = tempfile::tempdir().unwrap();
    let server = ChatServer::start(mode, dir.path());
    let sandbox = recorded_sandbox(&server.config(10));
    let text = report(&sandbox, &["1"]);
    assert_contains(&text, &RULE_BASED);
    assert!(!text.contains(LABEL), "{text}");
    assert_no_secret(&text);
    let json: Value = serde_json::from_str(&report(&sandbox, &["1", "--json"])).unwrap();
    // Each report asked once: an unusable answer is not kept.
    assert_eq!(server.requests().len(), 2);
    (text, json["failures"][0]["narrative"].clone())
}

#[test]
fn an_http_error_leaves_the_rule_based_report() {
    let (text, narrative) = unusable("error");
    assert_contains(
        &text,
        &[
            "narrative unavailable: the endpoint answered HTTP 500: {\"error\": {\"message\": \"the model crashed\"}}",
        ],
    );
    assert_eq!(narrative["status"], "unavailable");
}

#[test]
fn a_nonsense_answer_leaves_the_rule_based_report() {
    let (text, narrative) = unusable("nonsense");
    assert_contains(&text, &["narrative unavailable: the answer is not JSON"]);
    assert!(
        narrative["reason"]
            .as_str()
            .unwrap()
            .starts_with("the answer is not JSON"),
        "{narrative:#}"
    );
}

#[test]
fn an_empty_narrative_leaves_the_rule_based_report() {
    let (text, narrative) = unusable("empty");
    assert_contains(&text, &["narrative unavailable: the narrative is empty"]);
    assert_eq!(narrative["reason"], "the narrative is empty");
}
