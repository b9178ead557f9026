//! The whole-read scan: which lines of a read may match a signature or hold a recogniser's marker
//! (candidates), which may hold only what the recognisers read without markers (plain lines), and
//! which hold none of it (quiet lines, which the digest only counts).
//!
//! Most lines of a training log are progress lines of a few shapes that differ only in their numbers.
//! A line's shape is the line with every ASCII digit read as `0`. Where a literal occurs in a line, the
//! literal with its digits read as `0` occurs in the line's shape at the same place; where a pattern
//! matches a line, the pattern with `0` added to each of its classes that holds a digit matches the
//! shape (a digit becomes `0`, which such a class now admits; other bytes stay, and `0` is a word
//! character as every digit is, so word boundaries stay too). So a shape that holds none of the
//! literals so read and matches none of the patterns so widened proves that no line of that shape
//! holds a literal or matches a pattern. The searches then run once per shape instead of once per
//! line, and a line whose shape is known costs one pass to compute its shape and one hash lookup. The
//! verdict marks more lines than the literals themselves would (a shape can hold `Xid 00` where the
//! line held `Xid 13`), never fewer, and every marked line is confirmed on its own text afterwards.
//!
//! Lines that each carry their own hex id (a trace id, a hash) all differ in their shapes. Once a read
//! has shown many shapes, a line whose shape is new is also read coarser, every hex digit (`0`-`9`,
//! `a`-`f`, `A`-`F`) as `0`, and searched for the literals and patterns read the same way (a class
//! holding any hex digit admits `0`). The argument is the same: every replaced byte and `0` are word
//! characters, and a class admits the replacement of each byte it admits. The coarse shape is a
//! function of the fine one, so its verdict holds for every line of the fine shape too.

use std::sync::{Arc, OnceLock};

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, BuildError};
use regex::Regex;
use regex_syntax::hir::{Class, ClassBytesRange, ClassUnicodeRange, Hir, HirKind};

use crate::telemetry::tail::Chunk;

mod shapes;

pub use shapes::ShapeMemory;
use shapes::{MAX_SHAPE_BYTES, MAX_SHAPES, Reading, ShapeBuffer, ShapeTable, shape_of};

/// Distinct shapes remembered past which new shapes are read coarser too (see the module's doc):
/// fewer, and the log's lines repeat their shapes; the coarse search is then built once.
const COARSE_AFTER: usize = 64;
/// The lazy DFA cache of the scan's pattern (the regex crate's default is 2 MiB).
const DFA_CACHE_BYTES: usize = 32 << 20;
/// What the scan says of a line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Holds no literal and matches no pattern of either tier: proven to hold none.
    Quiet,
    /// May hold a literal or match a pattern of the plain tier only (see [`LineScan::tiered`]).
    Plain,
    /// May hold a literal or match a pattern of the first tier.
    Candidate,
}

/// The literals every signature's match must contain and the recognisers' markers, found per line
/// through its shape; plus, as one regex, the patterns that have no such literal. A second, plain tier
/// of literals and a pattern marks the lines that need less reading than a candidate (what the
/// recognisers read without their markers).
#[derive(Debug, Clone)]
pub struct LineScan {
    /// Both tiers, their digits read as `0`.
    fine: Searches,
    /// The tiers' literals and patterns as given, for the coarse searches.
    given: [(Vec<String>, String); 2],
    /// Both tiers with hex digits read as `0`, built when a log first needs them (None when they
    /// cannot be built: the fine shapes alone are then used, as sound).
    coarse: Arc<OnceLock<Option<Searches>>>,
}

/// Both tiers, read in one [`Reading`].
#[derive(Debug, Clone)]
struct Searches {
    candidate: Tier,
    plain: Tier,
}

/// Literals and a literal-less pattern, read in one [`Reading`].
#[derive(Debug, Clone)]
struct Tier {
    literals: AhoCorasick,
    pattern: Option<Regex>,
}

