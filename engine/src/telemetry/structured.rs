//! Records of NVIDIA's training-telemetry client library (`training_telemetry`,
//! the AJR "Training Telemetry Client Library"), in both of its text forms:
//!
//! * the logger backend, one Python-logging line per record, keys flattened with
//!   dots, sorted in reverse, joined by ` | ` and bracketed:
//!   `[type=event | pid=7 | name=training_loop | id=… | event.timestamp=… |
//!   event.name=training_iterations | event.metrics.tflops=386.7 |
//!   event.metrics.current_iteration=200 | count=12]`; whatever the logging
//!   format puts before the `[` is ignored;
//! * the file backend, one JSON object per line with the same nesting:
//!   `{"type":"event","name":"training_loop","event":{"name":"training_iterations",
//!   "metrics":{"current_iteration":200,"tflops":386.7}},"count":12,"pid":7}`.
//!
//! In both, string metrics and error fields are JSON-encoded strings
//! (`checkpoint_directory="/ckpt/x"`, `error_message="boom"`), so a `|` or `]`
//! inside them is quoted; they are decoded once more here.
//!
//! The names read, as the library spells them (matched case-insensitively, so the
//! guide's upper-case enum names `CHECKPOINT_SAVE_SYNC` work too):
//!
//! | field | values used |
//! | --- | --- |
//! | `type` | `start`, `stop`, `complete` (a start and stop with nothing between), `event`, `error` |
//! | `name` (span) | `training_loop`, `checkpoint_save_sync`, `checkpoint_save_async`, `checkpoint_save_finalization`, `checkpoint_load`, … |
//! | `event.name` | `training_iterations` (progress), `error` |
//! | metrics | `current_iteration`, `num_iterations`, `tflops`, `loss`, `average_iteration_time`, `checkpoint_directory`, `checkpoint_type` |
//! | error | `error_message`, `exception_type`, `exception_message`, `exception_traceback` |
//!
//! A `complete` record carries `start_event.*` and `stop_event.*`; the others carry `event.*`.
//!
//! What becomes a [`Record`]:
//! * a `training_iterations` event with `current_iteration` → [`Record::Iteration`]; `tflops`
//!   is taken as TFLOP/s per GPU, `average_iteration_time` as seconds (the library's own
//!   durations are seconds; `average_iteration_time_ms` is read as milliseconds);
//!   `num_iterations` counts iterations since the last report, so it is not a total;
//! * the end of a `checkpoint_save_sync` or `checkpoint_save_finalization` span →
//!   [`Record::CheckpointSaved`]. A `complete` record proves nothing failed inside the span;
//!   a `stop` record (something was recorded in between, perhaps an error) counts only when
//!   it carries the checkpoint metrics, which the library adds after the write succeeded.
//!   `checkpoint_save_async` only times the blocking part, so its end is not a save;
//! * the end of a `checkpoint_load` span → [`Record::CheckpointLoaded`];
//! * an `error` record → [`Record::Error`] with the exception first, bounded in length;
//!   the full stack trace is in [`TelemetryError::traceback`].

use crate::text::clip;
use std::borrow::Cow;
use std::sync::LazyLock;

use serde_json::Value;

use super::record::{Record, whole_number};

/// Longest error text put into a [`Record::Error`].
const MAX_ERROR_TEXT_BYTES: usize = 4096;

/// Longest stack trace kept from one error record.
const MAX_TRACEBACK_BYTES: usize = 64 * 1024;

/// What kind of record the library wrote (`type=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    /// A span started and something else was recorded before it stopped.
    Start,
    /// A span stopped after other records; carries the stop event.
    Stop,
    /// A span started and stopped with nothing recorded in between.
    Complete,
    /// An event inside a span, such as `training_iterations`.
    Event,
    /// An error inside a span, with the exception when there was one.
    Error,
}

