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

use crate::text::clip;
use std::collections::{HashMap, VecDeque};

use super::line::FramedLine;

/// The header of a Python traceback.
pub(crate) const TRACEBACK_START: &str = "Traceback (most recent call last):";
/// TorchScript's own traceback, printed inside the message of the exception a scripted function raised
/// (`Traceback of TorchScript (most recent call last):`, `Traceback of TorchScript, original code ...`).
pub(crate) const TORCHSCRIPT_START: &str = "Traceback of TorchScript";

/// Whether `text` opens a traceback, Python's or TorchScript's.
pub(crate) fn starts_traceback(text: &str) -> bool {
    let text = text.trim_start();
    text.starts_with(TRACEBACK_START) || text.starts_with(TORCHSCRIPT_START)
}

/// The lines that chain one traceback to the next within one block.
pub(crate) const CHAIN_SEPARATORS: [&str; 2] = [
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
        let line = clip(line, limits.max_line_bytes).to_string();
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
        let is_start = starts_traceback(text);
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

#[cfg(test)]
mod tests;
