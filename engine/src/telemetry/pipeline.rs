//! The per-log pipeline: raw lines → framing → recognisers → what the engine stores and the detectors
//! read (iterations, throughput samples, checkpoints, evidence lines, straggler reports).
//!
//! One [`Digester`] follows one log through one read; the engine and the ingest benchmark share it.

use std::borrow::Cow;
use std::collections::{HashMap, VecDeque};

use chrono::{DateTime, Utc};

use crate::attribute::blocks::is_frame;
use crate::attribute::rejoin::WrapCarry;
use crate::attribute::scan::Mark;
use crate::model::EvidenceLine;
use crate::telemetry::ib_port::{self, PortSection};
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

/// Every literal one of which a line must hold for the digest to do more with it than the
/// recognisers' unhinted checks ([`plain_literals`]): the recognisers' markers
/// (`record::signal_marker_literals`), a traceback's start, a straggler report's key, and what a
/// blamed host's line says (`NCCL WARN`, `srun: error:`, both already markers). A whole-read scan for
/// them (`Catalog::line_marks`) lets [`Digester::push_chunk`] pass over the lines that hold none
/// without searching each.
pub fn marker_literals() -> Vec<&'static str> {
    let mut literals = crate::telemetry::record::signal_marker_literals();
    literals.extend(TRACEBACK_MARKERS);
    literals.push(straggler_report::MARKER);
    literals.extend(step_timing::markers());
    literals.extend(readings::markers());
    literals.extend(ib_port::MARKERS);
    literals
}

/// What the recognisers read in a line without its markers (`record::unhinted_literals`): with
/// [`plain_pattern`], a line that holds none of them nor of [`marker_literals`] is nothing to the
/// digest but its count, its rank and its stamp.
pub fn plain_literals() -> Vec<&'static str> {
    crate::telemetry::record::unhinted_literals()
}

/// The pattern beside [`plain_literals`] (a glog error header), a regex for a whole-read scan whose
/// line anchors mean a line's ends.
pub fn plain_pattern() -> &'static str {
    crate::telemetry::record::unhinted_pattern()
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
    /// The ranks in `digest.ranks_heard`, as bits, so each line's rank is looked up in constant time.
    ranks_seen: Vec<u64>,
    /// What the read continues of the ones before it, and leaves open for the next.
    open: OpenState,
    /// Where in this read's evidence `open.loss_not_finite` goes when it is kept: before every line of
    /// the read when an earlier read began the run of non-finite losses.
    loss_index: usize,
    digest: LogDigest,
}

/// What a read of a log leaves open for the next read of the same log, so that where one read ends
/// and the next begins changes nothing of what the log says: the tracebacks being assembled, the ranks
/// inside one with the lines kept of it, a run of non-finite losses not yet over, an `ibstat` port
/// section not yet ended. [`Digester::finish`] settles it (the log is read to its end), and so does
/// [`OpenState::settle`] when the log goes quiet.
#[derive(Debug, Default)]
pub struct OpenState {
    /// Assembles multi-line tracebacks.
    assembler: TracebackAssembler,
    /// Ranks inside a Python traceback, with the lines kept of it so far.
    tracebacks: HashMap<Option<u32>, usize>,
    /// The first progress line of the current run of them whose loss is NaN or infinite: kept once
    /// the log ends or goes quiet with the run still on, dropped when a finite loss or the training's
    /// normal end follows (the scaler skipped the steps, or the run finished).
    loss_not_finite: Option<EvidenceLine>,
    /// The `ibstat` port section being read: a port not active adds a derived evidence line.
    ib_port: PortSection,
    /// The last lines read after the last one kept as evidence, for the frame look-back of an
    /// exception line in the next read (see [`Digester::recover_frames`]).
    unsettled_tail: VecDeque<String>,
    /// What the rejoining of hard-wrapped lines carries to the next read.
    wrap: WrapCarry,
}