/// Why a scan could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("literal search: {0}")]
    Literals(#[source] BuildError),
    #[error("pattern: {0}")]
    Parse(#[source] Box<regex_syntax::Error>),
    #[error("widened pattern: {0}")]
    Pattern(#[source] regex::Error),
}

impl LineScan {
    /// `pattern`, when not empty, is one regex (line anchors meaning the line's ends) for what has no
    /// literal. Lines are then [`Mark::Candidate`] or [`Mark::Quiet`].
    pub fn new(literals: &[String], pattern: &str) -> Result<Self, ScanError> {
        Self::tiered((literals, pattern), (&[], ""))
    }

    /// A scan of two tiers, each literals and a pattern as [`Self::new`] takes them: a line the first
    /// may match is a [`Mark::Candidate`], else one the plain tier may match is [`Mark::Plain`].
    pub fn tiered(
        candidate: (&[String], &str),
        plain: (&[String], &str),
    ) -> Result<Self, ScanError> {
        let given = [
            (candidate.0.to_vec(), candidate.1.to_string()),
            (plain.0.to_vec(), plain.1.to_string()),
        ];
        Ok(Self {
            fine: Searches::new(&given, Reading::Digits)?,
            given,
            coarse: Arc::new(OnceLock::new()),
        })
    }

    /// The coarse searches, built on first use.
    fn coarse(&self) -> Option<&Searches> {
        self.coarse
            .get_or_init(|| Searches::new(&self.given, Reading::Hex).ok())
            .as_ref()
    }

    /// Builds the coarse searches now rather than on a log's first need of them.
    pub fn prepare(&self) {
        self.coarse();
    }

    /// The first tier's patterns without literals, for inspection.
    pub fn pattern(&self) -> &str {
        &self.given[0].1
    }

    /// Each line's mark.
    pub fn marks(&self, chunk: &Chunk) -> Vec<Mark> {
        self.marks_remembering(chunk, &mut ShapeMemory::default())
    }

    /// [`Self::marks`] that starts from the verdicts on shapes `memory` holds and adds the new ones:
    /// the reads of one log that follow each other repeat its shapes.
    pub fn marks_remembering(&self, chunk: &Chunk, shapes: &mut ShapeMemory) -> Vec<Mark> {
        let text = chunk.text.as_bytes();
        chunk
            .spans
            .iter()
            .map(|&(start, end)| {
                // The line, and what follows it in the read up to a whole number of 16-byte blocks.
                let length = end.saturating_sub(start);
                let reach = start
                    .saturating_add(length.next_multiple_of(16))
                    .min(text.len());
                let line = Line {
                    bytes: text.get(start..reach.max(end)).unwrap_or_default(),
                    length,
                };
                self.mark(line, shapes)
            })
            .collect()
    }

    /// The mark of the line's shape: [`Mark::Quiet`] proves that the line holds no literal and
    /// matches no pattern of either tier, [`Mark::Plain`] none of the first.
    fn mark(&self, line: Line<'_>, shapes: &mut ShapeMemory) -> Mark {
        let ShapeMemory {
            known,
            coarse_known,
            scratch,
            coarse_scratch,
        } = shapes;
        if known.len() >= MAX_SHAPES
            && line.length <= MAX_SHAPE_BYTES
            && let Some(coarse) = self.coarse()
        {
            return coarse_mark(coarse, line, coarse_scratch, coarse_known);
        }
        let Some((hash, shape)) = scratch.shape(line.bytes, line.length, Reading::Digits) else {
            // Too long to remember: searched on its own.
            return self.fine.mark(&shape_of(line.text(), Reading::Digits));
        };
        if let Some(verdict) = known.get(hash, shape) {
            return verdict;
        }
        let verdict = match (known.len() >= COARSE_AFTER)
            .then(|| self.coarse())
            .flatten()
        {
            Some(coarse) => coarse_mark(coarse, line, coarse_scratch, coarse_known),
            None => self.fine.mark(shape),
        };
        known.remember(hash, shape, verdict);
        verdict
    }
}

/// A line of a read: its first `length` bytes, followed by what comes after it in the read (at most
/// up to its length rounded up to 16).
#[derive(Clone, Copy)]
struct Line<'r> {
    bytes: &'r [u8],
    length: usize,
}

impl Line<'_> {
    fn text(&self) -> &[u8] {
        self.bytes.get(..self.length).unwrap_or(self.bytes)
    }
}

