//! A fuzzed attempt log through the whole built-in catalog: the whole-read prefilter, the digest's
//! evidence and the attribution of the failure.
#![no_main]

use std::sync::OnceLock;

use chrono::{DateTime, Utc};
use libfuzzer_sys::fuzz_target;
use runguard_engine::attribute::scan::Mark;
use runguard_engine::attribute::{Catalog, Evidence, attribute};
use runguard_engine::model::AnomalyKind;
use runguard_engine::telemetry::line::frame;
use runguard_engine::telemetry::pipeline::Digester;
use runguard_engine::telemetry::record::{recognise, recognise_hinted};
use runguard_engine::telemetry::tail::Chunk;

fn catalog() -> &'static Catalog {
    static CATALOG: OnceLock<Catalog> = OnceLock::new();
    CATALOG.get_or_init(|| {
        Catalog::builtin().unwrap_or_else(|err| panic!("the built-in catalog loads: {err}"))
    })
}

/// The read as the tail hands it over: one text and the spans of its lines.
fn chunk_of(text: &str) -> Chunk {
    let mut spans = Vec::new();
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let body = line.strip_suffix('\n').unwrap_or(line);
        let body = body.strip_suffix('\r').unwrap_or(body);
        spans.push((start, start + body.len()));
        start += line.len();
    }
    Chunk {
        text: text.to_string(),
        spans,
        next_offset: text.len() as u64,
        ..Chunk::default()
    }
}

fuzz_target!(|data: &[u8]| {
    let catalog = catalog();
    let text = String::from_utf8_lossy(data);
    let chunk = chunk_of(&text);
    let marks = catalog.line_marks(&chunk);
    assert_eq!(marks.len(), chunk.line_count());
    // The scan may mark too much, never too little: a line it does not make a candidate matches no
    // signature and holds none of the recognisers' markers (the digest then skips their search), and a
    // quiet line is nothing to the recognisers at all (the digest does not even frame it).
    for (line, mark) in chunk.lines().zip(&marks) {
        // Judged on the framed message, as the digest judges it.
        let message = frame(line).message;
        if *mark != Mark::Candidate {
            assert!(!catalog.is_notable(message), "scan missed {line:?}");
            assert_eq!(
                recognise_hinted(message, false),
                recognise(message),
                "scan missed a marker in {line:?}"
            );
        }
        if *mark == Mark::Quiet {
            assert_eq!(recognise(message), None, "scan left {line:?} quiet");
        }
    }
    let now = DateTime::<Utc>::from_timestamp(1_790_000_000, 0).unwrap_or_default();
    let mut digester = Digester::new(|line: &str| catalog.is_notable(line), now, None, None);
    digester.push_chunk(&chunk, &marks);
    let digest = digester.finish();
    let nodes = ["gpu-node-1".to_string(), "gpu-node-2".to_string()];
    for anomaly in [AnomalyKind::Crash, AnomalyKind::Hang] {
        let evidence = Evidence {
            workflow_id: 1,
            attempt_index: 0,
            anomaly,
            lines: &digest.evidence,
            nodes: &nodes,
            ranks_per_node: 8,
            exit_code: Some(1),
            now,
        };
        let attribution = attribute(catalog, &evidence);
        assert!((0.0..=1.0).contains(&attribution.confidence));
    }
});