impl OpenState {
    /// The next read of the log with its hard-wrapped lines joined, a message cut where the read
    /// before ended included (see [`WrapCarry::rejoin`]).
    pub fn rejoin<'a>(&mut self, chunk: &'a Chunk) -> Cow<'a, Chunk> {
        self.wrap.rejoin(chunk)
    }

    /// What the log left open, settled once it went quiet at `now`: the tracebacks whose exception
    /// line came (those still in their frames stay open), and the evidence of a non-finite loss still
    /// on and of an `ibstat` section the log ended in (its link layer not shown: taken as InfiniBand).
    pub fn settle(&mut self, now: DateTime<Utc>) -> (Vec<TracebackBlock>, Vec<EvidenceLine>) {
        let mut evidence: Vec<EvidenceLine> = self.loss_not_finite.take().into_iter().collect();
        evidence.extend(self.close_ib_port(now));
        (self.assembler.settle(), evidence)
    }

    /// Ends an `ibstat` port section the log ended in (its link layer not shown: taken as
    /// InfiniBand): the evidence it adds, at `time`.
    fn close_ib_port(&mut self, time: DateTime<Utc>) -> impl Iterator<Item = EvidenceLine> {
        self.ib_port
            .close()
            .into_iter()
            .map(move |found| evidence_line(time, None, &found))
    }
}

/// Where one read's lines stand, for the look-backs of its later lines.
#[derive(Debug, Default)]
struct ReadState {
    /// The first of a run of quiet lines whose stamps are unread.
    unstamped: Option<usize>,
    /// Lines before this index are not looked back at: the last line kept as evidence is just before.
    settled: usize,
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
            open: OpenState::default(),
            loss_index: 0,
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

    /// Feeds every line of a read by its marks (see `Catalog::line_marks`), which must cover the
    /// digest's markers ([`marker_literals`]) and what the recognisers read without them
    /// ([`plain_literals`], [`plain_pattern`]), as the catalog's scan does. A candidate goes through
    /// every check and a plain line through the recognisers' unhinted ones; a quiet line is only
    /// counted and its rank heard, and framed only when a traceback is open or a later line needs its
    /// stamp.
    pub fn push_chunk(&mut self, chunk: &Chunk, marks: &[Mark]) {
        let mut read = ReadState::default();
        for (index, line) in chunk.lines().enumerate() {
            let facts = match marks.get(index).copied().unwrap_or(Mark::Candidate) {
                Mark::Candidate => self.classifier.classify(line, true, true),
                Mark::Quiet if self.passes_by(line, index, &mut read) => continue,
                Mark::Quiet | Mark::Plain => self.classifier.classify(line, false, false),
            };
            self.apply_in_read(chunk, index, line, facts, &mut read);
        }
        self.settle_stamps(chunk, read.unstamped, chunk.line_count());
        self.keep_unsettled_tail(chunk, read.settled);
    }

    /// Feeds one line; `candidate` false means the notable check cannot match it.
    pub fn push_line(&mut self, raw: &str, candidate: bool) {
        let facts = self.classifier.classify(raw, candidate, true);
        self.apply(raw, facts);
    }

    /// Feeds every line of a read by its facts, found beforehand (on any thread) by a
    /// [`LineClassifier`] from the read's lines and marks (None for a quiet line).
    pub fn push_classified(&mut self, chunk: &Chunk, facts: Vec<Option<LineFacts>>) {
        let mut read = ReadState::default();
        for (index, (line, facts)) in chunk.lines().zip(facts).enumerate() {
            let facts = match facts {
                Some(facts) => facts,
                None if self.passes_by(line, index, &mut read) => continue,
                None => self.classifier.classify(line, false, false),
            };
            self.apply_in_read(chunk, index, line, facts, &mut read);
        }
        self.settle_stamps(chunk, read.unstamped, chunk.line_count());
        self.keep_unsettled_tail(chunk, read.settled);
    }

