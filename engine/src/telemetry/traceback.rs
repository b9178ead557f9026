//! Assembly of Python tracebacks from interleaved, rank-labelled log lines.
//!
//! A distributed job that crashes prints one traceback per rank, and `srun -l`
//! or torch's `[rankN]:` labels interleave them line by line. The
//! [`TracebackAssembler`] keeps one open block per rank, from the
//! `Traceback (most recent call last):` header through the frames to the final
//! `ExceptionType: message` line, and hands back each block as one
//! [`TracebackBlock`].
//!
//! After the exception line a block stays open for a little while, because
//! Python may go on:
//! * with more lines of a multi-line message (torch's CUDA and NCCL errors print
//!   their hints on following lines), up to [`TracebackLimits::max_continuation`]
//!   lines, none of which may carry its own log timestamp;
//! * with a chained traceback (`During handling of the above exception, another
//!   exception occurred:` or `The above exception was the direct cause of the
//!   following exception:`), which joins the same block; the block then names the
//!   last exception, the one that propagated, and lists the earlier ones.
//!
//! The block is handed back when its rank prints something else, when
//! [`TracebackLimits::settle_lines`] lines of any rank have passed, on
//! [`TracebackAssembler::settle`] (call it when a read comes up empty), or on
//! [`TracebackAssembler::flush`] at the end of input.
//!
//! Memory is bounded: at most `max_lines` lines a block (the first and last
//! halves are kept, the middle counted), `max_line_bytes` a line, and
//! `max_open` open blocks; opening one more hands back the block idle the
//! longest. A block whose rank prints `max_unrelated` lines that are neither
//! frames nor an exception is handed back as incomplete.
//!
//! Not handled: Python 3.11 exception groups (`+ Exception Group Traceback`),
//! whose nested tracebacks are kept as frame lines of the enclosing block.

use std::collections::{HashMap, VecDeque};

use super::line::FramedLine;

const TRACEBACK_START: &str = "Traceback (most recent call last):";

const CHAIN_SEPARATORS: [&str; 2] = [
    "During handling of the above exception, another exception occurred:",
    "The above exception was the direct cause of the following exception:",
];

/// How often (in lines) open blocks are checked for having settled.
const SETTLE_CHECK_EVERY: u64 = 64;

/// Bounds on what the assembler keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TracebackLimits {
    /// Most lines kept per block; the first and last halves survive.
    pub max_lines: usize,
    /// Longest line kept, in bytes (cut on a character boundary).
    pub max_line_bytes: usize,
    /// Most blocks open at once (one per rank).
    pub max_open: usize,
    /// Lines of the same rank that are neither frames nor an exception after
    /// which an open block is given up as incomplete.
    pub max_unrelated: usize,
    /// Lines after the exception line that may continue its message.
    pub max_continuation: usize,
    /// Lines of any rank after which a block whose exception has been seen is
    /// handed back even though its rank has printed nothing since.
    pub settle_lines: u64,
}

impl Default for TracebackLimits {
    fn default() -> Self {
        Self {
            max_lines: 200,
            max_line_bytes: 2048,
            max_open: 1024,
            max_unrelated: 20,
            max_continuation: 4,
            settle_lines: 500,
        }
    }
}

/// One raised exception: `KeyError: 'x'` is `KeyError` and `'x'`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaisedException {
    /// The exception's (possibly dotted) type name.
    pub exception: String,
    /// The text after `: `, empty for a bare name.
    pub message: String,
}

/// One rank's traceback, chained tracebacks included.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TracebackBlock {
    /// The rank whose lines these are (None for unlabelled lines).
    pub rank: Option<u32>,
    /// Type of the exception that propagated (the last one printed); empty when incomplete.
    pub exception: String,
    /// Its message; empty when incomplete or when it had none.
    pub message: String,
    /// The lines as printed, header to exception (middle lines dropped past the limit).
    pub lines: Vec<String>,
    /// False when the block was given up before its exception line.
    pub complete: bool,
    /// Exceptions earlier in a chain, in the order printed (the first is the root cause).
    pub earlier: Vec<RaisedException>,
    /// Lines dropped from the middle to respect [`TracebackLimits::max_lines`].
    pub omitted_lines: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Between a header and the exception line.
    Frames,
    /// The exception line has been seen; more message lines or a chain may follow.
    AfterException,
    /// A chain separator has been seen; the next traceback header is expected.
    ExpectTraceback,
}

