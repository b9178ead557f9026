//! Alerts end to end: the real binary recovers a simulated failure while real local servers receive
//! the alerts (an HTTP server for the webhooks, aiosmtpd for the mail, a program for the command
//! channel); then the same with each server down, slow or refusing, and an engine restarted with
//! alerts still undelivered.
//!
//! The SMTP server is Debian's `python3-aiosmtpd` (or the PyPI package). Without it these tests say so
//! and skip, unless `RUNGUARD_REQUIRE_ALERT_SERVERS=1` (CI), where that is a failure.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{
    CliSandbox, WATCHDOG_ENDS_THE_JOB, available, free_port, json_lines, terminate,
};

const SERVERS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/servers");
/// Real-time bound for waits on a loaded machine; never a measure of speed.
const DEADLINE: Duration = Duration::from_secs(120);
/// Planted in the webhook's URL and token: it must never show in anything runguard prints.
const SECRET_PATH: &str = "T0SECRET/B0PATH/xoxb9f8e7d6c5";
const TOKEN: &str = "tok-4f1c9a8e2b7d";

/// A Python interpreter that has `module`, or a reason to skip.
fn python_with(module: &str) -> Option<String> {
    let found = ["python3", "/usr/bin/python3"].into_iter().find(|python| {
        Command::new(python)
            .args(["-c", &format!("import {module}")])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    });
    available(
        found.is_some(),
        "RUNGUARD_REQUIRE_ALERT_SERVERS",
        &format!("no python3 with {module} (apt-get install python3-aiosmtpd)"),
    );
    found.map(str::to_string)
}