    /// Takes in a quiet line without framing it, when nothing open needs it: it is counted and its
    /// rank heard, and the first of a run of such lines is remembered (their stamps are read, latest
    /// first, only when a line after them needs one). False when the line must be classified.
    fn passes_by(&mut self, line: &str, index: usize, read: &mut ReadState) -> bool {
        if self.open.assembler.open_blocks() > 0 || !self.open.tracebacks.is_empty() {
            return false;
        }
        self.digest.lines += 1;
        if let Some(rank) = self.classifier.rank(line) {
            self.hear(rank);
        }
        read.unstamped.get_or_insert(index);
        true
    }

    /// Applies the facts of the line at `index` of `chunk`; a line without a stamp of its own takes the
    /// last stamp of the lines passed by before it, and an exception line without its traceback's
    /// header takes the frames before it (see [`Self::recover_frames`]).
    fn apply_in_read(
        &mut self,
        chunk: &Chunk,
        index: usize,
        line: &str,
        facts: LineFacts,
        read: &mut ReadState,
    ) {
        if facts.timestamp.is_none() {
            self.settle_stamps(chunk, read.unstamped.take(), index);
        } else {
            read.unstamped = None;
        }
        if let LineKind::Record(record) = &facts.kind
            && let Record::ExceptionLine { exception, .. } = record.as_ref()
            && !exception.ends_with("Warning")
            && !self.open.tracebacks.contains_key(&facts.rank)
        {
            let time = self.time_of(&facts);
            self.recover_frames(chunk, index, facts.rank, time, read.settled);
        }
        let kept = self.digest.evidence.len();
        self.apply(line, facts);
        if self.digest.evidence.len() > kept {
            read.settled = index + 1;
        }
    }

    /// Keeps as evidence the frames of a traceback whose header the reads do not hold (an excerpt or
    /// a log that starts inside it, a collector that cut it): the lines of the exception's rank just
    /// before its exception line that read as frames (indented code, `File "..."`, a caret line), at
    /// most [`MAX_TRACEBACK_LINES`] and none before `settled` (the last line kept). When nothing of
    /// the read was kept before the exception, the look-back goes on into the end of the read before
    /// (`OpenState::unsettled_tail`), so that where a read began does not matter. The signatures'
    /// contexts (a backward pass, a DataLoader worker) are then seen beside the exception.
    fn recover_frames(
        &mut self,
        chunk: &Chunk,
        index: usize,
        rank: Option<u32>,
        time: DateTime<Utc>,
        settled: usize,
    ) {
        let from = settled.max(index.saturating_sub(MAX_TRACEBACK_LINES));
        let here = chunk
            .spans
            .get(from..index)
            .unwrap_or_default()
            .iter()
            .rev()
            .map(|line| chunk.text.get(line.0..line.1).unwrap_or_default());
        // The read's own lines reach back to its start: the read before may hold more of the frames.
        let before = (from == 0).then_some(&self.open.unsettled_tail);
        let earlier = before
            .into_iter()
            .flat_map(|tail| tail.iter().rev().map(String::as_str));
        let mut frames = Vec::new();
        for raw in here.chain(earlier) {
            if frames.len() >= MAX_TRACEBACK_LINES {
                break;
            }
            let framed = self.classifier.frame(raw);
            if framed.rank != rank {
                continue;
            }
            let message = framed.message.trim_end();
            if message.trim_start().is_empty() || !is_frame(message) {
                break;
            }
            frames.push(keep_ends(message, MAX_EVIDENCE_CHARS));
        }
        if from == 0 {
            // Taken, or cut off by a line that is no frame: nothing before it is looked at again.
            self.open.unsettled_tail.clear();
        }
        for text in frames.into_iter().rev() {
            self.digest.evidence.push(EvidenceLine { time, rank, text });
        }
    }

