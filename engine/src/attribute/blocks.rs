//! Evidence lines framed into blocks: one Python traceback (chained ones included), or one error block
//! (successive lines of one rank, source and host close in time). A signature's context counts only
//! inside the block of one of its own lines, so a DataLoader frame of one rank's traceback does not make
//! another rank's OOM the DataLoader's.

use std::collections::HashMap;

use chrono::Duration;

use crate::model::EvidenceLine;
use crate::telemetry::record::named_host;
use crate::telemetry::traceback::{CHAIN_SEPARATORS, TORCHSCRIPT_START, TRACEBACK_START};

/// Lines further apart in time than this start a new block.
const BLOCK_WINDOW_SECONDS: i64 = 5;
/// Lines after a traceback's exception line that may still continue its message.
const AFTER_EXCEPTION: usize = 4;
/// Most lines of one error block: evidence keeps only notable lines, so a long run of them from one
/// rank with no timestamps is several messages, not one.
const MAX_ERROR_BLOCK: usize = 24;

/// Where a line comes from, beside its rank: a kernel log, the scheduler, or the application.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Source {
    Kernel,
    Scheduler,
    Application,
}

fn source(text: &str) -> Source {
    let text = text.trim_start();
    if text.contains(" kernel:") || text.contains("NVRM:") || text.starts_with("kernel:") {
        Source::Kernel
    } else if [
        "scheduler:",
        "kubernetes:",
        "slurmstepd:",
        "srun:",
        "slurmd",
        "slurmctld",
    ]
    .iter()
    .any(|prefix| text.starts_with(prefix))
    {
        Source::Scheduler
    } else {
        Source::Application
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Inside a traceback, before its exception line.
    Frames,
    /// After a chain separator: the next traceback header joins the block.
    Chained,
    /// After the exception line: continuation lines, `n` so far.
    AfterException(usize),
    /// An error block of `n` lines.
    Error(usize),
}

struct Open {
    block: usize,
    kind: Kind,
    last: chrono::DateTime<chrono::Utc>,
}

fn is_header(text: &str) -> bool {
    text.contains(TRACEBACK_START) || text.trim_start().starts_with(TORCHSCRIPT_START)
}

/// `Original Traceback (most recent call last):` is printed inside an exception's message (a DataLoader
/// worker's re-raise): part of the same traceback.
/// TorchScript's traceback is printed inside the message of the exception too.
fn is_inner_header(text: &str) -> bool {
    text.trim_start().starts_with(TORCHSCRIPT_START)
        || text
            .split_once(TRACEBACK_START)
            .is_some_and(|(before, _)| before.trim_end().ends_with("Original"))
}

fn is_chain_separator(text: &str) -> bool {
    CHAIN_SEPARATORS
        .iter()
        .any(|separator| text.contains(separator))
}

/// Whether a line reads as a traceback's frame: `File "..."`, or indented (the code under a frame, a
/// caret line).
pub(crate) fn is_frame(text: &str) -> bool {
    let trimmed = text.trim_start();
    trimmed.starts_with("File \"") || text.starts_with(' ') || text.starts_with('\t')
}

/// The block of each line, as numbers that are equal for lines of one block.
pub fn frame(lines: &[EvidenceLine]) -> Vec<usize> {
    let mut open: HashMap<(Option<u32>, Source, Option<&str>), Open> = HashMap::new();
    let mut next = 0usize;
    let mut blocks = Vec::with_capacity(lines.len());
    for line in lines {
        let text = line.text.as_str();
        let key = (line.rank, source(text), named_host(text));
        let window = Duration::seconds(BLOCK_WINDOW_SECONDS);
        let current = open
            .get(&key)
            .filter(|o| (line.time - o.last).abs() <= window);
        let joins = match current.map(|o| o.kind) {
            None => false,
            Some(_) if is_inner_header(text) => true,
            Some(Kind::Chained) => true,
            Some(_) if is_header(text) => false,
            Some(Kind::Frames) => true,
            Some(Kind::AfterException(n)) => n < AFTER_EXCEPTION || is_chain_separator(text),
            Some(Kind::Error(n)) => n < MAX_ERROR_BLOCK,
        };
        let kind_before = current.map(|o| o.kind);
        let block = match (joins, current) {
            (true, Some(o)) => o.block,
            _ => {
                next += 1;
                next
            }
        };
        let kind = if is_chain_separator(text) {
            Kind::Chained
        } else if is_header(text) {
            Kind::Frames
        } else {
            match (joins, kind_before) {
                (true, Some(Kind::Frames | Kind::Chained)) if is_frame(text) => Kind::Frames,
                (true, Some(Kind::Frames | Kind::Chained)) => Kind::AfterException(0),
                (true, Some(Kind::AfterException(n))) => Kind::AfterException(n + 1),
                (true, Some(Kind::Error(n))) => Kind::Error(n + 1),
                _ => Kind::Error(1),
            }
        };
        open.insert(
            key,
            Open {
                block,
                kind,
                last: line.time,
            },
        );
        blocks.push(block);
    }
    blocks
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{DateTime, Utc};

    fn at(seconds: i64, rank: Option<u32>, text: &str) -> EvidenceLine {
        let start = DateTime::parse_from_rfc3339("2026-01-05T09:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        EvidenceLine {
            time: start + Duration::seconds(seconds),
            rank,
            text: text.to_string(),
        }
    }

    #[test]
    fn interleaved_tracebacks_of_two_ranks_are_two_blocks() {
        let lines = [
            at(0, Some(0), "Traceback (most recent call last):"),
            at(0, Some(1), "Traceback (most recent call last):"),
            at(
                0,
                Some(0),
                "  File \"/w/torch/utils/data/_utils/worker.py\", line 308, in _worker_loop",
            ),
            at(0, Some(1), "  File \"train.py\", line 80, in <module>"),
            at(0, Some(0), "RuntimeError: boom"),
            at(0, Some(1), "torch.OutOfMemoryError: CUDA out of memory."),
        ];
        let blocks = frame(&lines);
        assert_eq!(blocks[0], blocks[2]);
        assert_eq!(blocks[0], blocks[4]);
        assert_eq!(blocks[1], blocks[3]);
        assert_eq!(blocks[1], blocks[5]);
        assert_ne!(blocks[0], blocks[1]);
    }

    #[test]
    fn a_chained_traceback_and_a_dataloader_re_raise_stay_one_block() {
        let lines = [
            at(0, None, "Traceback (most recent call last):"),
            at(0, None, "  File \"train.py\", line 1, in <module>"),
            at(0, None, "KeyError: 'x'"),
            at(
                0,
                None,
                "During handling of the above exception, another exception occurred:",
            ),
            at(0, None, "Traceback (most recent call last):"),
            at(
                0,
                None,
                "torch.OutOfMemoryError: Caught OutOfMemoryError in DataLoader worker process 0.",
            ),
            at(0, None, "Original Traceback (most recent call last):"),
            at(0, None, "torch.OutOfMemoryError: CUDA out of memory."),
        ];
        let blocks = frame(&lines);
        assert!(blocks.iter().all(|b| *b == blocks[0]), "{blocks:?}");
    }

    #[test]
    fn a_new_traceback_a_time_gap_or_another_source_starts_another_block() {
        let lines = [
            at(0, None, "Traceback (most recent call last):"),
            at(0, None, "ValueError: first"),
            at(1, None, "Traceback (most recent call last):"),
            at(1, None, "ValueError: second"),
            at(60, None, "ValueError: much later"),
            at(
                60,
                None,
                "[Fri Aug  9 13:32:56 2024] NVRM: Xid (PCI:0000:00:08): 94, pid=1",
            ),
        ];
        let blocks = frame(&lines);
        assert_eq!(blocks[0], blocks[1]);
        assert_eq!(blocks[2], blocks[3]);
        assert_ne!(blocks[1], blocks[2]);
        assert_ne!(blocks[3], blocks[4]);
        assert_ne!(blocks[4], blocks[5]);
    }
}
