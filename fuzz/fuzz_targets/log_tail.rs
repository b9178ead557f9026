//! A growing log file read in small bounded reads: bytes into lines with a length cap and lossy UTF-8.
#![no_main]

use std::io::Write;
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use runguard_engine::telemetry::tail::{TailLimits, read_new_lines};

/// One scratch file per fuzzing process, rewritten for every input.
fn scratch() -> &'static tempfile::TempDir {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().unwrap_or_else(|err| panic!("scratch dir: {err}")))
}

fuzz_target!(|data: &[u8]| {
    // The first two bytes choose the limits; the rest is the file.
    let [line_cap, read_cap, bytes @ ..] = data else {
        return;
    };
    // As the config allows them: a read budget of at least one line.
    let max_line_bytes = usize::from(*line_cap % 64) + 1;
    let limits = TailLimits {
        max_line_bytes,
        max_read_bytes: max_line_bytes as u64 + u64::from(*read_cap % 128),
    };
    let path = scratch().path().join("attempt.log");
    let written = std::fs::File::create(&path).and_then(|mut file| file.write_all(bytes));
    if written.is_err() {
        return;
    }
    let len = bytes.len() as u64;
    let mut offset = 0u64;
    let mut identity: Option<String> = None;
    let mut reads = 0usize;
    loop {
        let Ok(chunk) = read_new_lines(&path, offset, identity.as_deref(), limits) else {
            return;
        };
        assert!(
            !chunk.restarted && !chunk.rotated,
            "the file neither shrank nor changed"
        );
        // Offsets never go backwards and never pass the end of the file.
        assert!(chunk.next_offset >= offset && chunk.next_offset <= len);
        assert!(chunk.next_offset - offset <= limits.max_read_bytes);
        assert!(chunk.spans.iter().all(|&(start, end)| {
            start <= end && end <= chunk.text.len() && chunk.text.is_char_boundary(start)
        }));
        assert_eq!(chunk.lines().count(), chunk.line_count());
        if chunk.next_offset == offset {
            // Only a partial last line, shorter than the cap, may be left for later.
            let rest = &bytes[offset as usize..];
            assert!(!rest.contains(&b'\n') && rest.len() <= limits.max_line_bytes);
            break;
        }
        offset = chunk.next_offset;
        identity = chunk.identity;
        reads += 1;
        assert!(
            reads <= bytes.len() + 1,
            "every read consumes at least one byte"
        );
    }
});
