//! The per-log pipeline: raw lines → framing → recognisers → what the engine stores and the detectors
//! read (iterations, throughput samples, checkpoints, evidence lines, straggler reports).
//!
//! One [`Digester`] follows one log through one read; the engine and the ingest benchmark share it.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use crate::model::EvidenceLine;
use crate::telemetry::line::FramedLine;
use crate::telemetry::line_facts::{LineClassifier, LineFacts, LineKind};
use crate::telemetry::readings::{self, Reading};
use crate::telemetry::record::{Record, named_host};
use crate::telemetry::step_timing::{self, StepTiming};
use crate::telemetry::straggler_report::{self, StragglerReport};
use crate::telemetry::tail::Chunk;
use crate::telemetry::traceback::{TORCHSCRIPT_START, TracebackAssembler, TracebackBlock};
use crate::text::keep_ends;

/// Longest evidence line kept (a longer one keeps its two ends).
const MAX_EVIDENCE_CHARS: usize = 2000;
/// Traceback lines kept per traceback (its head is the interesting part, with the exception line).
const MAX_TRACEBACK_LINES: usize = 40;

/// What one read of a log taught.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LogDigest {
    /// Lines worth keeping for attribution.
    pub evidence: Vec<EvidenceLine>,
    /// (iteration, path, time) of each checkpoint save.
    pub checkpoints: Vec<(u64, String, DateTime<Utc>)>,
    /// (time, iteration, TFLOP/s/GPU, rank) of each iteration line that reports throughput.
    pub samples: Vec<(DateTime<Utc>, u64, f64, Option<u32>)>,
    pub straggler_reports: Vec<StragglerReport>,
    /// (time, timing) of each progress line that says how long its step took.
    pub step_timings: Vec<(DateTime<Utc>, StepTiming)>,
    /// Numbers tools printed about the hardware and the input pipeline, in the log's order.
    pub readings: Vec<Reading>,
    /// Python tracebacks completed in this read, each one block (chained exceptions included).
    pub tracebacks: Vec<TracebackBlock>,
    /// Time of the last line (its own stamp, else the previous line's, else arrival).
    pub last_time: Option<DateTime<Utc>>,
    /// Highest iteration seen.
    pub last_iteration: Option<u64>,
    /// When `last_iteration` was first reached.
    pub progress_time: Option<DateTime<Utc>>,
    /// Lines read.
    pub lines: u64,
    /// The ranks that wrote in this read (lines with a task label: `srun -l`, torchrun's prefixes).
    pub ranks_heard: Vec<u32>,
    /// The read ended inside a checkpoint save: announced, not yet confirmed, no progress since.
    pub saving: Option<bool>,
}

/// The starts of a Python traceback and of TorchScript's, which the assembler is shown.
pub(crate) const TRACEBACK_MARKERS: [&str; 2] = ["Traceback (most recent", TORCHSCRIPT_START];

/// Every literal one of which a line must hold for the digest to do more with it than frame it: the
/// recognisers' markers (`record::signal_marker_literals`), a traceback's start, a straggler report's
/// key, and what a blamed host's line says (`NCCL WARN`, `srun: error:`, both already markers). A
/// whole-read scan for them (`Catalog::candidate_lines`) lets [`Digester::push_chunk`] pass over the
/// lines that hold none without searching each.
pub fn marker_literals() -> Vec<&'static str> {
    let mut literals = crate::telemetry::record::signal_marker_literals();
    literals.extend(TRACEBACK_MARKERS);
    literals.push(straggler_report::MARKER);
    literals.extend(step_timing::markers());
    literals.extend(readings::markers());
    literals
}

/// The host a line blames: an NCCL warning's or an srun error's host. NCCL's INFO chatter names hosts
/// too, but says nothing is wrong with them.
pub fn blamed_host(text: &str) -> Option<&str> {
    let host = named_host(text)?;
    (text.contains(" NCCL WARN ") || text.trim_start().starts_with("srun: error:")).then_some(host)
}

/// Turns lines into a [`LogDigest`]. `notable` decides which other lines are evidence (the signature
/// catalog's prefilter, in the engine).
pub struct Digester<F: Fn(&str) -> bool> {
    /// Finds each line's facts, `notable` among them.
    classifier: LineClassifier<F>,
    now: DateTime<Utc>,
    /// The iteration a save without a step number belongs to, when the log did not say in this read.
    known_iteration: Option<u64>,
    /// Assembles multi-line tracebacks; it outlives one read when the caller hands it back in.
    assembler: TracebackAssembler,
    /// Ranks inside a Python traceback, with the lines kept of it so far.
    tracebacks: HashMap<Option<u32>, usize>,
    /// The ranks in `digest.ranks_heard`, as bits, so each line's rank is looked up in constant time.
    ranks_seen: Vec<u64>,
    digest: LogDigest,
}

