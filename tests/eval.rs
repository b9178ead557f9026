//! `runguard eval` over the labelled public corpus (a copy of it lives in tests/fixtures/corpus).

use crate::support::CliSandbox;

#[test]
fn eval_scores_the_public_corpus_and_ends_with_the_tally() {
    let manifest = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/corpus/cases.toml"
    );
    let output = CliSandbox::default().run(&["eval", manifest]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8_lossy(&output.stdout);
    let last = text.lines().last().unwrap_or_default();
    let (passed, failed) = last
        .split_once(" passed, ")
        .and_then(|(p, rest)| {
            Some((
                p.parse::<usize>().ok()?,
                rest.strip_suffix(" failed")?.parse::<usize>().ok()?,
            ))
        })
        .unwrap_or_else(|| panic!("no tally line: {text}"));
    assert_eq!(passed + failed, 12, "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.starts_with("PASS ") || l.starts_with("FAIL "))
            .count(),
        12
    );
    assert!(text.contains("accuracy: category"), "{text}");
    // The score only goes up: raise this floor when signatures improve.
    assert!(passed >= 12, "{text}");
}

#[test]
fn explain_reports_the_attribution_and_what_runguard_would_do() {
    let log = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/logs/nccl_timeout_crash.log"
    );
    let sandbox = CliSandbox::default();
    let output = sandbox.run(&["explain", log, "--json"]);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["failed"], true);
    assert_eq!(json["attribution"]["category"], "nccl_timeout");
    let recovery = json["recovery"].as_array().unwrap();
    assert!(
        recovery
            .iter()
            .any(|step| step.as_str().unwrap().contains("requeue")),
        "{recovery:?}"
    );

    let text = sandbox.run(&["explain", log]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("attribution: nccl_timeout"), "{text}");
    assert!(text.contains("runguard would:"), "{text}");
}

#[test]
fn explain_of_a_missing_file_is_a_clear_error() {
    let output = CliSandbox::default().run(&["explain", "/nonexistent/train.log"]);
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("does not exist"));
}