/// The mark of the line's coarse shape (at most [`MAX_SHAPE_BYTES`]), written in `scratch` and
/// remembered in `known`.
fn coarse_mark(
    coarse: &Searches,
    line: Line<'_>,
    scratch: &mut ShapeBuffer,
    known: &mut ShapeTable,
) -> Mark {
    let Some((hash, shape)) = scratch.shape(line.bytes, line.length, Reading::Hex) else {
        return coarse.mark(&shape_of(line.text(), Reading::Hex));
    };
    if let Some(verdict) = known.get(hash, shape) {
        return verdict;
    }
    let verdict = coarse.mark(shape);
    known.remember(hash, shape, verdict);
    verdict
}

impl Searches {
    /// Both tiers (see [`LineScan::tiered`]) read in `reading`.
    fn new(given: &[(Vec<String>, String); 2], reading: Reading) -> Result<Self, ScanError> {
        let [(literals, pattern), (plain_literals, plain_pattern)] = given;
        Ok(Self {
            candidate: Tier::new(literals, pattern, reading)?,
            plain: Tier::new(plain_literals, plain_pattern, reading)?,
        })
    }

    fn mark(&self, shape: &[u8]) -> Mark {
        if self.candidate.matches(shape) {
            Mark::Candidate
        } else if self.plain.matches(shape) {
            Mark::Plain
        } else {
            Mark::Quiet
        }
    }
}

impl Tier {
    /// The literals and the pattern read in `reading`.
    fn new(literals: &[String], pattern: &str, reading: Reading) -> Result<Self, ScanError> {
        let mut shaped: Vec<Vec<u8>> = literals
            .iter()
            .map(|literal| shape_of(literal.as_bytes(), reading))
            .collect();
        shaped.sort();
        shaped.dedup();
        // A full DFA: it is built once, and the shapes of every log's lines go through it.
        let shaped = AhoCorasickBuilder::new()
            .kind(Some(AhoCorasickKind::DFA))
            .build(&shaped)
            .map_err(ScanError::Literals)?;
        let shaped_pattern = if pattern.is_empty() {
            None
        } else {
            let hir = regex_syntax::ParserBuilder::new()
                .multi_line(true)
                .build()
                .parse(pattern)
                .map_err(|err| ScanError::Parse(Box::new(err)))?;
            let widened = widen(&hir, reading).to_string();
            Some(catalog_wide(&widened).map_err(ScanError::Pattern)?)
        };
        Ok(Self {
            literals: shaped,
            pattern: shaped_pattern,
        })
    }

    /// Whether `shape` holds one of the literals or matches the pattern.
    fn matches(&self, shape: &[u8]) -> bool {
        self.literals.is_match(shape)
            || self.pattern.as_ref().is_some_and(|pattern| {
                // A shape is valid UTF-8 when its line is: only ASCII bytes were replaced, by `0`.
                std::str::from_utf8(shape).is_ok_and(|text| pattern.is_match(text))
            })
    }
}

/// A regex of many of the catalog's patterns joined: room for their automaton, and a lazy DFA cache
/// large enough for them (below it the regex falls back to an NFA simulation many times slower).
pub(super) fn catalog_wide(pattern: &str) -> Result<Regex, regex::Error> {
    regex::RegexBuilder::new(pattern)
        .size_limit(64 << 20)
        .dfa_size_limit(DFA_CACHE_BYTES)
        .build()
}