/// Ranks below this are remembered as bits; higher ones (never seen in practice) are searched.
const RANK_BITS: u32 = 1 << 16;

impl<F: Fn(&str) -> bool> Digester<F> {
    /// `last_time` and `last_iteration` carry over from earlier reads of the same log.
    pub fn new(
        notable: F,
        now: DateTime<Utc>,
        last_time: Option<DateTime<Utc>>,
        last_iteration: Option<u64>,
    ) -> Self {
        Self {
            classifier: LineClassifier::new(notable, now),
            now,
            known_iteration: last_iteration,
            assembler: TracebackAssembler::new(),
            tracebacks: HashMap::new(),
            ranks_seen: Vec::new(),
            digest: LogDigest {
                last_time,
                ..LogDigest::default()
            },
        }
    }

    /// Feeds one line (without its newline).
    pub fn push(&mut self, raw: &str) {
        self.push_line(raw, true);
    }

    /// Feeds every line of a read; `candidates` (see `Catalog::candidate_lines`) says which lines may
    /// be notable, so the others skip the per-line check.
    /// `candidates` must also cover the digest's markers ([`marker_literals`]), as the catalog's scan
    /// does: an unmarked line is only framed, counted and, inside a traceback, shown to the assembler.
    pub fn push_chunk(&mut self, chunk: &Chunk, candidates: &[bool]) {
        for (index, line) in chunk.lines().enumerate() {
            let marked = candidates.get(index).copied().unwrap_or(true);
            self.push_hinted(line, marked, marked);
        }
    }

    /// Feeds one line; `candidate` false means the notable check cannot match it.
    pub fn push_line(&mut self, raw: &str, candidate: bool) {
        self.push_hinted(raw, candidate, true);
    }

    /// Feeds one line with both whole-read hints: `candidate` (a signature may match) and `markers`
    /// (one of [`marker_literals`] occurs in it).
    fn push_hinted(&mut self, raw: &str, candidate: bool, markers: bool) {
        let facts = self.classifier.classify(raw, candidate, markers);
        self.apply(raw, facts);
    }

    /// Feeds every line of a read by its facts, found beforehand (on any thread) by a
    /// [`LineClassifier`] from the read's lines and candidates.
    pub fn push_classified(&mut self, chunk: &Chunk, facts: Vec<LineFacts>) {
        for (line, facts) in chunk.lines().zip(facts) {
            self.apply(line, facts);
        }
    }

    /// Takes in one line by its facts, in order.
    fn apply(&mut self, raw: &str, facts: LineFacts) {
        self.digest.lines += 1;
        if let Some(rank) = facts.rank {
            self.hear(rank);
        }
        let message = facts.message(raw);
        let time = facts
            .timestamp
            .or(self.digest.last_time)
            .unwrap_or(self.now);
        self.digest.last_time = Some(time);
        // Only a traceback start, or a line while one is open, concerns the assembler.
        if self.assembler.open_blocks() > 0 || facts.traceback_marker {
            let framed = FramedLine {
                rank: facts.rank,
                timestamp: facts.timestamp,
                message,
            };
            if let Some(block) = self.assembler.push_framed(&framed) {
                self.digest.tracebacks.push(block);
            }
            while let Some(block) = self.assembler.pop_ready() {
                self.digest.tracebacks.push(block);
            }
        }
        let save_start = matches!(facts.kind, LineKind::SaveStart);
        let record = match facts.kind {
            LineKind::Straggler(report) => {
                self.digest.straggler_reports.push(report);
                return;
            }
            LineKind::Record(record) => Some(*record),
            LineKind::SaveStart => {
                self.digest.saving = Some(true);
                None
            }
            LineKind::Step(step) => {
                self.digest.step_timings.push((time, step));
                None
            }
            LineKind::Readings(found) => {
                self.digest.readings.extend(found);
                None
            }
            LineKind::Other => None,
        };
        let notable = match record {
            Some(Record::TracebackStart) => {
                self.tracebacks.insert(facts.rank, 0);
                true
            }
            Some(Record::ExceptionLine { .. }) => {
                self.tracebacks.remove(&facts.rank);
                true
            }
            Some(Record::Error { .. }) => true,
            Some(Record::Iteration {
                iteration,
                tflops_per_gpu,
                ..
            }) => {
                if self
                    .digest
                    .last_iteration
                    .is_none_or(|last| iteration > last)
                {
                    self.digest.last_iteration = Some(iteration);
                    self.digest.progress_time = Some(time);
                }
                self.known_iteration = Some(iteration);
                self.digest.saving = Some(false);
                if let Some(tflops) = tflops_per_gpu {
                    self.digest
                        .samples
                        .push((time, iteration, tflops, facts.rank));
                }
                false
            }
            Some(Record::CheckpointSaved { iteration, path }) => {
                self.digest.saving = Some(false);
                if let Some(iteration) = iteration.or(self.known_iteration) {
                    self.digest
                        .checkpoints
                        .push((iteration, path.unwrap_or_default(), time));
                }
                false
            }
            _ if save_start => false,
            // Mostly no traceback is open: the map is not even hashed into then.
            _ => match (!self.tracebacks.is_empty())
                .then(|| self.tracebacks.get_mut(&facts.rank))
                .flatten()
            {
                Some(kept) => {
                    *kept += 1;
                    *kept <= MAX_TRACEBACK_LINES
                }
                None => facts.notable,
            },
        };
        if notable {
            self.digest.evidence.push(EvidenceLine {
                time,
                rank: facts.rank,
                text: keep_ends(message.trim_end(), MAX_EVIDENCE_CHARS),
            });
        }
    }