    /// Remembers the read's last lines after the last one kept (`settled`), at most
    /// [`MAX_TRACEBACK_LINES`], for the frame look-back of the next read: with what was remembered
    /// before when the read kept nothing and was shorter than that.
    fn keep_unsettled_tail(&mut self, chunk: &Chunk, settled: usize) {
        let count = chunk.line_count();
        let from = settled.max(count.saturating_sub(MAX_TRACEBACK_LINES));
        let tail = &mut self.open.unsettled_tail;
        if from > 0 {
            tail.clear();
        }
        for line in chunk.spans.get(from..count).unwrap_or_default() {
            tail.push_back(
                chunk
                    .text
                    .get(line.0..line.1)
                    .unwrap_or_default()
                    .to_string(),
            );
            if tail.len() > MAX_TRACEBACK_LINES {
                tail.pop_front();
            }
        }
    }

    /// Sets the last time from the lines `from..to` of `chunk`, passed by unframed: the stamp of the
    /// latest that has one, as if each had been applied in turn.
    fn settle_stamps(&mut self, chunk: &Chunk, from: Option<usize>, to: usize) {
        let Some(from) = from else {
            return;
        };
        let stamped = chunk
            .spans
            .get(from..to)
            .unwrap_or_default()
            .iter()
            .rev()
            .find_map(|&(start, end)| self.classifier.stamp(chunk.text.get(start..end)?));
        self.digest.last_time = Some(stamped.or(self.digest.last_time).unwrap_or(self.now));
    }

    /// When a line was written: its own stamp, else the last line's, else now.
    fn time_of(&self, facts: &LineFacts) -> DateTime<Utc> {
        facts
            .timestamp
            .or(self.digest.last_time)
            .unwrap_or(self.now)
    }