fn wait_until_listening(port: u16) {
    let start = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "port {port} never opened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A server child process, killed when dropped, recording what it received to a JSON-lines file.
struct Server {
    child: Child,
    port: u16,
    record: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// `http_sink.py` in `mode` (ok, slow, refuse, error), on `port` or a free one.
    fn http(python: &str, dir: &Path, mode: &str, port: Option<u16>) -> Self {
        static STARTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let number = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let record = dir.join(format!("http-{mode}-{number}.jsonl"));
        let mut child = Command::new(python)
            .arg(Path::new(SERVERS).join("http_sink.py"))
            .arg(&record)
            .arg(mode)
            .arg(port.unwrap_or(0).to_string())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line.trim().trim_start_matches("PORT ").parse().unwrap();
        Self {
            child,
            port,
            record,
        }
    }

    /// aiosmtpd with one of `smtp_handlers.py`'s handlers (Recording, Refusing, Slow).
    fn smtp(python: &str, dir: &Path, handler: &str) -> Self {
        let port = free_port();
        let record = dir.join(format!("smtp-{handler}.jsonl"));
        let child = Command::new(python)
            .args(["-m", "aiosmtpd", "-n", "-l"])
            .arg(format!("127.0.0.1:{port}"))
            .args(["-c", &format!("smtp_handlers.{handler}")])
            .arg(&record)
            .env("PYTHONPATH", SERVERS)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        wait_until_listening(port);
        Self {
            child,
            port,
            record,
        }
    }

    fn received(&self) -> Vec<Value> {
        json_lines(&self.record)
    }
}

/// A sandbox for the demo; its webhook's token in the environment.
fn sandbox() -> CliSandbox {
    CliSandbox::default()
        .env("RUNGUARD_TEST_HOOK_TOKEN", TOKEN)
        .env("RUST_LOG", "info")
}

/// The nccl-timeout scenario with `alerts`.
fn configure(sandbox: &CliSandbox, alerts: &str) {
    sandbox.write_config(&format!(
        "{}\n{alerts}\n{WATCHDOG_ENDS_THE_JOB}",
        sandbox.sim_section("nccl-timeout", None)
    ));
}

/// The demo (the nccl-timeout scenario, recovered automatically) to its end.
fn demo(sandbox: &CliSandbox) -> Output {
    let output = sandbox.run(&["demo", "--speed", "1500"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn json(sandbox: &CliSandbox, args: &[&str]) -> Value {
    let output = sandbox.run(args);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn deliveries(sandbox: &CliSandbox) -> Vec<Value> {
    json(sandbox, &["alerts", "--json", "--limit", "500"])
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn printed(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A request's header, whatever the case of its name.
fn header(entry: &Value, name: &str) -> Option<String> {
    entry["headers"]
        .as_object()?
        .iter()
        .find_map(|(key, value)| {
            key.eq_ignore_ascii_case(name)
                .then(|| value.as_str().unwrap_or_default().to_string())
        })
}

fn events(received: &[Value], at: &str) -> Vec<String> {
    received
        .iter()
        .filter_map(|entry| entry.pointer(at).and_then(Value::as_str))
        .map(str::to_string)
        .collect()
}

fn channel_states<'a>(deliveries: &'a [Value], channel: &str) -> Vec<&'a str> {
    deliveries
        .iter()
        .filter(|d| d["channel"] == channel)
        .filter_map(|d| d["state"].as_str())
        .collect()
}

/// A webhook channel `name` to a receiver on `port`, told of failures only.
fn failure_webhook(name: &str, port: u16) -> String {
    format!(
        r#"[[alerts.channels]]
name = "{name}"
kind = "webhook"
url = "http://127.0.0.1:{port}/hook"
events = ["failure"]

"#
    )
}

/// A mail channel `name` through the SMTP server on `port` to `to`, told of failures only.
fn failure_mail(name: &str, port: u16, to: &str) -> String {
    format!(
        r#"[[alerts.channels]]
name = "{name}"
kind = "email"
smtp_host = "127.0.0.1"
smtp_port = {port}
smtp_security = "none"
from = "runguard@localhost"
to = ["{to}"]
events = ["failure"]

"#
    )
}

#[test]
fn every_channel_receives_the_recovery_with_its_attribution_evidence_and_commands() {
    let (Some(python), Some(smtp_python)) = (python_with("json"), python_with("aiosmtpd")) else {
        return;
    };
    let sandbox = sandbox();
    let hook = Server::http(&python, sandbox.path(), "ok", None);
    let slack = Server::http(&python, sandbox.path(), "ok", None);
    let mail = Server::smtp(&smtp_python, sandbox.path(), "Recording");
    let command_out = sandbox.path().join("command.jsonl");
    configure(
        &sandbox,
        &format!(
            r#"[alerts]
retry_initial_secs = 1
flush_on_exit_secs = 20

[[alerts.channels]]
name = "hook"
kind = "webhook"
url = "http://127.0.0.1:{}/hooks/{SECRET_PATH}"
token_env = "RUNGUARD_TEST_HOOK_TOKEN"

[[alerts.channels]]
name = "team-slack"
kind = "slack"
url = "http://127.0.0.1:{}/services/{SECRET_PATH}"
events = ["failure", "completed"]

[[alerts.channels]]
name = "mail"
kind = "email"
smtp_host = "127.0.0.1"
smtp_port = {}
smtp_security = "none"
from = "runguard <runguard@localhost>"
to = ["alice@localhost"]
min_severity = "critical"

[[alerts.channels]]
name = "tee"
kind = "command"
argv = ["tee", "-a", "{}"]
events = ["recovered"]
"#,
            hook.port,
            slack.port,
            mail.port,
            command_out.display()
        ),
    );
    let output = demo(&sandbox);

    // The JSON webhook: every event of the recovery, in order, each with what it is about.
    let hooked = hook.received();
    let hook_events = events(&hooked, "/body/event");
    for event in ["failure", "recovering", "recovered", "completed"] {
        assert!(
            hook_events.iter().any(|e| e == event),
            "{event} in {hook_events:?}"
        );
    }
    let failure = hooked
        .iter()
        .map(|entry| &entry["body"])
        .find(|alert| alert["event"] == "failure")
        .unwrap();
    assert_eq!(failure["severity"], "critical");
    assert_eq!(
        failure["attribution"]["category"], "nccl_timeout",
        "{failure:#}"
    );
    assert!(
        failure["attribution"]["culprit_node"].is_string(),
        "{failure:#}"
    );
    let evidence = failure["attribution"]["evidence"].as_array().unwrap();
    assert!(
        evidence
            .iter()
            .any(|line| line.as_str().unwrap_or_default().contains("NCCL")),
        "{failure:#}"
    );
    let actions = failure["actions"].as_array().unwrap();
    assert!(
        actions.iter().any(|a| a["kind"] == "requeue"),
        "{failure:#}"
    );
    assert!(
        actions.iter().any(|a| a["kind"] == "drain_node"
            && a["permitted"] == false
            && a["command"].as_str().is_some_and(|c| !c.is_empty())),
        "the drain it would have run: {failure:#}"
    );
    let see_more = failure["see_more"].to_string();
    assert!(see_more.contains("runguard status 1"), "{see_more}");
    assert!(see_more.contains("runguard report 1"), "{see_more}");
    assert!(
        hooked
            .iter()
            .all(|entry| header(entry, "authorization") == Some(format!("Bearer {TOKEN}"))),
        "{hooked:#?}"
    );
    assert!(hooked.iter().all(|entry| {
        entry["path"]
            .as_str()
            .unwrap_or_default()
            .ends_with(SECRET_PATH)
    }));

    // Slack: only its two events, as text and blocks.
    let slacked = slack.received();
    let texts = events(&slacked, "/body/text");
    assert_eq!(texts.len(), 2, "{slacked:#?}");
    assert!(
        texts[0].starts_with("[critical]") && texts[0].contains("nccl_timeout"),
        "{texts:?}"
    );
    assert!(texts[1].contains("completed"), "{texts:?}");
    assert_eq!(slacked[0]["body"]["blocks"][0]["type"], "header");

    // Mail: only the critical alert, a real message with the evidence.
    let mails = mail.received();
    assert_eq!(mails.len(), 1, "{mails:#?}");
    assert_eq!(mails[0]["rcpt_tos"][0], "alice@localhost");
    let data = mails[0]["data"].as_str().unwrap();
    assert!(data.contains("Subject: [runguard]"), "{data}");
    assert!(data.contains("Evidence:"), "{data}");
    assert!(data.contains("not permitted, would have run:"), "{data}");

    // The command got the alert on its stdin.
    let piped = std::fs::read_to_string(&command_out).unwrap();
    let piped: Value = serde_json::from_str(piped.lines().next().unwrap()).unwrap();
    assert_eq!(piped["event"], "recovered");

    // Every delivery is recorded as delivered; no secret is printed anywhere.
    let deliveries = deliveries(&sandbox);
    for channel in ["hook", "team-slack", "mail", "tee"] {
        let states = channel_states(&deliveries, channel);
        assert!(
            !states.is_empty() && states.iter().all(|s| *s == "delivered"),
            "{channel}: {states:?}"
        );
    }
    let listing = sandbox.run(&["alerts"]);
    for text in [
        printed(&output),
        printed(&listing),
        serde_json::to_string(&deliveries).unwrap(),
    ] {
        assert!(
            !text.contains(SECRET_PATH),
            "the webhook path leaked: {text}"
        );
        assert!(!text.contains(TOKEN), "the token leaked: {text}");
    }
}

#[test]
fn a_channel_that_is_down_is_retried_and_its_alerts_go_out_after_a_restart() {
    let Some(python) = python_with("json") else {
        return;
    };
    let sandbox = sandbox();
    let port = free_port();
    configure(
        &sandbox,
        &format!(
            r#"[alerts]
retry_initial_secs = 1
retry_max_secs = 2
max_attempts = 1000
flush_on_exit_secs = 2

[[alerts.channels]]
name = "hook"
kind = "webhook"
url = "http://127.0.0.1:{port}/hooks/{SECRET_PATH}"
"#
        ),
    );
    // Nothing listens: the recovery goes on regardless, and the alerts wait in the store.
    demo(&sandbox);
    let status = json(&sandbox, &["status", "--json"]);
    assert_eq!(status["workflows"][0]["succeeded"], true);
    let waiting = deliveries(&sandbox);
    assert!(!waiting.is_empty());
    assert!(
        channel_states(&waiting, "hook")
            .iter()
            .all(|s| *s == "pending"),
        "{waiting:#?}"
    );
    assert!(
        waiting
            .iter()
            .any(|d| d["attempts"].as_u64().unwrap_or_default() >= 1)
    );
    let error = waiting[0]["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("cannot connect"), "{error}");
    assert!(!error.contains(SECRET_PATH), "{error}");

    // The receiver comes up; a restarted engine delivers what was waiting.
    let hook = Server::http(&python, sandbox.path(), "ok", Some(port));
    let mut engine = sandbox.spawn_quiet(&["run", "--auto"]);
    let start = Instant::now();
    while hook.received().len() < waiting.len() && start.elapsed() < DEADLINE {
        std::thread::sleep(Duration::from_millis(100));
    }
    terminate(&mut engine);
    let received = hook.received();
    assert_eq!(received.len(), waiting.len(), "{received:#?}");
    assert!(events(&received, "/body/event").contains(&"failure".to_string()));
    assert!(
        channel_states(&deliveries(&sandbox), "hook")
            .iter()
            .all(|s| *s == "delivered")
    );
}

#[test]
fn a_slow_receiver_times_out_and_a_refusing_one_is_given_up_without_delaying_the_recovery() {
    let (Some(python), Some(smtp_python)) = (python_with("json"), python_with("aiosmtpd")) else {
        return;
    };
    let sandbox = sandbox();
    let slow = Server::http(&python, sandbox.path(), "slow", None);
    let refusing = Server::http(&python, sandbox.path(), "refuse", None);
    let failing = Server::http(&python, sandbox.path(), "error", None);
    let refusing_mail = Server::smtp(&smtp_python, sandbox.path(), "Refusing");
    let slow_mail = Server::smtp(&smtp_python, sandbox.path(), "Slow");
    let no_mail_server = free_port();
    configure(
        &sandbox,
        &format!(
            "[alerts]
timeout_secs = 1
retry_initial_secs = 1
retry_max_secs = 1
max_attempts = 2
flush_on_exit_secs = 8

{}{}{}{}{}{}",
            failure_webhook("slow", slow.port),
            failure_webhook("refusing", refusing.port),
            failure_webhook("failing", failing.port),
            failure_mail("refusing-mail", refusing_mail.port, "nobody@localhost"),
            failure_mail("slow-mail", slow_mail.port, "alice@localhost"),
            failure_mail("no-mail", no_mail_server, "alice@localhost"),
        ),
    );
    demo(&sandbox);
    assert_eq!(
        json(&sandbox, &["status", "--json"])["workflows"][0]["succeeded"],
        true
    );
    let deliveries = deliveries(&sandbox);
    let of = |channel: &str| {
        deliveries
            .iter()
            .find(|d| d["channel"] == channel)
            .cloned()
            .unwrap_or_else(|| panic!("no delivery on {channel}: {deliveries:#?}"))
    };
    // The slow receiver got the request but never answered in time: tried twice, then given up.
    assert!(!slow.received().is_empty());
    let timed_out = of("slow");
    assert_eq!(timed_out["state"], "failed", "{timed_out:#}");
    assert_eq!(timed_out["attempts"], 2);
    assert!(
        timed_out["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("no answer within 1 s")
    );
    // A 403 is final at once; a 500 is retried.
    let refused = of("refusing");
    assert_eq!(refused["state"], "failed");
    assert_eq!(refused["attempts"], 1);
    assert!(
        refused["last_error"]
            .as_str()
            .unwrap_or_default()
            .starts_with("HTTP 403")
    );
    let failed = of("failing");
    assert_eq!(failed["state"], "failed");
    assert_eq!(failed["attempts"], 2, "{failed:#}");
    assert_eq!(failing.received().len(), 2);
    // The mail server's 550 is permanent.
    let bounced = of("refusing-mail");
    assert_eq!(bounced["state"], "failed", "{bounced:#}");
    assert_eq!(bounced["attempts"], 1);
    assert!(
        bounced["last_error"]
            .as_str()
            .unwrap_or_default()
            .contains("550"),
        "{bounced:#}"
    );
    assert_eq!(refusing_mail.received()[0]["refused"], "nobody@localhost");
    // A mail server that never answers the data in time, and one that is not there: tried, given up.
    for channel in ["slow-mail", "no-mail"] {
        let delivery = of(channel);
        assert_eq!(delivery["state"], "failed", "{delivery:#}");
        assert_eq!(delivery["attempts"], 2, "{delivery:#}");
        assert!(
            delivery["last_error"]
                .as_str()
                .unwrap_or_default()
                .starts_with("SMTP"),
            "{delivery:#}"
        );
    }
    assert!(slow_mail.received().is_empty());
}
