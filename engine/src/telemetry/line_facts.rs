//! What one line of a log is, found from the line alone: its frame, what the recognisers make of it and
//! whether it is notable. The digest then applies the facts in order, with what the lines before taught
//! (open tracebacks, the last stamp); the facts of a read's lines can so be found on any thread.

use chrono::{DateTime, Datelike, Utc};

use crate::attribute::scan::Mark;
use crate::telemetry::ib_port;
use crate::telemetry::line::{FramedLine, StampCache, frame_cached, frame_with_year, rank_of};
use crate::telemetry::pipeline::{TRACEBACK_MARKERS, blamed_host};
use crate::telemetry::readings::{self, Reading};
use crate::telemetry::record::{Record, is_save_start, recognise_hinted};
use crate::telemetry::step_timing::{self, StepTiming};
use crate::telemetry::straggler_report::{self, StragglerReport};
use crate::telemetry::tail::Chunk;

/// One line's facts.
#[derive(Debug, Clone, PartialEq)]
pub struct LineFacts {
    pub rank: Option<u32>,
    pub timestamp: Option<DateTime<Utc>>,
    /// Where the message (the line after its labels and stamp) starts in the line; it runs to the
    /// line's end, newlines left out.
    pub message_start: usize,
    pub message_len: usize,
    /// The line holds a traceback's start, which the assembler is shown.
    pub traceback_marker: bool,
    pub kind: LineKind,
    /// Whether the line is evidence when no open traceback holds its rank: it blames a host or a
    /// signature matches it (only for lines the recognisers did not claim).
    pub notable: bool,
}

/// What the recognisers made of a line.
#[derive(Debug, Clone, PartialEq)]
pub enum LineKind {
    Straggler(StragglerReport),
    /// Boxed: most lines are not records, and facts of a whole read are kept at once.
    Record(Box<Record>),
    /// A checkpoint save announced, not yet confirmed.
    SaveStart,
    /// A progress line no other recogniser claims that says how long its step took.
    Step(StepTiming),
    /// Numbers a tool printed about the hardware or the input pipeline (temperatures, data waits,
    /// per-device throughput).
    Readings(Vec<Reading>),
    /// A line of an `ibstat` port section.
    IbPort(ib_port::Field),
    Other,
}

impl LineFacts {
    /// The message, in the line the facts were found in.
    pub fn message<'l>(&self, line: &'l str) -> &'l str {
        line.get(self.message_start..self.message_start + self.message_len)
            .unwrap_or_default()
    }
}

/// Finds lines' facts; `notable` is the signature catalog's prefilter.
pub struct LineClassifier<F: Fn(&str) -> bool> {
    notable: F,
    year: i32,
    /// The previous line's stamp, reused while lines share it.
    stamps: StampCache,
}

impl<F: Fn(&str) -> bool> LineClassifier<F> {
    /// Year-less stamps are dated in `now`'s year.
    pub fn new(notable: F, now: DateTime<Utc>) -> Self {
        Self {
            notable,
            year: now.year(),
            stamps: StampCache::default(),
        }
    }

    /// The facts of every line of a read that is not quiet, `marks` as
    /// [`crate::telemetry::pipeline::Digester::push_chunk`] takes them; None for a quiet line, whose
    /// facts the digest finds only if it needs them.
    pub fn classify_chunk(&mut self, chunk: &Chunk, marks: &[Mark]) -> Vec<Option<LineFacts>> {
        chunk
            .lines()
            .enumerate()
            .map(
                |(index, line)| match marks.get(index).copied().unwrap_or(Mark::Candidate) {
                    Mark::Candidate => Some(self.classify(line, true, true)),
                    Mark::Plain => Some(self.classify(line, false, false)),
                    Mark::Quiet => None,
                },
            )
            .collect()
    }

    /// The rank a line's labels give (see [`rank_of`]).
    pub fn rank(&self, raw: &str) -> Option<u32> {
        rank_of(raw, self.year)
    }

    /// The line framed, year-less stamps dated in the classifier's year.
    pub fn frame<'l>(&self, raw: &'l str) -> FramedLine<'l> {
        frame_with_year(raw, self.year)
    }

    /// The time a line's stamp gives.
    pub fn stamp(&mut self, raw: &str) -> Option<DateTime<Utc>> {
        frame_cached(raw, self.year, &mut self.stamps).timestamp
    }

    /// One line's facts, with both whole-read hints: `candidate` (a signature may match) and `markers`
    /// (one of `pipeline::marker_literals` occurs in it).
    pub fn classify(&mut self, raw: &str, candidate: bool, markers: bool) -> LineFacts {
        let framed = frame_cached(raw, self.year, &mut self.stamps);
        let message = framed.message;
        // The message is a part of the line (frames only cut).
        let message_start = (message.as_ptr() as usize).wrapping_sub(raw.as_ptr() as usize);
        let traceback_marker = markers
            && TRACEBACK_MARKERS
                .iter()
                .any(|marker| message.contains(marker));
        let free = |message: &str| {
            // A blamed host's line holds `NCCL WARN` or `srun: error:`, both markers.
            (markers && blamed_host(message).is_some()) || (candidate && (self.notable)(message))
        };
        let (kind, notable) = match markers.then(|| straggler_report::parse(message)).flatten() {
            Some(report) => (LineKind::Straggler(report), false),
            None => match recognise_hinted(message, markers) {
                // A progress line is progress data, unless it reports a loss that is not finite
                // and a signature reads it as the training diverging.
                Some(
                    record @ (Record::CheckpointLoaded { .. }
                    | Record::TrainingDone
                    | Record::Iteration {
                        loss: None,
                        nan_or_inf: true,
                        ..
                    }),
                ) => (LineKind::Record(Box::new(record)), free(message)),
                Some(record) => (LineKind::Record(Box::new(record)), false),
                None if markers && is_save_start(message) => (LineKind::SaveStart, false),
                None => match markers.then(|| step_timing::parse(message)).flatten() {
                    Some(step) => (LineKind::Step(step), false),
                    None => match markers.then(|| ib_port::parse(message)).flatten() {
                        Some(field) => (LineKind::IbPort(field), free(message)),
                        None => match markers
                            .then(|| readings::parse(message))
                            .filter(|found| !found.is_empty())
                        {
                            Some(found) => (LineKind::Readings(found), free(message)),
                            None => (LineKind::Other, free(message)),
                        },
                    },
                },
            },
        };
        LineFacts {
            rank: framed.rank,
            timestamp: framed.timestamp,
            message_start,
            message_len: message.len(),
            traceback_marker,
            kind,
            notable,
        }
    }
}
