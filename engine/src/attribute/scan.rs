//! The whole-read scan: which lines of a read may match a signature or hold a recogniser's marker.
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

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, AhoCorasickKind, BuildError};
use regex::Regex;
use regex_syntax::hir::{Class, ClassBytesRange, ClassUnicodeRange, Hir, HirKind};

use crate::telemetry::tail::Chunk;

/// Shapes remembered per read; past this, unknown shapes are searched without being remembered.
const MAX_SHAPES: usize = 8192;
/// Longest line whose shape is remembered: long lines rarely repeat (tqdm redraws, dumps), and a
/// bound keeps the memory of one read's shapes small.
const MAX_SHAPE_BYTES: usize = 512;

/// The literals every signature's match must contain and the recognisers' markers, found per line
/// through its shape; plus, as one regex, the patterns that have no such literal.
#[derive(Debug, Clone)]
pub struct LineScan {
    /// The literals, their digits read as `0`.
    shaped: AhoCorasick,
    /// Patterns without usable literals (and the locators), as given...
    pattern: String,
    /// ...and widened to match the shapes of the lines they match.
    shaped_pattern: Option<Regex>,
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
    /// literal.
    pub fn new(literals: &[String], pattern: &str) -> Result<Self, ScanError> {
        let mut shaped: Vec<Vec<u8>> = literals
            .iter()
            .map(|literal| shape_of(literal.as_bytes()))
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
            let widened = widen_digits(&hir).to_string();
            Some(
                regex::RegexBuilder::new(&widened)
                    .size_limit(64 << 20)
                    .build()
                    .map_err(ScanError::Pattern)?,
            )
        };
        Ok(Self {
            shaped,
            pattern: pattern.to_string(),
            shaped_pattern,
        })
    }

    /// The patterns without literals, for inspection.
    pub fn pattern(&self) -> &str {
        &self.pattern
    }

    /// For each line of the read, whether it may hold a literal or match the literal-less patterns.
    pub fn candidate_lines(&self, chunk: &Chunk) -> Vec<bool> {
        let text = chunk.text.as_bytes();
        let mut shapes = Shapes::default();
        chunk
            .spans
            .iter()
            .map(|&(start, end)| {
                let line = text.get(start..end).unwrap_or_default();
                self.may_match(line, &mut shapes)
            })
            .collect()
    }

    /// Whether the line's shape holds a shaped literal or matches the widened pattern: false proves
    /// that the line holds no literal and matches no pattern.
    fn may_match(&self, line: &[u8], shapes: &mut Shapes) -> bool {
        shapes.scratch.clear();
        push_shape(line, &mut shapes.scratch);
        if line.len() > MAX_SHAPE_BYTES {
            return self.shape_matches(&shapes.scratch);
        }
        if let Some(&verdict) = shapes.known.get(shapes.scratch.as_slice()) {
            return verdict;
        }
        let verdict = self.shape_matches(&shapes.scratch);
        if shapes.known.len() < MAX_SHAPES {
            shapes
                .known
                .insert(shapes.scratch.clone().into_boxed_slice(), verdict);
        }
        verdict
    }

    fn shape_matches(&self, shape: &[u8]) -> bool {
        self.shaped.is_match(shape)
            || self.shaped_pattern.as_ref().is_some_and(|pattern| {
                // A shape is valid UTF-8: only ASCII digits were replaced, by an ASCII digit.
                std::str::from_utf8(shape).is_ok_and(|text| pattern.is_match(text))
            })
    }
}

/// `hir` with `0` added to every class that holds an ASCII digit and every digit of its literals read
/// as `0`: it matches the shape of every line `hir` matches.
fn widen_digits(hir: &Hir) -> Hir {
    let overlaps_digits = |start: u32, end: u32| start <= u32::from(b'9') && end >= u32::from(b'0');
    match hir.kind() {
        HirKind::Empty => Hir::empty(),
        HirKind::Literal(literal) => Hir::literal(shape_of(&literal.0)),
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
            repetition.sub = Box::new(widen_digits(&repetition.sub));
            Hir::repetition(repetition)
        }
        HirKind::Capture(capture) => {
            let mut capture = capture.clone();
            capture.sub = Box::new(widen_digits(&capture.sub));
            Hir::capture(capture)
        }
        HirKind::Concat(parts) => Hir::concat(parts.iter().map(widen_digits).collect()),
        HirKind::Alternation(parts) => Hir::alternation(parts.iter().map(widen_digits).collect()),
    }
}

/// The shapes of one read's lines seen so far, with their verdicts.
#[derive(Default)]
struct Shapes {
    known: HashMap<Box<[u8]>, bool, BuildHasherDefault<ShapeHasher>>,
    /// The current line's shape, built here to look it up without allocating.
    scratch: Vec<u8>,
}

fn digit_as_zero(byte: u8) -> u8 {
    if byte.is_ascii_digit() { b'0' } else { byte }
}

fn shape_of(bytes: &[u8]) -> Vec<u8> {
    let mut shape = Vec::with_capacity(bytes.len());
    push_shape(bytes, &mut shape);
    shape
}

/// Appends the shape of `bytes`, in a loop the compiler turns into vector instructions.
fn push_shape(bytes: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + bytes.len(), 0);
    for (shaped, &byte) in out[start..].iter_mut().zip(bytes) {
        *shaped = digit_as_zero(byte);
    }
}

/// A multiplicative hash over four independent lanes of eight bytes: shapes are hashed once per line,
/// and a single chain of multiplications (or SipHash) would cost as much as the rest of the lookup.
/// Only lookups of this process's own lines use it.
#[derive(Default)]
struct ShapeHasher(u64);

const SEED: u64 = 0x51_7c_c1_b7_27_22_0a_95;

fn mix(state: u64, word: u64) -> u64 {
    (state.rotate_left(5) ^ word).wrapping_mul(SEED)
}

fn word_at(bytes: &[u8], at: usize) -> u64 {
    let mut eight = [0u8; 8];
    let available = bytes.len().saturating_sub(at).min(8);
    eight[..available].copy_from_slice(&bytes[at..at + available]);
    u64::from_le_bytes(eight)
}

impl Hasher for ShapeHasher {
    fn write(&mut self, bytes: &[u8]) {
        let mut lanes = [self.0, 1, 2, 3];
        let mut blocks = bytes.chunks_exact(32);
        for block in blocks.by_ref() {
            for (lane, at) in lanes.iter_mut().zip([0, 8, 16, 24]) {
                *lane = mix(*lane, word_at(block, at));
            }
        }
        let rest = blocks.remainder();
        for (lane, at) in lanes.iter_mut().zip([0, 8, 16, 24]) {
            if at < rest.len() {
                *lane = mix(*lane, word_at(rest, at));
            }
        }
        self.0 = lanes.into_iter().fold(0, mix);
    }

    fn write_usize(&mut self, value: usize) {
        self.0 = mix(self.0, value as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(text: &str) -> Chunk {
        Chunk::of_text(text)
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
            scan.candidate_lines(&read),
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
        let marks = scan.candidate_lines(&chunk(&text));
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
        assert_eq!(scan.candidate_lines(&read), vec![true, false]);
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
            scan.candidate_lines(&read),
            vec![true, true, false, true, true, true]
        );
        let read = chunk("exit code 13\nnode 2x\n");
        assert_eq!(scan.candidate_lines(&read), vec![false, false]);
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
                        scan.shape_matches(&shape_of(line.as_bytes())),
                        "{pattern} on {line}"
                    );
                }
            }
        }
    }
}