impl RecordKind {
    fn parse(text: &str) -> Option<Self> {
        const KINDS: [(&str, RecordKind); 5] = [
            ("start", RecordKind::Start),
            ("stop", RecordKind::Stop),
            ("complete", RecordKind::Complete),
            ("event", RecordKind::Event),
            ("error", RecordKind::Error),
        ];
        KINDS
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(text.trim()))
            .map(|&(_, kind)| kind)
    }
}

/// The metrics runguard reads from a record's event.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TelemetryMetrics {
    /// `current_iteration`.
    pub current_iteration: Option<u64>,
    /// `num_iterations`: iterations since the last report (training) or in the loop.
    pub num_iterations: Option<u64>,
    /// `tflops`, taken as TFLOP/s per GPU.
    pub tflops: Option<f64>,
    /// `loss`, which may be NaN or infinite.
    pub loss: Option<f64>,
    /// Average wall time of one iteration, in milliseconds.
    pub average_iteration_ms: Option<f64>,
    /// `checkpoint_directory`.
    pub checkpoint_directory: Option<String>,
    /// `checkpoint_type`: `global` or `local`.
    pub checkpoint_type: Option<String>,
}

impl TelemetryMetrics {
    fn has_checkpoint_fields(&self) -> bool {
        self.current_iteration.is_some() || self.checkpoint_directory.is_some()
    }
}

/// The error part of an `error` record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TelemetryError {
    /// `error_message`, the application's own words.
    pub error_message: String,
    /// `exception_type`, e.g. `RuntimeError`.
    pub exception_type: Option<String>,
    /// `exception_message`.
    pub exception_message: Option<String>,
    /// `exception_traceback` with real newlines, cut to 64 KiB.
    pub traceback: Option<String>,
}

/// One record of the training-telemetry library.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryRecord {
    /// `type`.
    pub kind: RecordKind,
    /// Span name (`name`), as written.
    pub span: String,
    /// `event.name` of an event or error record.
    pub event: Option<String>,
    /// Metrics of the record's event (for `complete`: the stop event's, then the start event's).
    pub metrics: TelemetryMetrics,
    /// Present on `error` records.
    pub error: Option<TelemetryError>,
}

impl TelemetryRecord {
    /// The [`Record`] this telemetry record stands for, if any.
    pub fn to_record(&self) -> Option<Record> {
        let span = self.span.as_str();
        let is_span = |name: &str| span.eq_ignore_ascii_case(name);
        let ended = matches!(self.kind, RecordKind::Stop | RecordKind::Complete);
        match self.kind {
            RecordKind::Event
                if self
                    .event
                    .as_deref()
                    .is_some_and(|e| e.eq_ignore_ascii_case("training_iterations")) =>
            {
                self.iteration()
            }
            RecordKind::Error => Some(Record::Error {
                text: self.error_text(),
            }),
            _ if ended
                && (is_span("checkpoint_save_sync") || is_span("checkpoint_save_finalization")) =>
            {
                let proven =
                    self.kind == RecordKind::Complete || self.metrics.has_checkpoint_fields();
                proven.then(|| Record::CheckpointSaved {
                    iteration: self.metrics.current_iteration,
                    path: self.metrics.checkpoint_directory.clone(),
                })
            }
            _ if ended && is_span("checkpoint_load") => Some(Record::CheckpointLoaded {
                iteration: self.metrics.current_iteration,
                path: self.metrics.checkpoint_directory.clone(),
            }),
            _ => None,
        }
    }

    fn iteration(&self) -> Option<Record> {
        let metrics = &self.metrics;
        let iteration = metrics.current_iteration?;
        let (loss, nan_or_inf) = match metrics.loss {
            Some(loss) if !loss.is_finite() => (None, true),
            other => (other, false),
        };
        Some(Record::Iteration {
            iteration,
            total: None,
            elapsed_ms: metrics.average_iteration_ms,
            tflops_per_gpu: metrics.tflops,
            loss,
            nan_or_inf,
            consumed_samples: None,
            loss_scale: None,
            skipped_iterations: None,
            nan_iterations: None,
        })
    }