    /// Takes in one line by its facts, in order.
    fn apply(&mut self, raw: &str, facts: LineFacts) {
        self.digest.lines += 1;
        if let Some(rank) = facts.rank {
            self.hear(rank);
        }
        let message = facts.message(raw);
        let time = self.time_of(&facts);
        self.digest.last_time = Some(time);
        // Only a traceback start, or a line while one is open, concerns the assembler.
        if self.open.assembler.open_blocks() > 0 || facts.traceback_marker {
            let framed = FramedLine {
                rank: facts.rank,
                timestamp: facts.timestamp,
                message,
            };
            if let Some(block) = self.open.assembler.push_framed(&framed) {
                self.digest.tracebacks.push(block);
            }
            while let Some(block) = self.open.assembler.pop_ready() {
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
            LineKind::IbPort(field) => {
                if let Some(found) = self.open.ib_port.feed(field) {
                    self.digest
                        .evidence
                        .push(evidence_line(time, facts.rank, &found));
                }
                None
            }
            LineKind::Other => None,
        };
        if matches!(record, Some(Record::TrainingDone)) {
            self.open.loss_not_finite = None;
        }
        let notable = match record {
            Some(Record::TracebackStart) => {
                self.open.tracebacks.insert(facts.rank, 0);
                true
            }
            Some(Record::ExceptionLine { .. }) => {
                self.open.tracebacks.remove(&facts.rank);
                true
            }
            Some(Record::Error { .. }) => true,
            Some(Record::Iteration {
                iteration,
                tflops_per_gpu,
                loss,
                nan_or_inf,
                ..
            }) => {
                // The first progress line of a run of them whose loss is NaN or infinite, when a
                // signature reads it (its classification asked), says the training diverged; the ones
                // after it say the same.
                if loss.is_none() && nan_or_inf {
                    if facts.notable && self.open.loss_not_finite.is_none() {
                        self.loss_index = self.digest.evidence.len();
                        self.open.loss_not_finite = Some(evidence_line(time, facts.rank, message));
                    }
                } else {
                    self.open.loss_not_finite = None;
                }
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
            _ => match (!self.open.tracebacks.is_empty())
                .then(|| self.open.tracebacks.get_mut(&facts.rank))
                .flatten()
            {
                Some(kept) if *kept < MAX_TRACEBACK_LINES => {
                    *kept += 1;
                    true
                }
                // Kept as much of it as a traceback keeps: the rest of its lines go by as any.
                Some(_) => {
                    self.open.tracebacks.remove(&facts.rank);
                    facts.notable
                }
                None => facts.notable,
            },
        };
        if notable {
            self.digest
                .evidence
                .push(evidence_line(time, facts.rank, message));
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

    /// Continues what a previous read of the same log left open.
    pub fn resume(mut self, open: OpenState) -> Self {
        self.open = open;
        self
    }

    /// What the lines taught, everything left open settled (the log is read to its end).
    pub fn finish(mut self) -> LogDigest {
        if let Some(line) = self.open.loss_not_finite.take() {
            // In its place among the evidence.
            let index = self.loss_index.min(self.digest.evidence.len());
            self.digest.evidence.insert(index, line);
        }
        let time = self.digest.last_time.unwrap_or(self.now);
        self.digest.evidence.extend(self.open.close_ib_port(time));
        self.digest.tracebacks.extend(self.open.assembler.flush());
        self.digest
    }

    /// What the lines taught, with what they left open handed back for the next read of the log.
    pub fn finish_keeping(self) -> (LogDigest, OpenState) {
        (self.digest, self.open)
    }
}

/// A line kept as evidence: its message, its ends kept when it is longer than evidence holds.
fn evidence_line(time: DateTime<Utc>, rank: Option<u32>, message: &str) -> EvidenceLine {
    EvidenceLine {
        time,
        rank,
        text: keep_ends(message.trim_end(), MAX_EVIDENCE_CHARS),
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

    #[test]
    fn a_quiet_line_s_stamp_dates_the_unstamped_line_after_it_and_the_end_of_the_read() {
        let at = |text: &str| {
            DateTime::parse_from_rfc3339(text)
                .unwrap()
                .with_timezone(&Utc)
        };
        let chunk = Chunk::of_text(
            " 3: [2026-01-05 08:00:00] a\n 4: [2026-01-05 08:00:07] b\n 5: Xid boom\n[2026-01-05 08:00:09] c\nplain d\n",
        );
        let marks = [
            Mark::Quiet,
            Mark::Quiet,
            Mark::Candidate,
            Mark::Quiet,
            Mark::Quiet,
        ];
        let now = at("2026-01-06T00:00:00Z");
        let mut digester = Digester::new(|line: &str| line.contains("Xid"), now, None, None);
        digester.push_chunk(&chunk, &marks);
        let digest = digester.finish();
        assert_eq!(digest.lines, 5);
        assert_eq!(digest.ranks_heard, vec![3, 4, 5]);
        assert_eq!(digest.evidence.len(), 1);
        assert_eq!(digest.evidence[0].time, at("2026-01-05T08:00:07Z"));
        assert_eq!(digest.last_time, Some(at("2026-01-05T08:00:09Z")));
    }

    #[test]
    fn the_frames_before_an_exception_line_whose_header_is_cut_off_are_kept_beside_it() {
        let now = DateTime::parse_from_rfc3339("2026-01-05T09:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let chunk = Chunk::of_text(concat!(
            "[rank0]: step 9 done\n",
            "[rank1]:   File \"/torch/_tensor.py\", line 521, in backward\n",
            "[rank1]:     return Variable._execution_engine.run_backward(\n",
            "[rank0]:     an indented line of another rank\n",
            "[rank1]:            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n",
            "[rank1]: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB.\n",
            "    indented, before a warning\n",
            "FutureWarning: a warning is not an error\n",
        ));
        let mut digester =
            Digester::new(|line: &str| line.contains("out of memory"), now, None, None);
        digester.push_chunk(&chunk, &vec![Mark::Candidate; chunk.line_count()]);
        let evidence: Vec<(Option<u32>, String)> = digester
            .finish()
            .evidence
            .into_iter()
            .map(|line| (line.rank, line.text))
            .collect();
        let texts: Vec<&str> = evidence.iter().map(|(_, text)| text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "  File \"/torch/_tensor.py\", line 521, in backward",
                "    return Variable._execution_engine.run_backward(",
                "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
                "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 3.91 GiB.",
                "FutureWarning: a warning is not an error",
            ]
        );
        assert!(evidence[..4].iter().all(|(rank, _)| *rank == Some(1)));
    }

    #[test]
    fn the_first_progress_line_of_a_lasting_run_of_losses_that_are_not_finite_is_kept() {
        let now = DateTime::parse_from_rfc3339("2026-01-05T09:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let iteration = |n: u32, loss: &str, nan_iterations: u32| {
            format!(
                "iteration {n:>8}/      500 | elapsed time per iteration (ms): 2991.0 | lm loss: {loss} | loss scale: 1.0 | number of nan iterations: {nan_iterations:>3} |"
            )
        };
        let kept = |lines: &[String], notable: fn(&str) -> bool| -> Vec<String> {
            let chunk = Chunk::of_text(&(lines.join("\n") + "\n"));
            let mut digester = Digester::new(notable, now, None, None);
            digester.push_chunk(&chunk, &vec![Mark::Candidate; chunk.line_count()]);
            let digest = digester.finish();
            digest.evidence.iter().map(|l| l.text.clone()).collect()
        };
        let mut lines = vec![
            iteration(228, "2.5E+00", 0),
            // A NaN iteration counted while the loss reported stays finite: the step was skipped.
            iteration(229, "2.5E+00", 1),
            // A NaN loss the next report recovers from: skipped steps, not a divergence.
            iteration(230, "nan", 0),
            iteration(231, "2.4E+00", 0),
            iteration(232, "nan", 0),
            iteration(233, "nan", 0),
            "RuntimeError: the run stopped".to_string(),
        ];
        // The same lines, each in a read of its own: a read that ends on a NaN loss leaves it open.
        let kept_in_reads = |lines: &[String], notable: fn(&str) -> bool| -> Vec<String> {
            let mut open = OpenState::default();
            let mut evidence = Vec::new();
            for line in lines {
                let chunk = Chunk::of_text(&format!("{line}\n"));
                let mut digester = Digester::new(notable, now, None, None).resume(open);
                digester.push_chunk(&chunk, &[Mark::Candidate]);
                let (digest, left) = digester.finish_keeping();
                evidence.extend(digest.evidence);
                open = left;
            }
            evidence.extend(
                Digester::new(notable, now, None, None)
                    .resume(open)
                    .finish()
                    .evidence,
            );
            evidence.into_iter().map(|l| l.text).collect()
        };
        let with_nan = |line: &str| line.contains("nan") || line.contains("Error");
        let evidence = kept(&lines, with_nan);
        assert_eq!(evidence.len(), 2, "{evidence:#?}");
        let mut in_reads = kept_in_reads(&lines, with_nan);
        in_reads.sort();
        let mut at_once = evidence.clone();
        at_once.sort();
        assert_eq!(in_reads, at_once);
        // The first of the run that lasts, in its place before the error.
        assert!(
            evidence[0].starts_with("iteration      232/"),
            "{evidence:#?}"
        );
        assert!(evidence[1].starts_with("RuntimeError"), "{evidence:#?}");
        // A signature that does not read the line keeps it out.
        assert_eq!(kept(&lines, |line| line.contains("Error")).len(), 1);
        // The training's normal end after a NaN report: it finished, nothing diverged.
        lines.pop();
        lines.push("[after training is done] datetime: 2024-07-30 18:00:00".to_string());
        assert!(kept(&lines, with_nan).is_empty());
        assert!(kept_in_reads(&lines, with_nan).is_empty());
        // A log that goes quiet on a NaN loss keeps it, when the engine settles what it left open.
        lines.pop();
        let chunk = Chunk::of_text(&(lines.join("\n") + "\n"));
        let mut digester = Digester::new(with_nan, now, None, None);
        digester.push_chunk(&chunk, &vec![Mark::Candidate; chunk.line_count()]);
        let (digest, mut open) = digester.finish_keeping();
        assert!(digest.evidence.is_empty(), "{:#?}", digest.evidence);
        let (_, settled) = open.settle(now);
        assert_eq!(settled.len(), 1);
        assert!(settled[0].text.starts_with("iteration      232/"));
    }
}