#[derive(Debug)]
struct OpenBlock {
    phase: Phase,
    head: Vec<String>,
    tail: VecDeque<String>,
    omitted_lines: usize,
    exception: Option<RaisedException>,
    earlier: Vec<RaisedException>,
    /// Order in which blocks were opened, to hand them back in that order.
    opened: u64,
    last_seen: u64,
    exception_seen: u64,
    unrelated: usize,
    continuation: usize,
    blank_lines: usize,
}

impl OpenBlock {
    fn new(opened: u64, now: u64) -> Self {
        Self {
            phase: Phase::Frames,
            head: Vec::new(),
            tail: VecDeque::new(),
            omitted_lines: 0,
            exception: None,
            earlier: Vec::new(),
            opened,
            last_seen: now,
            exception_seen: now,
            unrelated: 0,
            continuation: 0,
            blank_lines: 0,
        }
    }

    fn keep(&mut self, line: &str, limits: &TracebackLimits) {
        let line = cut(line, limits.max_line_bytes).to_string();
        let head_room = limits.max_lines.div_ceil(2);
        if self.head.len() < head_room {
            self.head.push(line);
            return;
        }
        self.tail.push_back(line);
        if self.head.len() + self.tail.len() > limits.max_lines.max(1) {
            self.tail.pop_front();
            self.omitted_lines += 1;
        }
    }

    fn finish(mut self, rank: Option<u32>) -> TracebackBlock {
        // A chain announced but never continued still ended with the earlier exception.
        if self.exception.is_none() && self.phase == Phase::ExpectTraceback {
            self.exception = self.earlier.pop();
        }
        let complete = self.exception.is_some() && self.phase != Phase::Frames;
        let (exception, message) = match self.exception {
            Some(raised) if complete => (raised.exception, raised.message),
            _ => (String::new(), String::new()),
        };
        let mut lines = self.head;
        lines.extend(self.tail);
        TracebackBlock {
            rank,
            exception,
            message,
            lines,
            complete,
            earlier: self.earlier,
            omitted_lines: self.omitted_lines,
        }
    }
}

/// Collects each rank's traceback lines into one [`TracebackBlock`].
#[derive(Debug, Default)]
pub struct TracebackAssembler {
    limits: TracebackLimits,
    open: HashMap<Option<u32>, OpenBlock>,
    ready: VecDeque<TracebackBlock>,
    lines_seen: u64,
    blocks_opened: u64,
}

impl TracebackAssembler {
    /// An assembler with the default limits.
    pub fn new() -> Self {
        Self::default()
    }

    /// An assembler with the given limits.
    pub fn with_limits(limits: TracebackLimits) -> Self {
        Self {
            limits,
            ..Self::default()
        }
    }

    /// Feeds one framed line; a line with its own timestamp never continues an
    /// exception message.
    pub fn push_framed(&mut self, line: &FramedLine<'_>) -> Option<TracebackBlock> {
        self.push_line(line.rank, line.message, line.timestamp.is_some())
    }

    /// Feeds one line of `rank` (the framed message, labels removed, indentation
    /// kept). Returns a finished block when one is ready; when several finish on
    /// one line the others come out of later calls, [`Self::pop_ready`] or [`Self::flush`].
    pub fn push(&mut self, rank: Option<u32>, message: &str) -> Option<TracebackBlock> {
        self.push_line(rank, message, false)
    }

    /// A finished block not yet handed back, if any.
    pub fn pop_ready(&mut self) -> Option<TracebackBlock> {
        self.ready.pop_front()
    }

    /// How many blocks are open.
    pub fn open_blocks(&self) -> usize {
        self.open.len()
    }

    /// Hands back every block whose exception line has been seen, without
    /// waiting for a chain or more message lines; blocks still in their frames
    /// stay open. Call it when the input goes quiet.
    pub fn settle(&mut self) -> Vec<TracebackBlock> {
        self.settle_where(|_| true);
        self.ready.drain(..).collect()
    }

    /// Hands back everything: finished blocks, and open ones (incomplete when
    /// their exception line never came), in the order they were opened.
    pub fn flush(&mut self) -> Vec<TracebackBlock> {
        let mut open: Vec<(Option<u32>, OpenBlock)> = self.open.drain().collect();
        open.sort_by_key(|(_, block)| block.opened);
        let mut blocks: Vec<TracebackBlock> = self.ready.drain(..).collect();
        blocks.extend(open.into_iter().map(|(rank, block)| block.finish(rank)));
        blocks
    }

