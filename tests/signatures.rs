//! Every signature of the built-in catalog against its own fixture: the fixture must be attributed to
//! that signature (not merely to its category), so each pattern is known to work on a real-shaped log.

use std::path::PathBuf;

use runguard_engine::attribute::Catalog;
use runguard_engine::config::Config;
use runguard_engine::explain::{ExplainInput, explain};

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/signatures")
}

#[test]
fn every_signature_wins_on_its_own_fixture() {
    let catalog = Catalog::builtin().unwrap();
    let config = Config::default();
    let mut failures = Vec::new();
    for signature in catalog.signatures() {
        let id = &signature.spec.id;
        let log = fixture_dir().join(format!("{id}.log"));
        let kernel = fixture_dir().join(format!("{id}.kern.log"));
        if !log.exists() && !kernel.exists() {
            failures.push(format!("{id}: no fixture {}", log.display()));
            continue;
        }
        let input = ExplainInput {
            logs: if log.exists() { vec![log] } else { vec![] },
            kernel_logs: if kernel.exists() {
                vec![kernel]
            } else {
                vec![]
            },
            nodes: Vec::new(),
            ranks_per_node: 8,
            stalled: false,
        };
        match explain(&catalog, &config, &input) {
            Ok(explanation) => {
                let got = &explanation.attribution;
                if got.signature.as_deref() != Some(id.as_str()) {
                    failures.push(format!(
                        "{id}: attributed to {:?} ({})",
                        got.signature, got.category
                    ));
                } else if got.category != signature.spec.category {
                    failures.push(format!("{id}: category {}", got.category));
                }
            }
            Err(err) => failures.push(format!("{id}: {err}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// One wording of `wordings.toml`.
#[derive(serde::Deserialize)]
struct Wording {
    signature: String,
    line: String,
    source: String,
}

/// A line that looks like a failure and is none, as the software prints it.
#[derive(serde::Deserialize)]
struct Harmless {
    line: String,
    source: String,
}

#[derive(serde::Deserialize)]
struct Wordings {
    wording: Vec<Wording>,
    #[serde(default)]
    harmless: Vec<Harmless>,
}

#[test]
fn every_wording_a_family_claims_is_attributed_to_it_alone_and_no_look_alike_is() {
    let catalog = Catalog::builtin().unwrap();
    let config = Config::default();
    let text = std::fs::read_to_string(fixture_dir().join("wordings.toml")).unwrap();
    let wordings: Wordings = toml::from_str(&text).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("line.log");
    let mut failures = Vec::new();
    for wording in &wordings.wording {
        assert!(
            catalog
                .signatures()
                .iter()
                .any(|s| s.spec.id == wording.signature),
            "{}: no such signature",
            wording.signature
        );
        assert!(!wording.source.is_empty(), "{}: no source", wording.line);
        let got = signature_of_line(&catalog, &config, &log, &wording.line);
        if got.as_deref() != Some(wording.signature.as_str()) {
            failures.push(format!(
                "{}: attributed to {got:?}: {}",
                wording.signature, wording.line
            ));
        }
    }
    for harmless in &wordings.harmless {
        assert!(!harmless.source.is_empty(), "{}: no source", harmless.line);
        let got = signature_of_line(&catalog, &config, &log, &harmless.line);
        if got.is_some() {
            failures.push(format!(
                "harmless line attributed to {got:?}: {}",
                harmless.line
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The signature `explain` attributes a log of one line to, written at `log`.
fn signature_of_line(
    catalog: &Catalog,
    config: &Config,
    log: &std::path::Path,
    line: &str,
) -> Option<String> {
    std::fs::write(log, format!("{line}\n")).unwrap();
    let input = ExplainInput {
        logs: vec![log.to_path_buf()],
        ranks_per_node: 8,
        ..ExplainInput::default()
    };
    explain(catalog, config, &input)
        .unwrap()
        .attribution
        .signature
}

#[test]
fn healthy_logs_match_no_signature() {
    let catalog = Catalog::builtin().unwrap();
    let config = Config::default();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/logs");
    for healthy in [
        "healthy_noise.log",
        "megatron_pretrain.log",
        "lightning_fit.log",
        "nemo_train.log",
    ] {
        let input = ExplainInput {
            logs: vec![dir.join(healthy)],
            ranks_per_node: 8,
            ..ExplainInput::default()
        };
        let explanation = explain(&catalog, &config, &input).unwrap();
        assert_eq!(
            explanation.attribution.category, "healthy",
            "{healthy}: {:?}",
            explanation.attribution
        );
    }
}

#[test]
fn every_locator_locates_the_node_of_each_of_its_examples() {
    let catalog = Catalog::builtin().unwrap();
    assert!(!catalog.locators().is_empty());
    for locator in catalog.locators() {
        assert!(!locator.examples.is_empty(), "{}: no example", locator.id);
        for example in &locator.examples {
            assert_eq!(
                locator.locate(&example.line),
                Some((example.node.as_str(), example.rank)),
                "{}: {:?}",
                locator.id,
                example.line
            );
            // A located line is evidence, but no failure by itself unless it is an origin's.
            assert!(catalog.is_notable(&example.line));
            assert!(
                locator.origin || catalog.matching(&example.line).is_empty(),
                "{}",
                example.line
            );
        }
        for line in &locator.not_located {
            assert_eq!(locator.locate(line), None, "{}: {line:?}", locator.id);
            // The line is the locator's kind: its pattern alone would have located it.
            assert!(locator.is_its_kind(line), "{}: {line:?}", locator.id);
        }
    }
}