/// `hir` with `0` added to every class that holds a byte `reading` replaces and those bytes of its
/// literals read as `0`: it matches the shape of every line `hir` matches.
fn widen(hir: &Hir, reading: Reading) -> Hir {
    let overlaps_digits = |start: u32, end: u32| reading.overlaps(start, end);
    match hir.kind() {
        HirKind::Empty => Hir::empty(),
        HirKind::Literal(literal) => Hir::literal(shape_of(&literal.0, reading)),
        HirKind::Class(Class::Unicode(class)) => {
            let mut class = class.clone();
            if class
                .ranges()
                .iter()
                .any(|r| overlaps_digits(u32::from(r.start()), u32::from(r.end())))
            {
                class.union(&regex_syntax::hir::ClassUnicode::new([
                    ClassUnicodeRange::new('0', '0'),
                ]));
            }
            Hir::class(Class::Unicode(class))
        }
        HirKind::Class(Class::Bytes(class)) => {
            let mut class = class.clone();
            if class
                .ranges()
                .iter()
                .any(|r| overlaps_digits(u32::from(r.start()), u32::from(r.end())))
            {
                class.union(&regex_syntax::hir::ClassBytes::new([ClassBytesRange::new(
                    b'0', b'0',
                )]));
            }
            Hir::class(Class::Bytes(class))
        }
        HirKind::Look(look) => Hir::look(*look),
        HirKind::Repetition(repetition) => {
            let mut repetition = repetition.clone();
            repetition.sub = Box::new(widen(&repetition.sub, reading));
            Hir::repetition(repetition)
        }
        HirKind::Capture(capture) => {
            let mut capture = capture.clone();
            capture.sub = Box::new(widen(&capture.sub, reading));
            Hir::capture(capture)
        }
        HirKind::Concat(parts) => {
            Hir::concat(parts.iter().map(|part| widen(part, reading)).collect())
        }
        HirKind::Alternation(parts) => {
            Hir::alternation(parts.iter().map(|part| widen(part, reading)).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(text: &str) -> Chunk {
        Chunk::of_text(text)
    }

    /// Whether each line of the read is a candidate.
    fn candidates(scan: &LineScan, read: &Chunk) -> Vec<bool> {
        candidates_remembering(scan, read, &mut ShapeMemory::default())
    }

    fn candidates_remembering(
        scan: &LineScan,
        read: &Chunk,
        memory: &mut ShapeMemory,
    ) -> Vec<bool> {
        let marks = scan.marks_remembering(read, memory);
        marks
            .into_iter()
            .map(|mark| mark == Mark::Candidate)
            .collect()
    }

    fn scan(literals: &[&str]) -> LineScan {
        let literals: Vec<String> = literals.iter().map(|l| l.to_string()).collect();
        LineScan::new(&literals, "").unwrap()
    }

    #[test]
    fn a_line_is_marked_when_a_literal_is_in_it_whatever_its_shape_was_before() {
        let scan = scan(&["Xid 79", "out of memory"]);
        let read = chunk(
            "step 1 Xid 13 ok\nstep 2 Xid 79 gone\nstep 3 fine\nCUDA out of memory\nstep 4 fine\n",
        );
        // `Xid 13` has the shape of `Xid 79`: marked too, and confirmed later on its own text.
        assert_eq!(
            candidates(&scan, &read),
            vec![true, true, false, true, false]
        );
    }

    #[test]
    fn lines_of_one_shape_share_a_verdict_and_others_are_searched() {
        let scan = scan(&["NCCL WARN"]);
        let mut text = String::new();
        for step in 0..1000 {
            text.push_str(&format!(
                "[2026-01-05 08:00:{:02}] step {step} loss 2.{step}\n",
                step % 60
            ));
        }
        text.push_str("[2026-01-05 08:01:00] node-1:1:2 [0] NCCL WARN timeout\n");
        let marks = candidates(&scan, &chunk(&text));
        assert_eq!(marks.iter().filter(|m| **m).count(), 1);
        assert!(marks[1000]);
    }

    #[test]
    fn long_lines_are_searched_without_being_remembered() {
        let scan = scan(&["Watchdog caught"]);
        let long = format!(
            "{} Watchdog caught collective",
            "x".repeat(2 * MAX_SHAPE_BYTES)
        );
        let read = chunk(&format!("{long}\n{}\n", "y".repeat(2 * MAX_SHAPE_BYTES)));
        assert_eq!(candidates(&scan, &read), vec![true, false]);
    }

    #[test]
    fn lines_each_with_their_own_hex_id_are_marked_whenever_a_literal_or_pattern_is_in_them() {
        let literals = ["Xid 79", "dead peer", "Bus error", "ABORT"];
        let pattern = r"code 1\d{2}$|\bfe[a-c]+d me\b";
        let scan = LineScan::new(&literals.map(str::to_string), pattern).unwrap();
        let original = Regex::new(&format!("(?m){pattern}")).unwrap();
        let tails = [
            (7, " Xid 79 on gpu 2"),
            (8, " saw dead peer"),
            (9, " Bus error"),
            (10, " exit code 142"),
            (11, " fed feabd me"),
            (12, " ABORT"),
        ];
        let read = chunk(&lines_with_ids(3000, 300, &tails));
        let marks = candidates(&scan, &read);
        let mut marked = 0;
        for (line, mark) in read.lines().zip(&marks) {
            let holds =
                literals.iter().any(|literal| line.contains(literal)) || original.is_match(line);
            assert!(!holds || *mark, "{line}");
            marked += usize::from(*mark);
        }
        // The coarse shapes repeat: the lines that hold nothing are mostly passed over.
        assert!(marked < 600, "{marked} of 3000 marked");
        assert!(scan.coarse.get().is_some_and(Option::is_some));
    }

    /// `count` lines of eight ranks, each with its own hex id, the `n`th ending in the tail `tails` give
    /// for `n % period`, else in ` step done`.
    fn lines_with_ids(count: u64, period: u64, tails: &[(u64, &str)]) -> String {
        let mut text = String::new();
        let mut id = 0x9e37_79b9_7f4a_7c15u64;
        for n in 0..count {
            id = id.rotate_left(17).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ n;
            let tail = tails
                .iter()
                .find(|(at, _)| *at == n % period)
                .map_or(" step done", |(_, tail)| tail);
            text.push_str(&format!("[rank {}] trace={id:016x}{tail}\n", n % 8));
        }
        text
    }

    /// A scan of `Xid 79`, `dead peer` and `code 1\d{2}$`, and whether a line holds one of them.
    fn two_literals_and_a_pattern() -> (LineScan, impl Fn(&str) -> bool) {
        let literals = ["Xid 79", "dead peer"];
        let pattern = r"code 1\d{2}$";
        let scan = LineScan::new(&literals.map(str::to_string), pattern).unwrap();
        let original = Regex::new(&format!("(?m){pattern}")).unwrap();
        let holds = move |line: &str| {
            literals.iter().any(|literal| line.contains(literal)) || original.is_match(line)
        };
        (scan, holds)
    }

    #[test]
    fn a_memory_kept_across_reads_misses_no_line_and_marks_no_more_than_a_fresh_scan() {
        let (scan, holds) = two_literals_and_a_pattern();
        let mut memory = ShapeMemory::default();
        let mut id = 0x2545_f491_4f6c_dd1du64;
        for read_index in 0..6u64 {
            // Reads of repeating shapes, then reads with a hex id on every line (the coarse shapes).
            let mut text = String::new();
            for n in 0..400u64 {
                id = id.rotate_left(13).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ n;
                let tail = match (n + read_index) % 97 {
                    3 => " Xid 79 on gpu 2",
                    5 => " saw dead peer",
                    7 => " exit code 142",
                    _ => " step done",
                };
                if read_index < 3 {
                    text.push_str(&format!("[rank {}] step {n}{tail}\n", n % 8));
                } else {
                    text.push_str(&format!("[rank {}] trace={id:016x}{tail}\n", n % 8));
                }
            }
            let read = chunk(&text);
            let marks = candidates_remembering(&scan, &read, &mut memory);
            for (line, mark) in read.lines().zip(&marks) {
                assert!(!holds(line) || *mark, "read {read_index}: {line}");
            }
            // What holds nothing is passed over, as in a fresh scan of the read.
            let marked = marks.iter().filter(|mark| **mark).count();
            let fresh = candidates(&scan, &read)
                .iter()
                .filter(|mark| **mark)
                .count();
            assert!(
                marked <= fresh.max(20),
                "read {read_index}: {marked} marked, {fresh} fresh"
            );
        }
        assert!(
            memory.known.len() > COARSE_AFTER,
            "the coarse shapes were used"
        );
        assert!(!memory.coarse_known.is_empty());
    }

    #[test]
    fn a_log_of_few_shapes_never_builds_the_coarse_searches() {
        let scan = scan(&["NCCL WARN"]);
        let mut text = String::new();
        for step in 0..5000 {
            text.push_str(&format!("step {step} loss 2.{step}\n"));
        }
        candidates(&scan, &chunk(&text));
        assert!(scan.coarse.get().is_none());
    }

    #[test]
    fn the_literal_less_patterns_mark_their_lines() {
        let scan = LineScan::new(
            &["Segmentation fault".to_string()],
            r"code 1\d{2}$|^\[\d+\] \w+ [1-3]x",
        )
        .unwrap();
        let read = chunk(
            "exit code 139\nSegmentation fault\nall fine\nexit code 239\n[12] node 2x\n[12] node 4x\n",
        );
        // `code 239` and `node 4x` have the shapes of matches: marked, and confirmed later.
        assert_eq!(
            candidates(&scan, &read),
            vec![true, true, false, true, true, true]
        );
        let read = chunk("exit code 13\nnode 2x\n");
        assert_eq!(candidates(&scan, &read), vec![false, false]);
    }

    #[test]
    fn a_widened_pattern_matches_the_shape_of_every_line_the_pattern_matches() {
        let patterns = [
            r"Xid \d+",
            r"(?i)exit(?:ed with)? code[ :=]*137",
            r"\bGPU [1-7]\b",
            r"[^a-z]{3}9$",
            r"\w+@\S+:\d+",
        ];
        let lines = [
            "Xid 79 on gpu 3",
            "Exited with code 137",
            "GPU 5 lost",
            "x 1239",
            "alice@node-17:8080",
            "exit code=137",
        ];
        for pattern in patterns {
            let original = Regex::new(pattern).unwrap();
            let scan = LineScan::new(&[], pattern).unwrap();
            for line in lines {
                if original.is_match(line) {
                    assert!(
                        scan.fine
                            .candidate
                            .matches(&shape_of(line.as_bytes(), Reading::Digits)),
                        "{pattern} on {line}"
                    );
                    let coarse = Tier::new(&[], pattern, Reading::Hex).unwrap();
                    assert!(
                        coarse.matches(&shape_of(line.as_bytes(), Reading::Hex)),
                        "{pattern} on {line}, hex digits read as 0"
                    );
                }
            }
        }
    }

    #[test]
    fn the_plain_tier_marks_what_the_first_does_not_and_never_a_line_that_holds_neither() {
        let to_strings =
            |literals: &[&str]| literals.iter().map(|l| l.to_string()).collect::<Vec<_>>();
        let scan = LineScan::tiered(
            (&to_strings(&["NCCL WARN"]), ""),
            (&to_strings(&["|", "Error"]), r"E\d{4} \d\d:\d\d"),
        )
        .unwrap();
        let mut text = String::new();
        let mut id = 0x1234_5678_9abc_def0u64;
        for n in 0..2000u64 {
            id = id.rotate_left(11).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ n;
            let line = match n % 50 {
                1 => format!("iteration {n} | loss 2.{n}"),
                2 => format!("[{n}] KeyError: 'x' NCCL WARN"),
                3 => format!("E{:04} 06:24:44 c10d.cpp:12] broken", n % 10000),
                4 => format!("[{n}] KeyError: 'x'"),
                _ => format!("step {n} trace={id:016x} fine"),
            };
            text.push_str(&line);
            text.push('\n');
        }
        let read = chunk(&text);
        let marks = scan.marks(&read);
        for (line, mark) in read.lines().zip(&marks) {
            let expected = if line.contains("NCCL WARN") {
                Mark::Candidate
            } else if line.contains('|') || line.contains("Error") || line.starts_with('E') {
                Mark::Plain
            } else {
                Mark::Quiet
            };
            assert_eq!(*mark, expected, "{line}");
        }
        // The hex ids took the lines to the coarse shapes, whose tiers mark the same.
        assert!(scan.coarse.get().is_some_and(Option::is_some));
    }

    #[test]
    fn once_the_fine_shapes_fill_the_memory_lines_are_read_coarse_and_none_is_missed() {
        let (scan, holds) = two_literals_and_a_pattern();
        let tails = [
            (3, " Xid 79 on gpu 2"),
            (5, " saw dead peer"),
            (7, " exit code 142"),
        ];
        let read = chunk(&lines_with_ids(MAX_SHAPES as u64 + 3000, 211, &tails));
        let mut memory = ShapeMemory::default();
        let marks = candidates_remembering(&scan, &read, &mut memory);
        assert_eq!(memory.known.len(), MAX_SHAPES);
        let mut marked_after_full = 0;
        for (index, (line, mark)) in read.lines().zip(&marks).enumerate() {
            assert!(!holds(line) || *mark, "{line}");
            if index >= MAX_SHAPES {
                marked_after_full += usize::from(*mark);
            }
        }
        // Past the full memory the coarse shapes repeat, and what holds nothing stays unmarked.
        assert!(
            marked_after_full < 200,
            "{marked_after_full} of 3000 marked"
        );
    }
}