    fn push_line(
        &mut self,
        rank: Option<u32>,
        message: &str,
        timestamped: bool,
    ) -> Option<TracebackBlock> {
        self.lines_seen += 1;
        let now = self.lines_seen;
        let text = message.trim_end();
        let is_start = text.trim_start().starts_with(TRACEBACK_START);
        if self.open.is_empty() && !is_start {
            return self.ready.pop_front();
        }
        if let Some(mut block) = self.open.remove(&rank) {
            block.last_seen = now;
            match self.advance(&mut block, text, is_start, timestamped) {
                Step::Keep => {
                    self.open.insert(rank, block);
                }
                Step::Finish { then_open } => {
                    self.ready.push_back(block.finish(rank));
                    if then_open {
                        self.open_block(rank, text);
                    }
                }
            }
        } else if is_start {
            self.open_block(rank, text);
        }
        if now.is_multiple_of(SETTLE_CHECK_EVERY) {
            let settle_lines = self.limits.settle_lines;
            self.settle_where(|block| now.saturating_sub(block.exception_seen) >= settle_lines);
        }
        self.ready.pop_front()
    }

    /// Moves `block` on by one line of its rank.
    fn advance(
        &self,
        block: &mut OpenBlock,
        text: &str,
        is_start: bool,
        timestamped: bool,
    ) -> Step {
        let limits = &self.limits;
        let trimmed = text.trim_start();
        let indented = text.len() != trimmed.len();
        match block.phase {
            Phase::Frames => {
                if is_start {
                    // A new header before the exception: the old block was cut short.
                    return Step::Finish { then_open: true };
                }
                if trimmed.is_empty() {
                    return Step::Keep;
                }
                if indented && !timestamped {
                    block.keep(text, limits);
                    return Step::Keep;
                }
                if let Some(raised) = raised_exception(trimmed).filter(|_| !timestamped) {
                    block.keep(text, limits);
                    block.exception = Some(raised);
                    block.phase = Phase::AfterException;
                    block.exception_seen = self.lines_seen;
                    block.continuation = 0;
                    block.blank_lines = 0;
                    return Step::Keep;
                }
                block.unrelated += 1;
                if block.unrelated >= limits.max_unrelated {
                    return Step::Finish { then_open: false };
                }
                Step::Keep
            }
            Phase::AfterException => {
                if trimmed.is_empty() {
                    block.blank_lines += 1;
                    return if block.blank_lines > 2 {
                        Step::Finish { then_open: false }
                    } else {
                        Step::Keep
                    };
                }
                if CHAIN_SEPARATORS.iter().any(|s| trimmed.starts_with(s)) {
                    block.keep(text, limits);
                    block.earlier.extend(block.exception.take());
                    block.phase = Phase::ExpectTraceback;
                    return Step::Keep;
                }
                if is_start {
                    return Step::Finish { then_open: true };
                }
                let continues = block.blank_lines == 0
                    && !indented
                    && !timestamped
                    && block.continuation < limits.max_continuation;
                if continues {
                    block.keep(text, limits);
                    block.continuation += 1;
                    return Step::Keep;
                }
                Step::Finish { then_open: false }
            }
            Phase::ExpectTraceback => {
                if trimmed.is_empty() {
                    return Step::Keep;
                }
                if is_start {
                    block.keep(text, limits);
                    block.phase = Phase::Frames;
                    block.unrelated = 0;
                    return Step::Keep;
                }
                block.unrelated += 1;
                if block.unrelated >= limits.max_unrelated {
                    return Step::Finish { then_open: false };
                }
                Step::Keep
            }
        }
    }

    /// Opens a block for `rank` starting with the header `text`, making room first.
    fn open_block(&mut self, rank: Option<u32>, text: &str) {
        if self.open.len() >= self.limits.max_open.max(1) {
            let idlest = self
                .open
                .iter()
                .min_by_key(|(_, block)| block.last_seen)
                .map(|(rank, _)| *rank);
            if let Some(idlest) = idlest
                && let Some(block) = self.open.remove(&idlest)
            {
                self.ready.push_back(block.finish(idlest));
            }
        }
        self.blocks_opened += 1;
        let mut block = OpenBlock::new(self.blocks_opened, self.lines_seen);
        block.keep(text.trim_start(), &self.limits);
        self.open.insert(rank, block);
    }

