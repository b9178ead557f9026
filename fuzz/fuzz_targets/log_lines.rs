//! A training log, line by line, through framing, the recognisers, the traceback assembler and the
//! per-log digest the engine stores.
#![no_main]

use chrono::{DateTime, Utc};
use libfuzzer_sys::fuzz_target;
use runguard_engine::telemetry::line::{frame, frame_with_year};
use runguard_engine::telemetry::pipeline::{Digester, blamed_host};
use runguard_engine::telemetry::record::{named_host, recognise};
use runguard_engine::telemetry::traceback::{TracebackAssembler, TracebackLimits};
use runguard_engine::telemetry::{straggler_report, structured};

/// Longest evidence line the digest keeps (see `telemetry::pipeline`).
const MAX_EVIDENCE_CHARS: usize = 2000;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let now = DateTime::<Utc>::from_timestamp(1_790_000_000, 0).unwrap_or_default();
    let mut digester = Digester::new(|line: &str| line.contains("Xid"), now, None, None);
    let limits = TracebackLimits::default();
    let mut assembler = TracebackAssembler::with_limits(limits);
    let mut lines = 0u64;
    for line in text.lines() {
        lines += 1;
        let framed = frame(line);
        // Framing only splits off a prefix (rank label, timestamp) and the line ending.
        assert!(line.contains(framed.message));
        let _ = frame_with_year(line, 1999);
        let _ = recognise(framed.message);
        let _ = structured::parse(framed.message);
        let _ = straggler_report::parse(framed.message);
        let _ = named_host(framed.message);
        let _ = blamed_host(framed.message);
        let _ = assembler.push_framed(&framed);
        while assembler.pop_ready().is_some() {}
        digester.push(line);
    }
    let _ = assembler.settle();
    let _ = assembler.flush();
    assert_eq!(assembler.open_blocks(), 0);
    let digest = digester.finish();
    assert_eq!(digest.lines, lines);
    assert!(
        digest
            .evidence
            .iter()
            .all(|line| line.text.chars().count() <= MAX_EVIDENCE_CHARS)
    );
});