    /// Adds `rank` to the ranks heard, once.
    fn hear(&mut self, rank: u32) {
        if rank >= RANK_BITS {
            if !self.digest.ranks_heard.contains(&rank) {
                self.digest.ranks_heard.push(rank);
            }
            return;
        }
        let (word, bit) = ((rank / 64) as usize, 1u64 << (rank % 64));
        if self.ranks_seen.len() <= word {
            self.ranks_seen.resize(word + 1, 0);
        }
        if self.ranks_seen[word] & bit == 0 {
            self.ranks_seen[word] |= bit;
            self.digest.ranks_heard.push(rank);
        }
    }

    /// Continues the tracebacks a previous read of the same log left open.
    pub fn resume_tracebacks(mut self, assembler: TracebackAssembler) -> Self {
        self.assembler = assembler;
        self
    }

    /// What the lines taught, every open traceback closed (the log is read to its end).
    pub fn finish(mut self) -> LogDigest {
        self.digest.tracebacks.extend(self.assembler.flush());
        self.digest
    }

    /// What the lines taught, with the tracebacks still open handed back for the next read (a chained
    /// traceback may continue there). Settle them once a read comes up empty.
    pub fn finish_keeping(self) -> (LogDigest, TracebackAssembler) {
        (self.digest, self.assembler)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(text: &str) -> LogDigest {
        let now = DateTime::parse_from_rfc3339("2026-01-05T09:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let mut digester = Digester::new(|line: &str| line.contains("Xid"), now, None, None);
        for line in text.lines() {
            digester.push(line);
        }
        digester.finish()
    }

    #[test]
    fn the_megatron_fixture_yields_iterations_throughput_and_checkpoints() {
        let text = std::fs::read_to_string("../tests/fixtures/logs/megatron_pretrain.log").unwrap();
        let digest = digest(&text);
        assert!(digest.last_iteration.is_some());
        assert!(!digest.samples.is_empty());
        assert!(digest.samples.iter().all(|s| s.2 > 0.0));
        assert!(!digest.checkpoints.is_empty());
        assert_eq!(digest.lines, text.lines().count() as u64);
    }

    #[test]
    fn the_nccl_crash_fixture_keeps_the_blaming_lines_and_the_traceback() {
        let text =
            std::fs::read_to_string("../tests/fixtures/logs/nccl_timeout_crash.log").unwrap();
        let digest = digest(&text);
        assert!(digest.evidence.iter().any(|l| l.text.contains("NCCL WARN")));
        assert!(digest.evidence.iter().any(|l| l.text.contains("Watchdog")));
    }

    #[test]
    fn healthy_chatter_is_not_evidence() {
        let text = std::fs::read_to_string("../tests/fixtures/logs/healthy_noise.log").unwrap();
        let digest = digest(&text);
        assert!(digest.evidence.is_empty(), "{:#?}", digest.evidence);
    }

    #[test]
    fn a_save_without_a_step_belongs_to_the_last_iteration() {
        let digest = digest(
            " 0: [2026-01-05 08:00:00] iteration      120/   1000 | elapsed time per iteration (ms): 3000.0 | throughput per GPU (TFLOP/s/GPU): 400.0 | lm loss: 2.0E+00 |\n 0: [2026-01-05 08:00:03] successfully saved checkpoint to /ckpt/x\n",
        );
        assert_eq!(digest.checkpoints.len(), 1);
        assert_eq!(digest.checkpoints[0].0, 120);
    }
}