    /// `RuntimeError: boom (in span checkpoint_save_sync: Error in ...)`, bounded.
    fn error_text(&self) -> String {
        let error = self.error.clone().unwrap_or_default();
        let context = if error.error_message.trim().is_empty() {
            format!("in span {}", self.span)
        } else {
            format!("in span {}: {}", self.span, error.error_message.trim())
        };
        let text = match (&error.exception_type, &error.exception_message) {
            (Some(kind), Some(message)) if !message.is_empty() => {
                format!("{kind}: {message} ({context})")
            }
            (Some(kind), _) => format!("{kind} ({context})"),
            (None, _) => format!("training telemetry error {context}"),
        };
        clip(&text, MAX_ERROR_TEXT_BYTES).to_string()
    }
}

/// Recognises a training-telemetry line as a [`Record`], if it stands for one.
pub fn recognise(message: &str) -> Option<Record> {
    parse(message)?.to_record()
}

/// Parses a training-telemetry line in either text form. Cheap for other
/// lines: a JSON parse only for lines that start with `{` and name a
/// `"type"`, a key=value parse only for lines holding `[type=`.
pub fn parse(message: &str) -> Option<TelemetryRecord> {
    let message = super::line::trim(message);
    if message.starts_with('{') {
        if !message.contains("\"type\"") {
            return None;
        }
        return parse_json(message);
    }
    parse_key_values(message)
}

fn parse_key_values(message: &str) -> Option<TelemetryRecord> {
    // Built once: a searcher built per call costs more than the search (a progress line with bars
    // comes here on every step).
    static TYPE: LazyLock<memchr::memmem::Finder<'static>> =
        LazyLock::new(|| memchr::memmem::Finder::new(b"[type="));
    let start = TYPE.find(message.as_bytes())?;
    let body = message.get(start + 1..)?;
    let end = body.rfind(']')?;
    let body = body.get(..end)?;
    let items: Vec<(&str, &str)> = split_outside_quotes(body)
        .filter_map(|item| {
            let (key, value) = item.split_once('=')?;
            let key = key.trim();
            let is_key = !key.is_empty()
                && key
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.');
            is_key.then_some((key, value.trim()))
        })
        .collect();
    build(|key| {
        items
            .iter()
            .find(|(k, _)| *k == key)
            .map(|&(_, v)| decode_text(v))
    })
}

fn parse_json(message: &str) -> Option<TelemetryRecord> {
    let value: Value = match serde_json::from_str(message) {
        Ok(value) => value,
        // Python's json writes bare NaN and Infinity, which JSON does not allow.
        Err(_) if message.contains("NaN") || message.contains("Infinity") => {
            serde_json::from_str(&quote_non_finite(message)).ok()?
        }
        Err(_) => return None,
    };
    value.as_object()?;
    build(|key| {
        let mut node = &value;
        for part in key.split('.') {
            node = node.get(part)?;
        }
        match node {
            Value::String(text) => Some(Cow::Owned(decode_text(text).into_owned())),
            Value::Number(number) => Some(Cow::Owned(number.to_string())),
            Value::Bool(flag) => Some(Cow::Owned(flag.to_string())),
            _ => None,
        }
    })
}