    /// Moves blocks past their exception line that satisfy `due` to the ready queue.
    fn settle_where(&mut self, due: impl Fn(&OpenBlock) -> bool) {
        let mut settled: Vec<Option<u32>> = self
            .open
            .iter()
            .filter(|(_, block)| block.phase != Phase::Frames && due(block))
            .map(|(rank, _)| *rank)
            .collect();
        settled.sort_by_key(|rank| self.open.get(rank).map(|block| block.opened));
        for rank in settled {
            if let Some(block) = self.open.remove(&rank) {
                self.ready.push_back(block.finish(rank));
            }
        }
    }
}

/// What one line does to an open block.
enum Step {
    Keep,
    /// The block is done; `then_open` when the line starts a new one.
    Finish {
        then_open: bool,
    },
}

/// The final line of a traceback: `Name: message` or a bare `Name`. Inside a
/// traceback any dotted identifier followed by `: ` will do, as long as it
/// starts upper-case, is dotted, or ends like an exception name; a bare name
/// must end like one (`KeyboardInterrupt`, `SystemExit`, `StopIteration`).
fn raised_exception(line: &str) -> Option<RaisedException> {
    const SUFFIXES: [&str; 7] = [
        "Error",
        "Exception",
        "Interrupt",
        "Exit",
        "Warning",
        "Iteration",
        "Failure",
    ];
    let first = line.bytes().next()?;
    if !(first.is_ascii_alphabetic() || first == b'_') {
        return None;
    }
    let name_len = line
        .bytes()
        .take_while(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        .count();
    let name = line.get(..name_len)?;
    let rest = line.get(name_len..)?;
    let exception_like = SUFFIXES
        .iter()
        .any(|suffix| name.len() > suffix.len() && name.ends_with(suffix));
    let message = if rest.is_empty() {
        if !exception_like {
            return None;
        }
        ""
    } else {
        let text = rest.strip_prefix(':')?;
        if !(text.is_empty() || text.starts_with(' ')) {
            return None;
        }
        let named_like_type = first.is_ascii_uppercase() || name.contains('.') || exception_like;
        if !named_like_type || name.ends_with('.') {
            return None;
        }
        text.trim()
    };
    Some(RaisedException {
        exception: name.to_string(),
        message: message.to_string(),
    })
}

/// Cuts `text` to at most `max` bytes on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::super::line::frame_with_year;
    use super::*;

    /// Feeds a log through framing and the assembler; returns the blocks in the
    /// order they came out, with the line number (1-based) that released each
    /// (0 for those released by the final flush).
    fn assemble(log: &str, limits: TracebackLimits) -> Vec<(usize, TracebackBlock)> {
        let mut assembler = TracebackAssembler::with_limits(limits);
        let mut blocks = Vec::new();
        for (index, line) in log.lines().enumerate() {
            let framed = frame_with_year(line, 2026);
            if let Some(block) = assembler.push_framed(&framed) {
                blocks.push((index + 1, block));
            }
            while let Some(block) = assembler.pop_ready() {
                blocks.push((index + 1, block));
            }
        }
        blocks.extend(assembler.flush().into_iter().map(|block| (0, block)));
        blocks
    }

    fn raised(exception: &str, message: &str) -> RaisedException {
        RaisedException {
            exception: exception.to_string(),
            message: message.to_string(),
        }
    }

    #[test]
    fn assembles_the_rank_zero_traceback_of_the_nccl_crash_with_its_continuation_line() {
        let blocks = assemble(
            include_str!("../../../tests/fixtures/logs/nccl_timeout_crash.log"),
            TracebackLimits::default(),
        );
        assert_eq!(blocks.len(), 1);
        let (released_at, block) = &blocks[0];
        assert_eq!(*released_at, 0);
        assert_eq!(block.rank, Some(0));
        assert!(block.complete);
        assert_eq!(block.exception, "torch.distributed.DistBackendError");
        assert!(block.message.starts_with("NCCL error in: /opt/pytorch"));
        assert_eq!(block.lines.len(), 7);
        assert_eq!(block.lines[0], "Traceback (most recent call last):");
        assert_eq!(
            block.lines[1],
            "  File \"/workspace/Megatron-LM/pretrain_gpt.py\", line 245, in <module>"
        );
        assert!(block.lines[6].starts_with("ncclRemoteError: A call failed"));
    }

    #[test]
    fn separates_interleaved_ranks_and_joins_chained_tracebacks() {
        let limits = TracebackLimits {
            max_unrelated: 3,
            ..TracebackLimits::default()
        };
        let blocks = assemble(
            include_str!("../../../tests/fixtures/logs/traceback_interleaved.log"),
            limits,
        );
        let summary: Vec<(usize, Option<u32>, bool, &str, usize)> = blocks
            .iter()
            .map(|(at, b)| (*at, b.rank, b.complete, b.exception.as_str(), b.lines.len()))
            .collect();
        assert_eq!(
            summary,
            vec![
                // Rank 5 gives up after three unrelated lines.
                (34, Some(5), false, "", 2),
                // Rank 1 ends when it logs a timestamped line.
                (47, Some(1), true, "RuntimeError", 8),
                // The rest are still waiting for a possible chain at the end of input.
                (0, Some(2), true, "torch.OutOfMemoryError", 6),
                (0, Some(3), true, "checkpoint.CorruptCheckpoint", 11),
                (0, Some(7), true, "RuntimeError", 9),
            ]
        );
        let rank1 = &blocks[1].1;
        assert!(
            rank1
                .message
                .starts_with("DataLoader worker (pid 46794) is killed by signal: Bus error.")
        );
        assert!(rank1.earlier.is_empty());
        let rank3 = &blocks[3].1;
        assert_eq!(rank3.message, "/ckpt/llama/iter_0000240 cannot be read");
        assert_eq!(
            rank3.earlier,
            vec![raised(
                "RuntimeError",
                "PytorchStreamReader failed reading zip archive: failed finding central directory"
            )]
        );
        assert!(rank3.lines.contains(
            &"The above exception was the direct cause of the following exception:".to_string()
        ));
        let rank7 = &blocks[4].1;
        assert_eq!(rank7.message, "boom");
        assert_eq!(rank7.earlier, vec![raised("KeyError", "'x'")]);
        assert_eq!(
            rank7.lines.last().map(String::as_str),
            Some("RuntimeError: boom")
        );
    }

    #[test]
    fn keeps_cuda_hint_lines_with_the_exception_from_the_corpus_excerpts() {
        let blocks = assemble(
            include_str!("../../../tests/fixtures/logs/traceback_cuda_corpus.log"),
            TracebackLimits::default(),
        );
        assert_eq!(blocks.len(), 1, "{blocks:?}");
        let (released_at, block) = &blocks[0];
        assert_eq!(*released_at, 11);
        assert_eq!(block.exception, "RuntimeError");
        assert_eq!(
            block.message,
            "CUDA error: uncorrectable ECC error encountered"
        );
        assert_eq!(
            block.lines.last().map(String::as_str),
            Some("Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.")
        );
        assert_eq!(block.lines.len(), 9);
    }

    #[test]
    fn an_exception_line_without_a_header_is_no_block() {
        let mut assembler = TracebackAssembler::new();
        for line in include_str!("../../../tests/fixtures/logs/node_faults.log").lines() {
            assert_eq!(assembler.push_framed(&frame_with_year(line, 2026)), None);
        }
        assert!(assembler.flush().is_empty());
    }

    #[test]
    fn a_new_header_before_the_exception_hands_back_the_cut_block() {
        let mut assembler = TracebackAssembler::new();
        assert_eq!(assembler.push(Some(1), TRACEBACK_START), None);
        assert_eq!(
            assembler.push(Some(1), "  File \"a.py\", line 1, in f"),
            None
        );
        let cut_short = assembler.push(Some(1), TRACEBACK_START).unwrap();
        assert!(!cut_short.complete);
        assert_eq!(cut_short.lines.len(), 2);
        assert_eq!(assembler.push(Some(1), "ValueError: x"), None);
        let blocks = assembler.flush();
        assert_eq!(blocks.len(), 1);
        assert_eq!(blocks[0].exception, "ValueError");
        assert_eq!(blocks[0].lines, vec![TRACEBACK_START, "ValueError: x"]);
    }

    #[test]
    fn a_long_traceback_keeps_its_first_and_last_lines_within_the_limit() {
        let limits = TracebackLimits {
            max_lines: 10,
            max_line_bytes: 40,
            ..TracebackLimits::default()
        };
        let mut assembler = TracebackAssembler::with_limits(limits);
        assembler.push(None, TRACEBACK_START);
        for depth in 0..1000 {
            assembler.push(
                None,
                &format!(
                    "  File \"r.py\", line {depth}, in recurse{}",
                    "x".repeat(100)
                ),
            );
        }
        assembler.push(None, "RecursionError: maximum recursion depth exceeded");
        let block = assembler.flush().pop().unwrap();
        assert!(block.complete);
        assert_eq!(block.lines.len(), 10);
        assert_eq!(block.omitted_lines, 992);
        assert_eq!(block.lines[0], TRACEBACK_START);
        assert!(block.lines[1].starts_with("  File \"r.py\", line 0, in recurse"));
        assert_eq!(block.lines[1].len(), 40);
        assert!(block.lines[8].starts_with("  File \"r.py\", line 999, in recurse"));
        assert_eq!(block.lines[9], "RecursionError: maximum recursion depth ");
        assert!(block.lines.iter().all(|line| line.len() <= 40));
    }

    #[test]
    fn opening_more_blocks_than_allowed_hands_back_the_idlest() {
        let limits = TracebackLimits {
            max_open: 3,
            ..TracebackLimits::default()
        };
        let mut assembler = TracebackAssembler::with_limits(limits);
        for rank in 0..3 {
            assert_eq!(assembler.push(Some(rank), TRACEBACK_START), None);
        }
        // Rank 0 is busy again, so rank 1 is now the idlest.
        assembler.push(Some(0), "  File \"a.py\", line 1, in f");
        let evicted = assembler.push(Some(3), TRACEBACK_START).unwrap();
        assert_eq!(evicted.rank, Some(1));
        assert!(!evicted.complete);
        assert_eq!(assembler.open_blocks(), 3);
    }

    #[test]
    fn settle_hands_back_blocks_past_their_exception_and_keeps_the_rest_open() {
        let mut assembler = TracebackAssembler::new();
        assembler.push(Some(0), TRACEBACK_START);
        assembler.push(Some(0), "KeyError: 'x'");
        assembler.push(Some(1), TRACEBACK_START);
        assembler.push(Some(1), "  File \"a.py\", line 1, in f");
        let settled = assembler.settle();
        assert_eq!(settled.len(), 1);
        assert_eq!(settled[0].rank, Some(0));
        assert_eq!(assembler.open_blocks(), 1);
    }

    #[test]
    fn a_silent_rank_settles_after_enough_lines_of_others() {
        let limits = TracebackLimits {
            settle_lines: 100,
            ..TracebackLimits::default()
        };
        let mut assembler = TracebackAssembler::with_limits(limits);
        assembler.push(Some(4), TRACEBACK_START);
        assembler.push(Some(4), "OSError: [Errno 5] Input/output error");
        let released = (0..300)
            .position(|i| assembler.push(Some(0), &format!("iteration {i}")).is_some())
            .unwrap();
        assert!(
            (100..=100 + SETTLE_CHECK_EVERY as usize).contains(&released),
            "{released}"
        );
    }

    #[test]
    fn recognises_exception_lines_only_in_their_python_shapes() {
        for (line, expected) in [
            ("KeyError: 'x'", Some(("KeyError", "'x'"))),
            ("KeyboardInterrupt", Some(("KeyboardInterrupt", ""))),
            ("StopIteration", Some(("StopIteration", ""))),
            (
                "ncclRemoteError: A call failed",
                Some(("ncclRemoteError", "A call failed")),
            ),
            (
                "mod.sub.Custom: went wrong",
                Some(("mod.sub.Custom", "went wrong")),
            ),
            ("CheckpointCorrupt: bad", Some(("CheckpointCorrupt", "bad"))),
            ("ChildFailedError: ", Some(("ChildFailedError", ""))),
            ("srun: error: node-07: task 1", None),
            ("Done", None),
            ("Epoch 3: 50%", None),
            ("ERROR:root:boom", None),
            ("mod.: x", None),
            ("", None),
            ("3Error: x", None),
        ] {
            let got = raised_exception(line);
            assert_eq!(got, expected.map(|(e, m)| raised(e, m)), "{line}");
        }
    }

    #[test]
    fn never_panics_and_stays_bounded_on_garbage() {
        let limits = TracebackLimits {
            max_open: 8,
            max_lines: 16,
            ..TracebackLimits::default()
        };
        let mut assembler = TracebackAssembler::with_limits(limits);
        let pieces = [
            TRACEBACK_START,
            "  File \"x\"",
            "KeyError: x",
            "",
            CHAIN_SEPARATORS[0],
            CHAIN_SEPARATORS[1],
            "noise",
            "é",
            "\u{0}",
            "   ",
        ];
        let mut state = 0x2545_f491_4f6c_dd1du64;
        for _ in 0..20_000 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let rank = (state % 13) as u32;
            let piece = pieces[(state >> 8) as usize % pieces.len()];
            let _ = assembler.push((rank != 12).then_some(rank), piece);
            assert!(assembler.open_blocks() <= 8);
        }
        for block in assembler.flush() {
            assert!(block.lines.len() <= 16);
        }
    }
}