/// Builds a record from a lookup of dotted keys to decoded text.
fn build<'a>(get: impl Fn(&str) -> Option<Cow<'a, str>>) -> Option<TelemetryRecord> {
    let kind = RecordKind::parse(&get("type")?)?;
    let span = get("name")?.into_owned();
    let prefixes: &[&str] = if kind == RecordKind::Complete {
        &["stop_event", "start_event"]
    } else {
        &["event"]
    };
    let field = |name: &str| {
        prefixes
            .iter()
            .find_map(|prefix| get(&format!("{prefix}.{name}")))
    };
    let metric = |name: &str| field(&format!("metrics.{name}"));
    let number = |name: &str| metric(name).and_then(|v| v.trim().parse::<f64>().ok());
    let count = |name: &str| metric(name).and_then(|v| whole_number(&v));
    let average_iteration_ms = number("average_iteration_time_ms")
        .or_else(|| number("average_iteration_time").map(|seconds| seconds * 1000.0))
        .filter(|ms| ms.is_finite() && *ms >= 0.0);
    let metrics = TelemetryMetrics {
        current_iteration: count("current_iteration"),
        num_iterations: count("num_iterations"),
        tflops: number("tflops").filter(|t| t.is_finite()),
        loss: number("loss"),
        average_iteration_ms,
        checkpoint_directory: metric("checkpoint_directory").map(Cow::into_owned),
        checkpoint_type: metric("checkpoint_type").map(Cow::into_owned),
    };
    let error = (kind == RecordKind::Error).then(|| TelemetryError {
        error_message: field("error_message")
            .map(Cow::into_owned)
            .unwrap_or_default(),
        exception_type: field("exception_type").map(Cow::into_owned),
        exception_message: field("exception_message").map(Cow::into_owned),
        traceback: field("exception_traceback").map(|t| clip(&t, MAX_TRACEBACK_BYTES).to_string()),
    });
    Some(TelemetryRecord {
        kind,
        span,
        event: field("name").map(Cow::into_owned),
        metrics,
        error,
    })
}

/// Splits `a=1 | b="x | y" | c=2` on the bars that are not inside double quotes.
fn split_outside_quotes(body: &str) -> impl Iterator<Item = &str> {
    let mut rest = Some(body);
    std::iter::from_fn(move || {
        let text = rest?;
        let mut in_quotes = false;
        let mut escaped = false;
        for (at, byte) in text.bytes().enumerate() {
            match byte {
                _ if escaped => escaped = false,
                b'\\' if in_quotes => escaped = true,
                b'"' => in_quotes = !in_quotes,
                b'|' if !in_quotes => {
                    rest = text.get(at + 1..);
                    return text.get(..at);
                }
                _ => {}
            }
        }
        rest = None;
        Some(text)
    })
}

/// A value as written, with one layer of JSON string quoting removed when present.
fn decode_text(value: &str) -> Cow<'_, str> {
    let value = value.trim();
    if value.len() >= 2
        && value.starts_with('"')
        && value.ends_with('"')
        && let Ok(decoded) = serde_json::from_str::<String>(value)
    {
        return Cow::Owned(decoded);
    }
    Cow::Borrowed(value)
}

/// Puts quotes around bare `NaN`, `Infinity` and `-Infinity` outside strings.
fn quote_non_finite(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 16);
    let mut in_string = false;
    let mut escaped = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if !in_string
            && let Some(word) = ["-Infinity", "Infinity", "NaN"]
                .into_iter()
                .find(|word| rest.starts_with(word))
        {
            out.push('"');
            out.push_str(word);
            out.push('"');
            rest = &rest[word.len()..];
            continue;
        }
        match c {
            _ if escaped => escaped = false,
            '\\' if in_string => escaped = true,
            '"' => in_string = !in_string,
            _ => {}
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::line::frame_with_year;
    use super::*;

    fn recognise_log(log: &str) -> Vec<Option<Record>> {
        log.lines()
            .map(|line| super::super::record::recognise(frame_with_year(line, 2026).message))
            .collect()
    }

    fn step(iteration: u64, tflops: Option<f64>, loss: Option<f64>, nan: bool) -> Option<Record> {
        Some(Record::Iteration {
            iteration,
            total: None,
            elapsed_ms: None,
            tflops_per_gpu: tflops,
            loss,
            nan_or_inf: nan,
            consumed_samples: None,
            loss_scale: None,
            skipped_iterations: None,
            nan_iterations: None,
        })
    }

    #[test]
    fn training_iterations_event_becomes_an_iteration_with_tflops() {
        let line = "2025-07-30 14:21:44,123 - training_telemetry - INFO - [type=event | pid=4242 | name=training_loop | id=0b6c | event.timestamp=2025-07-30T14:21:44.120000+00:00 | event.name=training_iterations | event.metrics.tflops=386.7 | event.metrics.num_iterations=10 | event.metrics.loss=2.5 | event.metrics.interval=10 | event.metrics.current_iteration=200 | event.metrics.average_iteration_time=2.9869 | count=12]";
        let record = super::super::record::recognise(frame_with_year(line, 2026).message);
        let Some(Record::Iteration {
            iteration,
            tflops_per_gpu,
            loss,
            elapsed_ms,
            total,
            nan_or_inf,
            ..
        }) = record
        else {
            panic!("expected an iteration, got {record:?}");
        };
        assert_eq!(iteration, 200);
        assert_eq!(tflops_per_gpu, Some(386.7));
        assert_eq!(loss, Some(2.5));
        assert_eq!(total, None);
        assert!(!nan_or_inf);
        assert!(elapsed_ms.is_some_and(|ms| (ms - 2986.9).abs() < 1e-6));
    }

    #[test]
    fn recognises_the_key_value_fixture() {
        let records = recognise_log(include_str!(
            "../../../tests/fixtures/logs/training_telemetry_logger.log"
        ));
        assert_eq!(
            records,
            vec![
                None,
                None,
                None,
                Some(Record::CheckpointLoaded {
                    iteration: Some(100),
                    path: Some("/ckpt/llama/iter_0000100".to_string()),
                }),
                Some(Record::Iteration {
                    iteration: 110,
                    total: None,
                    elapsed_ms: Some(2500.0),
                    tflops_per_gpu: Some(386.7),
                    loss: Some(2.41),
                    nan_or_inf: false,
                    consumed_samples: None,
                    loss_scale: None,
                    skipped_iterations: None,
                    nan_iterations: None,
                }),
                step(120, Some(385.9), None, true),
                None,
                Some(Record::CheckpointSaved {
                    iteration: Some(120),
                    path: Some("/ckpt/llama/iter_0000120".to_string()),
                }),
                None,
                None,
                Some(Record::CheckpointSaved {
                    iteration: Some(130),
                    path: Some("/ckpt/llama/iter | odd]name".to_string()),
                }),
                Some(Record::Error {
                    text: "OSError: [Errno 28] No space left on device: '/ckpt/llama/iter_0000140' (in span checkpoint_save_sync: Error in SpanName.CHECKPOINT_SAVE_SYNC:)".to_string(),
                }),
                None,
                Some(Record::Error {
                    text: "RuntimeError: NCCL error | unhandled system error (in span main_function: Error in SpanName.MAIN_FUNCTION:)".to_string(),
                }),
            ]
        );
    }

    #[test]
    fn recognises_the_json_fixture() {
        let records = recognise_log(include_str!(
            "../../../tests/fixtures/logs/training_telemetry_file.jsonl"
        ));
        assert_eq!(
            records,
            vec![
                None,
                step(50, Some(100.0), Some(0.69), false),
                step(60, Some(99.5), None, true),
                Some(Record::CheckpointSaved {
                    iteration: Some(60),
                    path: Some("/tmp/tmpab12/ckpt".to_string()),
                }),
                None,
                Some(Record::CheckpointSaved {
                    iteration: Some(70),
                    path: None,
                }),
                Some(Record::Error {
                    text: "ValueError: loss is nan (in span training_loop: Error in SpanName.TRAINING_LOOP:)".to_string(),
                }),
                None,
            ]
        );
    }

    #[test]
    fn error_record_keeps_the_decoded_stack_trace() {
        let line = r#"[type=error | pid=1 | name=checkpoint_save_sync | id=9 | event.timestamp=2025-07-30T14:21:44+00:00 | event.name=error | event.exception_type="OSError" | event.exception_traceback="Traceback (most recent call last):\n  File \"train.py\", line 9, in save\n    torch.save(x, p)\nOSError: [Errno 28] No space left on device" | event.exception_message="[Errno 28] No space left on device" | event.error_message="Error in save" | count=3]"#;
        let record = parse(line).unwrap();
        let error = record.error.unwrap();
        assert_eq!(error.exception_type.as_deref(), Some("OSError"));
        let traceback = error.traceback.unwrap();
        assert_eq!(traceback.lines().count(), 4);
        assert!(traceback.starts_with("Traceback (most recent call last):\n  File \"train.py\""));
    }

    #[test]
    fn error_text_is_bounded() {
        let message = "x".repeat(10_000);
        let line = format!(
            "[type=error | name=training_loop | event.name=error | event.exception_type=\"RuntimeError\" | event.exception_message=\"{message}\" | event.error_message=\"e\" | count=1]"
        );
        let Some(Record::Error { text }) = recognise(&line) else {
            panic!("expected an error");
        };
        assert_eq!(text.len(), MAX_ERROR_TEXT_BYTES);
        assert!(text.starts_with("RuntimeError: xxx"));
    }

    #[test]
    fn async_save_span_end_is_not_a_finished_save() {
        let line = "[type=complete | stop_event.name=span_stop | stop_event.metrics.current_iteration=300 | start_event.name=span_start | pid=1 | name=checkpoint_save_async | id=1 | elapsed=0.2 | count=9]";
        assert_eq!(parse(line).map(|r| r.kind), Some(RecordKind::Complete));
        assert_eq!(recognise(line), None);
    }

    #[test]
    fn save_span_stopped_after_other_records_needs_checkpoint_metrics() {
        let without = "[type=stop | pid=1 | name=checkpoint_save_sync | id=1 | event.name=span_stop | elapsed=1.5 | count=9]";
        assert_eq!(recognise(without), None);
        let with = "[type=stop | pid=1 | name=checkpoint_save_sync | id=1 | event.name=span_stop | event.metrics.current_iteration=400 | elapsed=1.5 | count=9]";
        assert_eq!(
            recognise(with),
            Some(Record::CheckpointSaved {
                iteration: Some(400),
                path: None
            })
        );
    }

    #[test]
    fn upper_case_span_and_kind_names_are_accepted() {
        let line = "[type=COMPLETE | name=CHECKPOINT_LOAD | stop_event.metrics.current_iteration=5 | count=1]";
        assert_eq!(
            recognise(line),
            Some(Record::CheckpointLoaded {
                iteration: Some(5),
                path: None
            })
        );
    }

    #[test]
    fn iterations_event_without_an_iteration_number_is_not_progress() {
        let line = "[type=event | name=training_loop | event.name=training_iterations | event.metrics.tflops=100 | count=1]";
        assert_eq!(parse(line).unwrap().metrics.tflops, Some(100.0));
        assert_eq!(recognise(line), None);
    }

    #[test]
    fn lines_that_only_resemble_telemetry_are_ignored() {
        for line in [
            "iteration 10/ 100 | lm loss: 2.0 |",
            "[type= | name=x | count=1]",
            "[type=unknown | name=x | count=1]",
            "[type=event | count=1]",
            "[type=event | name=x",
            "{\"type\": 3}",
            "{\"type\": \"event\", \"name\": \"training_loop\"",
            "{not json \"type\"}",
            "[]",
            "{}",
        ] {
            assert_eq!(recognise(line), None, "{line}");
        }
    }

    #[test]
    fn quotes_bare_non_finite_numbers_but_not_inside_strings() {
        assert_eq!(
            quote_non_finite(r#"{"a":NaN,"b":-Infinity,"c":"NaN \" Infinity","d":[Infinity]}"#),
            r#"{"a":"NaN","b":"-Infinity","c":"NaN \" Infinity","d":["Infinity"]}"#
        );
    }

    #[test]
    fn never_panics_on_truncated_telemetry_lines() {
        let text = [
            include_str!("../../../tests/fixtures/logs/training_telemetry_logger.log"),
            include_str!("../../../tests/fixtures/logs/training_telemetry_file.jsonl"),
        ];
        for line in text.iter().flat_map(|t| t.lines()) {
            for (at, _) in line.char_indices() {
                let _ = parse(&line[..at]);
                let _ = parse(&line[at..]);
            }
        }
        let _ = parse("[type=\"");
        let _ = parse("{\"type\":NaN");
        let _ = parse(&format!(
            "[type=event | name={} | count=1]",
            "\\".repeat(1000)
        ));
    }
}
