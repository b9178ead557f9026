//! Recognisers that turn one framed log message into a typed [`Record`].
//!
//! Nearly every line of a training log matches nothing, so the order is:
//! checks that look only at the start of the line, then a few whole-line
//! byte scans that let the uninteresting lines go, and only then the
//! per-format parsers and regexes.
//!
//! Lines of NVIDIA's training-telemetry library go to [`super::structured`].
//! A checkpoint save counts only once it has finished: where a framework
//! announces a save and later confirms it (Megatron, NeMo async, torchtitan),
//! only the confirmation is a [`Record::CheckpointSaved`]; where the
//! announcement is all it prints (Lightning, a plain `Saving checkpoint`), the
//! announcement is. Loads count when they start and when they finish.

use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::structured;

/// What a recogniser understood from one line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// Progress of one training step (Megatron, Lightning or NeMo).
    Iteration {
        /// Step number: Megatron's iteration, NeMo's `global_step`, or Lightning's step within the epoch.
        iteration: u64,
        /// Megatron's planned iterations, or a Lightning bar's length; None with
        /// NeMo's `global_step`, whose bar counts only the current epoch.
        total: Option<u64>,
        /// Wall time of one step in milliseconds.
        elapsed_ms: Option<f64>,
        /// Model TFLOP/s per GPU, as Megatron reports it.
        tflops_per_gpu: Option<f64>,
        /// Training loss; None when missing or not finite (then `nan_or_inf` is set).
        loss: Option<f64>,
        /// The loss or grad norm was NaN/Inf, or the framework counted NaN iterations.
        nan_or_inf: bool,
        /// Samples consumed so far: Megatron's `consumed samples`, NeMo's `consumed_samples`.
        #[serde(default)]
        consumed_samples: Option<u64>,
        /// Mixed-precision loss scale (Megatron's `loss scale`); it falls when steps overflow.
        #[serde(default)]
        loss_scale: Option<f64>,
        /// Megatron's `number of skipped iterations` in the last logging interval.
        #[serde(default)]
        skipped_iterations: Option<u64>,
        /// Megatron's `number of nan iterations` in the last logging interval.
        #[serde(default)]
        nan_iterations: Option<u64>,
    },
    /// A checkpoint was written.
    CheckpointSaved {
        /// Step it holds, from the line or from a `step_300`-style path.
        iteration: Option<u64>,
        /// Where it was written, when the line names it.
        path: Option<String>,
    },
    /// A checkpoint was (or is being) read back to resume.
    CheckpointLoaded {
        /// Step it holds, from the line or from a `step_300`-style path.
        iteration: Option<u64>,
        /// Where it is read from, when the line names it.
        path: Option<String>,
    },
    /// A line that reports an error (the message, trimmed).
    Error { text: String },
    /// `Traceback (most recent call last):` — starts a multi-line Python traceback.
    TracebackStart,
    /// The final line of a traceback: `KeyError: 'x'`, `torch.OutOfMemoryError: CUDA out of memory...`
    ExceptionLine { exception: String, message: String },
    /// Training finished normally.
    TrainingDone,
}

/// Longest text kept from one line, so a runaway line cannot bloat what is stored.
const MAX_TEXT_BYTES: usize = 4096;

const TRACEBACK_START: &str = "Traceback (most recent call last):";

/// Substrings that make a line an error report. `ERROR` and `Killed` must
/// also stand as whole words (see [`error_marker_at`]).
const ERROR_MARKERS: &[&str] = &[
    "NCCL WARN",
    "NCCL error",
    "Watchdog caught collective operation timeout",
    "CUDA error",
    "CUDA out of memory",
    "RuntimeError",
    "ERROR",
    "srun: error:",
    "slurmstepd: error:",
    "Segmentation fault",
    "Bus error",
    "Killed",
    "NVRM: Xid",
    "uncorrectable ECC",
    "fallen off the bus",
    "Input/output error",
    "No space left on device",
    "Exception",
    "Fatal Python error",
    "core dumped",
];

/// Substrings that every checkpoint line we recognise contains. (`dcp.save`
/// alone is not one: as a prefilter literal it slowed the whole ingest by ~7%,
/// and DCP wrappers name the checkpoint anyway.)
const CHECKPOINT_MARKERS: &[&str] = &["heckpoint", "saving model to"];

/// Megatron's `--log-progress` file line (`progress.txt`), tab-separated:
/// `Job ID: 1\t# GPUs: 8\tSaved checkpoint\tIteration: 100\tJob throughput: 364.8 TFLOP/s/GPU\t...`.
const PROGRESS_LOG_MARKER: &str = "Job throughput:";

const DONE_MARKERS: &[&str] = &[
    "[after training is done]",
    "Training finished",
    "Training completed",
    "`Trainer.fit` stopped",
];

/// All markers above as one literal alternation. The regex crate runs a pure
/// literal set as a single SIMD multi-substring scan, one pass over the line
/// instead of one `contains` per marker, which is what keeps quiet lines cheap.
/// The literal markers behind [`signal_markers`], for callers that search them with their own automaton.
pub fn signal_marker_literals() -> Vec<&'static str> {
    ERROR_MARKERS
        .iter()
        .chain(CHECKPOINT_MARKERS)
        .chain(DONE_MARKERS)
        .chain(&[PROGRESS_LOG_MARKER])
        .copied()
        .collect()
}

static SIGNALS: LazyLock<Regex> = LazyLock::new(|| {
    let alternation = ERROR_MARKERS
        .iter()
        .chain(CHECKPOINT_MARKERS)
        .chain(DONE_MARKERS)
        .chain(&[PROGRESS_LOG_MARKER])
        .map(|marker| regex::escape(marker))
        .collect::<Vec<_>>()
        .join("|");
    Regex::new(&alternation).expect("escaped literals always compile")
});

static MEGATRON_ITERATION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"\biteration\s+(\d+)\s*/\s*(\d+)\s*\|").expect("constant pattern compiles")
});

static PROGRESS_COUNTER: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"\|\s*(\d+)/(\d+|\?)\s*\[").expect("constant pattern compiles"));

/// A step number in checkpoint lines and paths: `iteration 200`, `global step 2000`,
/// `step=2000`, `step_300`, `global_step300`, `iter_0000200`, `checkpoint-500`.
static STEP_NUMBER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:iteration|iter|global[ _]?step|step|checkpoint-)[\s=:_-]*(\d+)")
        .expect("constant pattern compiles")
});

static LOADING_CHECKPOINT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"loading (?:[\w-]+ )?checkpoint from").expect("constant pattern compiles")
});

/// Glog-style error or fatal header from C++ code (torch's c10d among others):
/// `[E1122 06:24:44.903881913 ProcessGroupNCCL.cpp:616]` or `E1122 06:24:44.903881 123 file.cc:12]`.
static GLOG_ERROR_HEADER: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^\[?[EF](?:\d{4} \d\d:\d\d:\d\d\.\d+)?\s+(?:\d+\s+)?[\w./-]+:\d+\]")
        .expect("constant pattern compiles")
});

/// Turns a framed message into a record, or None for the many lines that say
/// nothing the watcher cares about.
pub fn recognise(message: &str) -> Option<Record> {
    recognise_hinted(message, true)
}

/// The markers one of which a line must hold to be an error, a checkpoint, a progress or a done line
/// (beyond the shapes `recognise` checks first). Searching a whole read for them at once tells which
/// lines need the per-line check at all.
pub fn signal_markers() -> &'static Regex {
    &SIGNALS
}

/// [`recognise`] with the result of a whole-read [`signal_markers`] search: `markers_possible` false
/// says the line holds none of them, so that per-line search is skipped.
pub fn recognise_hinted(message: &str, markers_possible: bool) -> Option<Record> {
    let message = latest_progress_update(message).trim();
    if message.is_empty() {
        return None;
    }
    if message.starts_with(TRACEBACK_START) {
        return Some(Record::TracebackStart);
    }
    // Structured telemetry: JSON lines start with `{`; key=value records are
    // `[type=... | ...]`, so a line without `|` cannot be one. A telemetry
    // record says what it says; its free text is not read for other signals.
    let has_bar = memchr::memchr(b'|', message.as_bytes()).is_some();
    if (has_bar || message.starts_with('{'))
        && let Some(telemetry) = structured::parse(message)
    {
        return telemetry.to_record();
    }
    if let Some(record) = exception_line(message) {
        return Some(record);
    }
    // Iterations come before errors: a step with a NaN loss is progress data.
    if has_bar && let Some(record) = megatron_iteration(message).or_else(|| progress_bar(message)) {
        return Some(record);
    }
    if has_error_prefix(message) {
        return Some(error(message));
    }
    if !markers_possible || !SIGNALS.is_match(message) {
        return None;
    }
    if is_error(message) {
        return Some(error(message));
    }
    progress_log(message)
        .or_else(|| checkpoint(message))
        .or_else(|| training_done(message))
}

/// Hostname that an NCCL line names: `node-07:48213:48890 [4] NCCL WARN ...` → "node-07"; also `srun: error: node-07: task 52: Exited with exit code 1` → "node-07". None otherwise.
pub fn named_host(message: &str) -> Option<&str> {
    let message = message.trim_start();
    if let Some(rest) = message.strip_prefix("srun: error: ") {
        let (host, tail) = rest.split_once(": ")?;
        return (is_hostname(host) && tail.starts_with("task")).then_some(host);
    }
    // NCCL's own prefix is `host:pid:tid [cudaDev] NCCL`.
    let (host, rest) = message.split_once(':')?;
    let (pid, rest) = rest.split_once(':')?;
    let (tid, rest) = rest.split_once(" [")?;
    let (device, rest) = rest.split_once("] ")?;
    let numbers_fit = [pid, tid, device]
        .iter()
        .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    // Newer NCCL puts the source location first: `[3] transport/net_ib.cc:1696 NCCL WARN`.
    let rest = match rest.split_once(' ') {
        Some((location, after)) if !rest.starts_with("NCCL ") && location.contains(".cc:") => after,
        _ => rest,
    };
    (numbers_fit && rest.starts_with("NCCL ") && is_hostname(host)).then_some(host)
}

fn is_hostname(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
}

/// tqdm redraws its bar with `\r`, so a captured log line can hold many
/// redraws; only the last one is current.
fn latest_progress_update(message: &str) -> &str {
    if !message.contains('\r') {
        return message;
    }
    message
        .rsplit('\r')
        .find(|part| !part.trim().is_empty())
        .unwrap_or_default()
}

/// `Name: message` or a bare `Name`, where Name ends in Error, Exception,
/// Interrupt, Exit or Warning, as Python prints the last line of a traceback.
fn exception_line(message: &str) -> Option<Record> {
    const SUFFIXES: [&str; 5] = ["Error", "Exception", "Interrupt", "Exit", "Warning"];
    let first = message.bytes().next()?;
    if !(first.is_ascii_alphabetic() || first == b'_') {
        return None;
    }
    let name_len = message
        .bytes()
        .take_while(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
        .count();
    let name = message.get(..name_len)?;
    let rest = message.get(name_len..)?;
    let text = if rest.is_empty() {
        ""
    } else if let Some(text) = rest.strip_prefix(':') {
        if !(text.is_empty() || text.starts_with(' ')) {
            return None;
        }
        text.trim()
    } else {
        return None;
    };
    let named_like_exception = SUFFIXES
        .iter()
        .any(|suffix| name.len() > suffix.len() && name.ends_with(suffix));
    named_like_exception.then(|| Record::ExceptionLine {
        exception: name.to_string(),
        message: capped(text).to_string(),
    })
}

/// Megatron-LM's `iteration N/ TOTAL | key: value | ...` line, old and new.
fn megatron_iteration(message: &str) -> Option<Record> {
    if !message.contains("iteration") {
        return None;
    }
    let captures = MEGATRON_ITERATION.captures(message)?;
    let iteration = captures.get(1)?.as_str().parse().ok()?;
    let total = captures.get(2).and_then(|m| m.as_str().parse().ok());
    let mut elapsed_ms = None;
    let mut tflops_per_gpu = None;
    let mut lm_loss = None;
    let mut other_loss = None;
    let mut grad_norm_not_finite = false;
    let mut consumed_samples = None;
    let mut loss_scale = None;
    let mut skipped_iterations = None;
    let mut nan_iterations = None;
    for field in message.split('|') {
        let Some((key, value)) = field.split_once(':') else {
            continue;
        };
        let key = key.trim();
        let value = value.trim();
        match key {
            "elapsed time per iteration (ms)" => elapsed_ms = value.parse().ok(),
            "lm loss" => lm_loss = value.parse::<f64>().ok(),
            "grad norm" => {
                grad_norm_not_finite = value.parse::<f64>().is_ok_and(|v| !v.is_finite());
            }
            "consumed samples" => consumed_samples = whole_number(value),
            "loss scale" => loss_scale = value.parse().ok(),
            "number of skipped iterations" => skipped_iterations = value.parse().ok(),
            "number of nan iterations" => nan_iterations = value.parse::<u64>().ok(),
            // "throughput per GPU (TFLOP/s/GPU)" today, "TFLOPs" in Megatron-DeepSpeed.
            _ if key.contains("TFLOP") => tflops_per_gpu = value.parse().ok(),
            _ if key.ends_with(" loss") || key == "loss" => {
                other_loss = other_loss.or_else(|| value.parse::<f64>().ok());
            }
            _ => {}
        }
    }
    let (loss, loss_not_finite) = finite(lm_loss.or(other_loss));
    Some(Record::Iteration {
        iteration,
        total,
        elapsed_ms,
        tflops_per_gpu,
        loss,
        nan_or_inf: loss_not_finite
            || grad_norm_not_finite
            || nan_iterations.is_some_and(|n| n > 0),
        consumed_samples,
        loss_scale,
        skipped_iterations,
        nan_iterations,
    })
}

/// A tqdm bar as Lightning and NeMo print it:
/// `Epoch 3: 100%|███| 500/500 [02:13<00:00, 3.75it/s, v_num=1, train_loss=2.31]`.
fn progress_bar(message: &str) -> Option<Record> {
    if !message.starts_with("Epoch ") {
        return None;
    }
    let counter = PROGRESS_COUNTER.captures(message);
    let step_in_epoch = counter
        .as_ref()
        .and_then(|c| c.get(1))
        .and_then(|m| m.as_str().parse::<u64>().ok());
    let steps_in_epoch = counter
        .as_ref()
        .and_then(|c| c.get(2))
        .and_then(|m| m.as_str().parse::<u64>().ok());

    let postfix_start = message.rfind('[').map_or(message.len(), |i| i + 1);
    let postfix = message.get(postfix_start..).unwrap_or_default();
    let postfix = postfix.split(']').next().unwrap_or_default();

    let mut global_step = None;
    let mut consumed_samples = None;
    let mut step_seconds = None;
    let mut rate_ms = None;
    let mut losses: [Option<f64>; LOSS_KEYS.len()] = [None; LOSS_KEYS.len()];
    for item in postfix.split(',').map(str::trim) {
        if let Some((key, value)) = item.split_once('=') {
            let key = key.trim();
            if key == "global_step" {
                global_step = whole_number(value);
            } else if key == "consumed_samples" {
                consumed_samples = whole_number(value);
            } else if key == "train_step_timing in s" {
                step_seconds = value.parse::<f64>().ok();
            } else if let Some(slot) = LOSS_KEYS.iter().position(|&k| k == key)
                && let Some(loss) = losses.get_mut(slot)
            {
                *loss = value.parse().ok();
            }
        } else if let Some(rate) = item.strip_suffix("it/s") {
            rate_ms = rate
                .parse::<f64>()
                .ok()
                .filter(|r| *r > 0.0)
                .map(|r| 1000.0 / r);
        } else if let Some(seconds) = item.strip_suffix("s/it") {
            rate_ms = seconds
                .parse::<f64>()
                .ok()
                .filter(|s| *s > 0.0)
                .map(|s| s * 1000.0);
        }
    }

    let (iteration, total) = match global_step {
        Some(step) => (step, None),
        None => (step_in_epoch?, steps_in_epoch),
    };
    let (loss, nan_or_inf) = finite(losses.into_iter().flatten().next());
    Some(Record::Iteration {
        iteration,
        total,
        elapsed_ms: step_seconds.map(|s| s * 1000.0).or(rate_ms),
        tflops_per_gpu: None,
        loss,
        nan_or_inf,
        consumed_samples,
        loss_scale: None,
        skipped_iterations: None,
        nan_iterations: None,
    })
}

/// Progress-bar loss names, most specific first.
const LOSS_KEYS: [&str; 6] = [
    "train_loss",
    "train_loss_step",
    "reduced_train_loss",
    "loss",
    "train/loss",
    "train_loss_epoch",
];

/// Splits a loss into its finite value and whether it was NaN/Inf.
fn finite(loss: Option<f64>) -> (Option<f64>, bool) {
    match loss {
        Some(value) if !value.is_finite() => (None, true),
        other => (other, false),
    }
}

/// `400` or NeMo's float-formatted `400.0`.
pub(super) fn whole_number(text: &str) -> Option<u64> {
    let text = text.trim();
    if let Ok(n) = text.parse() {
        return Some(n);
    }
    let value = text.parse::<f64>().ok()?;
    // Exactly representable whole numbers only; `as` is then lossless.
    (value.is_finite() && value >= 0.0 && value.fract() == 0.0 && value < 9.0e15)
        .then_some(value as u64)
}

/// Errors that are recognisable from the first bytes alone.
fn has_error_prefix(message: &str) -> bool {
    message.starts_with("Error:")
        || message.starts_with("[NeMo E ")
        || (matches!(
            message.as_bytes(),
            [b'[', b'E' | b'F', ..] | [b'E' | b'F', b'0'..=b'9', ..]
        ) && GLOG_ERROR_HEADER.is_match(message))
}

fn is_error(message: &str) -> bool {
    // Source lines inside a traceback quote code (`raise RuntimeError(...)`);
    // the traceback's final line is what reports the error.
    let quotes_source = ["raise ", "except ", "File \""]
        .iter()
        .any(|prefix| message.starts_with(prefix));
    !quotes_source
        && ERROR_MARKERS.iter().any(|marker| {
            message
                .match_indices(marker)
                .any(|(at, _)| error_marker_at(message, marker, at))
        })
}

/// `ERROR` and `Killed` count only as whole words, so that
/// `NCCL_ASYNC_ERROR_HANDLING=1` or `ERRORS_SEEN` are not errors.
fn error_marker_at(message: &str, marker: &str, at: usize) -> bool {
    if !matches!(marker, "ERROR" | "Killed") {
        return true;
    }
    let is_word_byte = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    let before = at.checked_sub(1).and_then(|i| message.as_bytes().get(i));
    let after = message.as_bytes().get(at + marker.len());
    !before.is_some_and(is_word_byte) && !after.is_some_and(is_word_byte)
}

fn error(message: &str) -> Record {
    Record::Error {
        text: capped(message).to_string(),
    }
}

/// Cuts `text` to at most [`MAX_TEXT_BYTES`] on a character boundary.
fn capped(text: &str) -> &str {
    if text.len() <= MAX_TEXT_BYTES {
        return text;
    }
    let mut end = MAX_TEXT_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.get(..end).unwrap_or_default()
}

/// Whether a checkpoint line reports a finished save or a load.
#[derive(Debug, Clone, Copy, PartialEq)]
enum CheckpointEvent {
    Saved,
    Loaded,
}

/// Save announcements from frameworks that print a separate line once the
/// save has finished; only that later line counts, because a save that dies
/// halfway leaves nothing to resume from.
const SAVE_STARTS: &[&str] = &[
    // Megatron: `successfully saved checkpoint from iteration N to PATH` follows.
    "saving checkpoint at iteration",
    // Megatron async save, finished by the same `successfully saved` line.
    "scheduled an async checkpoint save",
    "saving async checkpoint",
    // NeMo: `Async checkpoint save for step N (...) finalized successfully` follows.
    "scheduled async checkpoint save",
    // torchtitan / DCP: `Finished saving the checkpoint ...` follows.
    "saving the checkpoint",
    // Sharded writes, and HF's `Loading checkpoint shards` bars, are not whole checkpoints.
    "checkpoint shards",
];

/// Words that turn a checkpoint line into a report that it did not happen.
const CHECKPOINT_FAILURES: &[&str] = &[
    "fail",
    "unable",
    "could not",
    "couldn't",
    "cannot",
    "not found",
    "skipping",
    "will not",
    "no checkpoint",
];

/// Phrases of a finished save, matched on the lower-cased line.
const SAVED_PHRASES: &[&str] = &[
    "saved checkpoint", // Megatron `successfully saved checkpoint`, progress log `Saved checkpoint`
    "checkpoint saved", // NeMo, generic
    "saving checkpoint", // a plain `Saving checkpoint...`/`Saving checkpoint to PATH` (no later line)
    "saving model checkpoint to", // Hugging Face Trainer
    "saving model to",   // Lightning ModelCheckpoint top-k
    "saving latest checkpoint", // Lightning on exit
];

/// Phrases of a load (started or finished), matched on the lower-cased line.
const LOADED_PHRASES: &[&str] = &[
    "loaded checkpoint", // Megatron `successfully loaded checkpoint from PATH`
    "checkpoint loaded",
    "restoring states from the checkpoint", // Lightning
    "restored all states from the checkpoint",
    "loaded model weights from the checkpoint",
    "resuming from checkpoint",
    "loading the checkpoint at", // torchtitan `Loading the checkpoint at step N.`
    "finished loading the checkpoint",
    "finished loading checkpoint",
];

/// Checkpoint saves and loads in Megatron, NeMo, Lightning, Hugging Face,
/// DeepSpeed, torchtitan and `torch.distributed.checkpoint` wording.
fn checkpoint(message: &str) -> Option<Record> {
    if !CHECKPOINT_MARKERS
        .iter()
        .any(|marker| message.contains(marker))
    {
        return None;
    }
    let event = checkpoint_event(&message.to_ascii_lowercase())?;
    let iteration = STEP_NUMBER
        .captures(message)
        .and_then(|c| c.get(1))
        .and_then(|m| m.as_str().parse().ok());
    let path = checkpoint_path(message).map(str::to_string);
    Some(match event {
        CheckpointEvent::Saved => Record::CheckpointSaved { iteration, path },
        CheckpointEvent::Loaded => Record::CheckpointLoaded { iteration, path },
    })
}

fn checkpoint_event(lower: &str) -> Option<CheckpointEvent> {
    let has = |phrase: &&str| lower.contains(phrase);
    if CHECKPOINT_FAILURES.iter().any(has) {
        return None;
    }
    // torchtitan's `Finished saving the checkpoint` repeats its start line's words.
    if lower.contains("finished saving") {
        return Some(CheckpointEvent::Saved);
    }
    if SAVE_STARTS.iter().any(has) {
        return None;
    }
    let finished = [
        "finished",
        "finalized",
        "completed",
        "done",
        "succeeded",
        "success",
    ]
    .iter()
    .any(has);
    // NeMo's `Checkpoint save for step=2000 finished`; `dcp.save(...) completed`.
    let saved = SAVED_PHRASES.iter().any(|phrase| has_phrase(lower, phrase))
        || ((lower.contains("checkpoint save for") || lower.contains("dcp.save")) && finished);
    if saved {
        return Some(CheckpointEvent::Saved);
    }
    let loaded = LOADED_PHRASES.iter().any(has)
        || LOADING_CHECKPOINT.is_match(lower)
        || (lower.contains("dcp.load") && finished);
    loaded.then_some(CheckpointEvent::Loaded)
}

/// `phrase` in `text`, not continued by a letter: `saving checkpoint` but not
/// `saving checkpoints every 500 steps`.
fn has_phrase(text: &str, phrase: &str) -> bool {
    text.match_indices(phrase).any(|(at, _)| {
        !text
            .as_bytes()
            .get(at + phrase.len())
            .is_some_and(u8::is_ascii_alphabetic)
    })
}

/// A line of Megatron's progress log (`--log-progress`): `Saved checkpoint`
/// with its iteration becomes a save; any other line with an iteration and a
/// `Job throughput` becomes progress, so an async save that is only being
/// written still reports throughput.
fn progress_log(message: &str) -> Option<Record> {
    if !message.contains(PROGRESS_LOG_MARKER) {
        return None;
    }
    let mut iteration = None;
    let mut tflops_per_gpu = None;
    let mut saved = false;
    for field in message.split('\t').map(str::trim) {
        if let Some(value) = field.strip_prefix("Iteration:") {
            iteration = value.trim().parse::<u64>().ok();
        } else if let Some(value) = field.strip_prefix(PROGRESS_LOG_MARKER) {
            tflops_per_gpu = value
                .trim()
                .strip_suffix("TFLOP/s/GPU")
                .and_then(|v| v.trim().parse::<f64>().ok());
        } else if field.eq_ignore_ascii_case("Saved checkpoint") {
            saved = true;
        }
    }
    let iteration = iteration?;
    if saved {
        return Some(Record::CheckpointSaved {
            iteration: Some(iteration),
            path: None,
        });
    }
    Some(Record::Iteration {
        iteration,
        total: None,
        elapsed_ms: None,
        tflops_per_gpu: Some(tflops_per_gpu?),
        loss: None,
        nan_or_inf: false,
        consumed_samples: None,
        loss_scale: None,
        skipped_iterations: None,
        nan_iterations: None,
    })
}

/// First word that looks like a file path: has a `/` and a letter (so the
/// `1/1` of Megatron's `[ t 1/1, p 1/1 ]` is not one) and is not a unit such
/// as `TFLOP/s/GPU` or `it/s`, or ends in a checkpoint extension.
fn checkpoint_path(message: &str) -> Option<&str> {
    const EXTENSIONS: [&str; 7] = [
        ".ckpt",
        ".pt",
        ".pth",
        ".bin",
        ".safetensors",
        ".distcp",
        ".nemo",
    ];
    message
        .split_whitespace()
        .map(|word| {
            word.trim_matches(|c: char| "'\"()[]<>,;".contains(c))
                .trim_end_matches(['.', ':'])
        })
        .find(|word| {
            let is_unit = word.contains("FLOP") || word.ends_with("/s") || word.ends_with("/it");
            let slashed = word.contains('/') && word.bytes().any(|b| b.is_ascii_alphabetic());
            (slashed && !is_unit)
                || EXTENSIONS
                    .iter()
                    .any(|ext| word.len() > ext.len() && word.ends_with(ext))
        })
        .map(capped)
}

fn training_done(message: &str) -> Option<Record> {
    DONE_MARKERS
        .iter()
        .any(|marker| message.contains(marker))
        .then_some(Record::TrainingDone)
}

#[cfg(test)]
mod named_host_tests {
    use super::*;

    #[test]
    fn an_nccl_line_with_a_source_location_still_names_its_host() {
        assert_eq!(
            named_host(
                "node-07:48213:48890 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion"
            ),
            Some("node-07")
        );
        assert_eq!(
            named_host("node-07:48213:48890 [3] some text NCCL WARN x"),
            None
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::line::frame_with_year;
    use super::*;

    fn recognise_log(log: &str) -> Vec<Option<Record>> {
        log.lines()
            .map(|line| recognise(frame_with_year(line, 2026).message))
            .collect()
    }

    fn iteration(
        iteration: u64,
        total: Option<u64>,
        elapsed_ms: Option<f64>,
        tflops_per_gpu: Option<f64>,
        loss: Option<f64>,
        nan_or_inf: bool,
    ) -> Option<Record> {
        Some(Record::Iteration {
            iteration,
            total,
            elapsed_ms,
            tflops_per_gpu,
            loss,
            nan_or_inf,
            consumed_samples: None,
            loss_scale: None,
            skipped_iterations: None,
            nan_iterations: None,
        })
    }

    /// An iteration of the `megatron_pretrain.log` fixture.
    fn pretrain_step(
        iteration: u64,
        elapsed_ms: f64,
        tflops: f64,
        loss: Option<f64>,
        consumed: u64,
        nans: u64,
    ) -> Option<Record> {
        Step {
            iteration,
            total: Some(81_380_208),
            elapsed_ms: Some(elapsed_ms),
            tflops: Some(tflops),
            loss,
            nan: loss.is_none(),
            consumed: Some(consumed),
            scale: Some(1.0),
            skipped: Some(0),
            nans: Some(nans),
        }
        .record()
    }

    /// A Megatron iteration with every field spelled out.
    #[derive(Default)]
    struct Step {
        iteration: u64,
        total: Option<u64>,
        elapsed_ms: Option<f64>,
        tflops: Option<f64>,
        loss: Option<f64>,
        nan: bool,
        consumed: Option<u64>,
        scale: Option<f64>,
        skipped: Option<u64>,
        nans: Option<u64>,
    }

    impl Step {
        fn record(self) -> Option<Record> {
            Some(Record::Iteration {
                iteration: self.iteration,
                total: self.total,
                elapsed_ms: self.elapsed_ms,
                tflops_per_gpu: self.tflops,
                loss: self.loss,
                nan_or_inf: self.nan,
                consumed_samples: self.consumed,
                loss_scale: self.scale,
                skipped_iterations: self.skipped,
                nan_iterations: self.nans,
            })
        }
    }

    fn saved(iteration: Option<u64>, path: Option<&str>) -> Option<Record> {
        Some(Record::CheckpointSaved {
            iteration,
            path: path.map(str::to_string),
        })
    }

    fn loaded(iteration: Option<u64>, path: Option<&str>) -> Option<Record> {
        Some(Record::CheckpointLoaded {
            iteration,
            path: path.map(str::to_string),
        })
    }

    fn error_text(text: &str) -> Option<Record> {
        Some(Record::Error {
            text: text.to_string(),
        })
    }

    fn exception(name: &str, message: &str) -> Option<Record> {
        Some(Record::ExceptionLine {
            exception: name.to_string(),
            message: message.to_string(),
        })
    }

    #[test]
    fn parses_megatron_iteration_line_with_throughput() {
        let record = recognise(
            "iteration       30/   81380208 | consumed samples:          720 | elapsed time per iteration (ms): 2986.9 | throughput per GPU (TFLOP/s/GPU): 386.7 | learning rate: 3.000E-04 | global batch size:    24 | lm loss: 1.023436E+01 | loss scale: 1.0 | grad norm: 3.275 | number of skipped iterations:   0 | number of nan iterations:   0 |",
        );
        assert_eq!(
            record,
            Step {
                iteration: 30,
                total: Some(81_380_208),
                elapsed_ms: Some(2986.9),
                tflops: Some(386.7),
                loss: Some(10.23436),
                consumed: Some(720),
                scale: Some(1.0),
                skipped: Some(0),
                nans: Some(0),
                ..Step::default()
            }
            .record()
        );
    }

    #[test]
    fn megatron_nan_loss_is_an_iteration_flagged_nan_not_an_error() {
        let record = recognise(
            "iteration      230/   81380208 | elapsed time per iteration (ms): 2991.0 | lm loss: nan | loss scale: 1.0 | grad norm: 3.1 | number of nan iterations:   0 |",
        );
        assert_eq!(
            record,
            Step {
                iteration: 230,
                total: Some(81_380_208),
                elapsed_ms: Some(2991.0),
                nan: true,
                scale: Some(1.0),
                nans: Some(0),
                ..Step::default()
            }
            .record()
        );
    }

    #[test]
    fn megatron_nan_iteration_count_flags_nan_even_with_finite_loss() {
        let record = recognise(
            "iteration      231/      500 | lm loss: 2.5E+00 | number of nan iterations:   3 |",
        );
        assert_eq!(
            record,
            Step {
                iteration: 231,
                total: Some(500),
                loss: Some(2.5),
                nan: true,
                nans: Some(3),
                ..Step::default()
            }
            .record()
        );
    }

    #[test]
    fn megatron_infinite_grad_norm_flags_nan() {
        let record = recognise("iteration 5/ 10 | lm loss: 2.0 | grad norm: inf |");
        assert_eq!(record, iteration(5, Some(10), None, None, Some(2.0), true));
    }

    #[test]
    fn parses_megatron_deepspeed_tflops_field() {
        let record = recognise(
            "iteration      100/     500 | consumed samples:          800 | elapsed time per iteration (ms): 350.2 | TFLOPs: 150.23 | lm loss: 7.5E+00 |",
        );
        assert_eq!(
            record,
            Step {
                iteration: 100,
                total: Some(500),
                elapsed_ms: Some(350.2),
                tflops: Some(150.23),
                loss: Some(7.5),
                consumed: Some(800),
                ..Step::default()
            }
            .record()
        );
    }

    #[test]
    fn megatron_iteration_too_large_for_u64_is_ignored() {
        assert_eq!(
            recognise("iteration 99999999999999999999999/ 1 | lm loss: 1.0 |"),
            None
        );
    }

    #[test]
    fn recognises_megatron_pretrain_fixture() {
        let records = recognise_log(include_str!(
            "../../../tests/fixtures/logs/megatron_pretrain.log"
        ));
        assert_eq!(
            records,
            vec![
                None,
                None,
                None,
                None,
                None,
                loaded(Some(200), Some("/ckpt/llama")),
                loaded(Some(200), Some("/ckpt/llama")),
                None,
                None,
                pretrain_step(210, 2986.9, 386.7, Some(10.23436), 5040, 0),
                pretrain_step(220, 2990.2, 386.3, Some(9.871203), 5280, 0),
                pretrain_step(230, 2991.0, 386.2, None, 5520, 3),
                None,
                saved(Some(240), Some("/ckpt/llama")),
                None,
                None,
                Some(Record::TrainingDone),
            ]
        );
    }

    #[test]
    fn recognises_legacy_megatron_lines_without_throughput() {
        let records = recognise_log(include_str!(
            "../../../tests/fixtures/logs/megatron_legacy.log"
        ));
        assert_eq!(
            records,
            vec![
                Step {
                    iteration: 100,
                    total: Some(500),
                    elapsed_ms: Some(350.2),
                    loss: Some(7.512345),
                    consumed: Some(800),
                    scale: Some(65536.0),
                    skipped: Some(0),
                    nans: Some(0),
                    ..Step::default()
                }
                .record(),
                None,
                None,
                None,
                None,
                Step {
                    iteration: 110,
                    total: Some(500),
                    elapsed_ms: Some(349.8),
                    consumed: Some(880),
                    scale: Some(32768.0),
                    skipped: Some(1),
                    nans: Some(0),
                    ..Step::default()
                }
                .record(),
            ]
        );
    }

    #[test]
    fn recognises_lightning_fixture() {
        let records = recognise_log(include_str!(
            "../../../tests/fixtures/logs/lightning_fit.log"
        ));
        let expected = vec![
            None,
            None,
            None,
            loaded(None, Some("/ckpt/last.ckpt")),
            None,
            None,
            None,
            None,
            None,
            iteration(250, Some(500), Some(1000.0 / 3.75), None, Some(2.45), false),
            iteration(500, Some(500), Some(1000.0 / 3.75), None, Some(2.31), false),
            None,
            saved(Some(2000), Some("/ckpt/epoch=3-step=2000.ckpt")),
            iteration(500, Some(500), Some(1500.0), None, None, true),
            None,
            Some(Record::TrainingDone),
        ];
        assert_eq!(records, expected);
    }

    #[test]
    fn takes_the_last_redraw_of_a_carriage_return_progress_line() {
        let record = recognise(
            "Epoch 0:   0%|          | 0/500 [00:00<?, ?it/s]\rEpoch 0:   1%|          | 5/500 [00:01<02:12, 3.74it/s, v_num=1, train_loss=9.12]\r",
        );
        assert_eq!(
            record,
            iteration(5, Some(500), Some(1000.0 / 3.74), None, Some(9.12), false)
        );
    }

    #[test]
    fn progress_bar_without_rate_or_loss_still_gives_the_step() {
        let record = recognise("Epoch 0:   0%|          | 0/500 [00:00<?, ?it/s]");
        assert_eq!(record, iteration(0, Some(500), None, None, None, false));
    }

    #[test]
    fn recognises_nemo_fixture() {
        let records = recognise_log(include_str!("../../../tests/fixtures/logs/nemo_train.log"));
        assert_eq!(
            records,
            vec![
                None,
                None,
                None,
                Step {
                    iteration: 400,
                    elapsed_ms: Some(1230.0),
                    loss: Some(3.12),
                    consumed: Some(102_400),
                    ..Step::default()
                }
                .record(),
                None,
                saved(Some(2000), None),
                saved(
                    Some(2000),
                    Some(
                        "/results/llama/checkpoints/megatron_llama--reduced_train_loss=3.12-epoch=0-step=2000.ckpt"
                    )
                ),
                error_text(
                    "[NeMo E 2024-07-30 14:31:00 nemo_logging:349] Caught signal 15, shutting down"
                ),
            ]
        );
    }

    #[test]
    fn recognises_plain_checkpoint_announcements() {
        assert_eq!(
            recognise("Saving checkpoint to /ckpt/step_300"),
            saved(Some(300), Some("/ckpt/step_300"))
        );
        assert_eq!(
            recognise("Saved checkpoint at step 300"),
            saved(Some(300), None)
        );
        assert_eq!(recognise("Checkpoint saved: /x"), saved(None, Some("/x")));
        assert_eq!(
            recognise("Saving model checkpoint to /out/checkpoint-500"),
            saved(Some(500), Some("/out/checkpoint-500"))
        );
        assert_eq!(
            recognise(
                "[INFO] [engine.py:3500:_save_zero_checkpoint] zero checkpoint saved /ckpt/global_step300/zero_pp_rank_0_mp_rank_00_optim_states.pt"
            ),
            saved(
                Some(300),
                Some("/ckpt/global_step300/zero_pp_rank_0_mp_rank_00_optim_states.pt")
            )
        );
    }

    #[test]
    fn recognises_every_checkpoint_form_in_the_fixture() {
        let records = recognise_log(include_str!(
            "../../../tests/fixtures/logs/checkpoint_forms.log"
        ));
        let ckpt = Some("/ckpt/epoch=3-step=1500.ckpt");
        assert_eq!(
            records,
            vec![
                // Megatron: the announcement is not a save; the success line is.
                None,
                saved(Some(200), Some("/ckpt/llama")),
                loaded(Some(200), Some("/ckpt/llama")),
                loaded(Some(200), Some("/ckpt/llama")),
                None,
                // Lightning.
                saved(Some(1500), ckpt),
                saved(None, None),
                loaded(Some(1500), ckpt),
                loaded(Some(1500), ckpt),
                // NeMo: the step comes from the file name.
                saved(
                    Some(1500),
                    Some(
                        "/results/ckpt/megatron_gpt--val_loss=2.10-step=1500-consumed_samples=384000.0.ckpt"
                    )
                ),
                saved(
                    Some(1500),
                    Some(
                        "/results/ckpt/megatron_gpt--val_loss=2.10-step=1500-consumed_samples=384000.0-last.ckpt"
                    )
                ),
                // torchtitan / torch.distributed.checkpoint.
                None,
                saved(None, None),
                saved(Some(300), Some("/ckpt/step-300")),
                saved(Some(400), Some("/ckpt/step-400")),
                // A plain save without a step.
                saved(None, None),
                saved(None, None),
                loaded(Some(300), None),
                loaded(None, None),
                // Look-alikes: plans, failures and weight shards.
                None,
                None,
                None,
                None,
                None,
            ]
        );
    }

    #[test]
    fn recognises_megatron_deepspeed_corpus_line_with_all_counters() {
        let records = recognise_log(include_str!(
            "../../../tests/fixtures/logs/megatron_deepspeed_tflops.log"
        ));
        assert_eq!(
            records,
            vec![
                Step {
                    iteration: 9,
                    total: Some(10),
                    elapsed_ms: Some(1979.2),
                    tflops: Some(127.0),
                    consumed: Some(108),
                    scale: Some(1.0),
                    skipped: Some(0),
                    nans: Some(0),
                    ..Step::default()
                }
                .record()
            ]
        );
    }

    #[test]
    fn megatron_progress_log_gives_throughput_and_finished_saves() {
        let records = recognise_log(include_str!(
            "../../../tests/fixtures/logs/megatron_progress_log.log"
        ));
        assert_eq!(
            records,
            vec![
                None,
                // An async save being written is progress, not yet a checkpoint.
                Step {
                    iteration: 100,
                    tflops: Some(364.8),
                    ..Step::default()
                }
                .record(),
                saved(Some(200), None),
            ]
        );
    }

    #[test]
    fn nan_and_inf_losses_are_flagged_in_every_framework() {
        let flags: Vec<(u64, Option<f64>, bool)> =
            recognise_log(include_str!("../../../tests/fixtures/logs/nan_losses.log"))
                .into_iter()
                .map(|record| match record {
                    Some(Record::Iteration {
                        iteration,
                        loss,
                        nan_or_inf,
                        ..
                    }) => (iteration, loss, nan_or_inf),
                    other => panic!("expected an iteration, got {other:?}"),
                })
                .collect();
        assert_eq!(
            flags,
            vec![
                (230, None, true),
                (240, None, true),
                (250, Some(2.5), true),
                (50, None, true),
                (410, None, true),
                (500, None, true),
                (500, Some(2.31), false),
            ]
        );
    }

    #[test]
    fn structured_telemetry_lines_are_recognised_through_recognise() {
        assert_eq!(
            recognise(
                "[type=event | name=training_loop | event.name=training_iterations | event.metrics.current_iteration=7 | event.metrics.tflops=99.0 | count=1]"
            ),
            Step {
                iteration: 7,
                tflops: Some(99.0),
                ..Step::default()
            }
            .record()
        );
        assert_eq!(
            recognise(
                r#"{"type":"complete","name":"checkpoint_save_sync","stop_event":{"metrics":{"current_iteration":8}},"count":2}"#
            ),
            saved(Some(8), None)
        );
    }

    #[test]
    fn telemetry_records_that_stand_for_nothing_are_not_read_for_other_signals() {
        assert_eq!(
            recognise(
                "[type=start | pid=1 | name=main_function | event.name=span_start | event.metrics.node_name=\"ERROR-node\" | count=1]"
            ),
            None
        );
    }

    #[test]
    fn unit_words_are_not_checkpoint_paths() {
        assert_eq!(
            checkpoint_path("Saved checkpoint 364.8 TFLOP/s/GPU 3.1 it/s"),
            None
        );
        assert_eq!(
            checkpoint_path("Saved checkpoint 3.1 it/s to gs://bucket/run/step_5"),
            Some("gs://bucket/run/step_5")
        );
    }

    #[test]
    fn megatron_save_announcement_is_not_a_completed_save() {
        assert_eq!(
            recognise(" saving checkpoint at iteration     200 to /ckpt/llama"),
            None
        );
    }

    #[test]
    fn failed_checkpoint_load_is_an_error_not_a_load() {
        let text = "ERROR loading checkpoint from /ckpt/llama: Input/output error";
        assert_eq!(recognise(text), error_text(text));
    }

    #[test]
    fn recognises_errors_in_the_nccl_crash_fixture() {
        let records = recognise_log(include_str!(
            "../../../tests/fixtures/logs/nccl_timeout_crash.log"
        ));
        assert_eq!(
            records,
            vec![
                error_text(
                    "[E1122 06:24:44.903881913 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=12345, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600042 milliseconds before timing out."
                ),
                error_text(
                    "[E1122 06:24:44.904112234 ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank 3] Exception (either an error or timeout) detected by watchdog at work: 12345, last enqueued NCCL work: 12345, last completed NCCL work: 12344."
                ),
                error_text(
                    "node-07:48213:48890 [4] NCCL WARN NET/IB : Got completion from peer 10.0.0.3<45678> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:10.0.0.7 remoteGidsfe80::"
                ),
                None,
                Some(Record::TracebackStart),
                None,
                None,
                None,
                None,
                exception(
                    "torch.distributed.DistBackendError",
                    "NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error, NCCL version 2.21.5",
                ),
                exception(
                    "ncclRemoteError",
                    "A call failed possibly due to a network error or a remote process exiting prematurely.",
                ),
                error_text("srun: error: node-07: task 52: Exited with exit code 1"),
                error_text("srun: error: node-03: tasks 24-31: Killed"),
            ]
        );
    }

    #[test]
    fn recognises_node_faults_fixture() {
        let records = recognise_log(include_str!("../../../tests/fixtures/logs/node_faults.log"));
        assert_eq!(
            records,
            vec![
                error_text(
                    "NVRM: Xid (PCI:0000:3b:00): 79, pid=48213, name=python, GPU has fallen off the bus."
                ),
                error_text(
                    "node-07 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=48213, name=python, An uncorrectable ECC error detected"
                ),
                error_text(
                    "node-07 kernel: Out of memory: Killed process 48213 (python) total-vm:912345kB, anon-rss:81234kB"
                ),
                exception(
                    "OSError",
                    "[Errno 28] No space left on device: '/ckpt/llama/iter_0000240/__0_0.distcp'"
                ),
                error_text(
                    "/bin/bash: line 1: 48213 Segmentation fault      (core dumped) python train.py"
                ),
                exception(
                    "RuntimeError",
                    "CUDA error: an illegal memory access was encountered"
                ),
                exception(
                    "torch.OutOfMemoryError",
                    "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.02 GiB is free.",
                ),
                exception("KeyboardInterrupt", ""),
                error_text("- ERROR - data loader worker 3 exited unexpectedly"),
                error_text(
                    "slurmstepd: error: *** STEP 123456.0 ON node-01 CANCELLED AT 2024-07-30T18:01:02 DUE TO TIME LIMIT ***"
                ),
            ]
        );
    }

    #[test]
    fn each_listed_error_marker_makes_an_error() {
        for text in [
            "x NCCL error: unhandled system error",
            "CUDA error: device-side assert triggered",
            "caught RuntimeError in worker",
            "[ERROR] something failed",
            "Error: job step aborted",
            "Bus error (core dumped)",
            "/bin/sh: line 1: 12 Killed python train.py",
            "write failed: Input/output error",
            "worker raised an Exception in callback",
            "Fatal Python error: Aborted",
            "E1122 06:24:44.903881 12345 socket.cpp:420] connect failed",
        ] {
            assert_eq!(recognise(text), error_text(text), "{text}");
        }
    }

    #[test]
    fn healthy_lines_produce_no_records() {
        let records = recognise_log(include_str!(
            "../../../tests/fixtures/logs/healthy_noise.log"
        ));
        let noisy: Vec<_> = include_str!("../../../tests/fixtures/logs/healthy_noise.log")
            .lines()
            .zip(&records)
            .filter(|(_, record)| record.is_some())
            .collect();
        assert!(noisy.is_empty(), "{noisy:?}");
        assert_eq!(records.len(), 18);
    }

    #[test]
    fn look_alike_words_are_not_errors() {
        for text in [
            "ERRORS_SEEN=0",
            "killed=0 Unkilled",
            "Killedness",
            "eval error_rate=0.01",
            "no Errors: none",
            "    raise RuntimeError(\"loss is nan\")",
            "    except Exception:",
            "Warning: low disk",
            "Exit: 0",
        ] {
            assert_eq!(recognise(text), None, "{text}");
        }
    }

    #[test]
    fn exception_line_wins_over_error_markers() {
        assert_eq!(
            recognise("RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970"),
            exception("RuntimeError", "NCCL error in: ProcessGroupNCCL.cpp:1970")
        );
        assert_eq!(recognise("KeyError: 'x'"), exception("KeyError", "'x'"));
        assert_eq!(recognise("RuntimeError"), exception("RuntimeError", ""));
        assert_eq!(
            recognise("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: "),
            exception(
                "torch.distributed.elastic.multiprocessing.errors.ChildFailedError",
                ""
            )
        );
    }

    #[test]
    fn name_glued_to_colon_text_is_not_an_exception_line() {
        assert_eq!(recognise("SomeError:nospace"), None);
        assert_eq!(recognise("ValueErrors: 3"), None);
    }

    #[test]
    fn recognises_traceback_start() {
        assert_eq!(
            recognise("Traceback (most recent call last):"),
            Some(Record::TracebackStart)
        );
    }

    #[test]
    fn recognises_training_done_lines() {
        for text in [
            "[after training is done] datetime: 2024-07-30 18:00:00",
            "Training finished",
            "`Trainer.fit` stopped: `max_steps=1000` reached.",
        ] {
            assert_eq!(recognise(text), Some(Record::TrainingDone), "{text}");
        }
    }

    #[test]
    fn error_text_is_capped_on_a_character_boundary() {
        let line = format!("CUDA error: {}", "é".repeat(5000));
        let Some(Record::Error { text }) = recognise(&line) else {
            panic!("expected an error");
        };
        assert!(text.len() <= MAX_TEXT_BYTES && text.len() > MAX_TEXT_BYTES - 2);
        assert!(line.starts_with(&text));
    }

    #[test]
    fn names_the_host_of_an_nccl_line() {
        assert_eq!(
            named_host("node-07:48213:48890 [4] NCCL WARN NET/IB : Got completion from peer"),
            Some("node-07")
        );
        assert_eq!(
            named_host("gpu-a100-17.cluster:901:902 [0] NCCL INFO Init COMPLETE"),
            Some("gpu-a100-17.cluster")
        );
    }

    #[test]
    fn names_the_host_of_an_srun_task_failure() {
        assert_eq!(
            named_host("srun: error: node-07: task 52: Exited with exit code 1"),
            Some("node-07")
        );
        assert_eq!(
            named_host("srun: error: node-03: tasks 24-31: Killed"),
            Some("node-03")
        );
    }

    #[test]
    fn names_no_host_for_lines_that_only_resemble_nccl_or_srun() {
        for text in [
            "NCCL WARN without a prefix",
            "node-07:48213 [4] NCCL WARN missing thread id",
            "node-07:pid:48890 [4] NCCL WARN non-numeric pid",
            "node 07:1:2 [4] NCCL WARN space in host",
            "node-07:48213:48890 [4] Not NCCL",
            "srun: error: Unable to create step for job 123: Job has been cancelled",
            "srun: error: node-07 task 52 Exited",
            ":1:2 [0] NCCL INFO empty host",
            "",
            ":",
        ] {
            assert_eq!(named_host(text), None, "{text}");
        }
    }

    #[test]
    fn never_panics_on_truncated_fixture_lines_or_garbage() {
        let fixtures = [
            include_str!("../../../tests/fixtures/logs/checkpoint_forms.log"),
            include_str!("../../../tests/fixtures/logs/nan_losses.log"),
            include_str!("../../../tests/fixtures/logs/megatron_progress_log.log"),
            include_str!("../../../tests/fixtures/logs/training_telemetry_logger.log"),
            include_str!("../../../tests/fixtures/logs/training_telemetry_file.jsonl"),
            include_str!("../../../tests/fixtures/logs/megatron_pretrain.log"),
            include_str!("../../../tests/fixtures/logs/megatron_legacy.log"),
            include_str!("../../../tests/fixtures/logs/lightning_fit.log"),
            include_str!("../../../tests/fixtures/logs/nemo_train.log"),
            include_str!("../../../tests/fixtures/logs/nccl_timeout_crash.log"),
            include_str!("../../../tests/fixtures/logs/node_faults.log"),
        ];
        let mut samples: Vec<String> = fixtures
            .iter()
            .flat_map(|text| text.lines())
            .flat_map(|line| {
                let message = frame_with_year(line, 2026).message;
                message
                    .char_indices()
                    .flat_map(|(i, _)| [message[..i].to_string(), message[i..].to_string()])
                    .collect::<Vec<_>>()
            })
            .collect();
        samples.extend([
            "iteration 1/".to_string(),
            "iteration 1/ 2 | lm loss: | grad norm |:|".to_string(),
            "Epoch 1: |  | 3/ [".to_string(),
            "Epoch 1: 5%| | 1/2 [, =, global_step=1e400, train_loss=1e999, 0it/s, -1s/it"
                .to_string(),
            "Epoch ]]]][[[[".to_string(),
            "\r\r\r".to_string(),
            format!("Saved checkpoint at step {}", "9".repeat(100)),
            format!("{}Error: x", "a".repeat(100_000)),
            "\u{0}\u{1}ERROR\u{7f}".to_string(),
            "E".to_string(),
            "[E".to_string(),
        ]);
        for sample in &samples {
            let _ = recognise(sample);
            let _ = named_host(sample);
        }
    }

    #[test]
    fn nemo_float_global_step_beyond_exact_range_is_ignored() {
        let record = recognise(
            "Epoch 0: : 1%| | 1/100 [00:01<01:00, global_step=1e300, reduced_train_loss=2.0]",
        );
        assert_eq!(
            record,
            iteration(1, Some(100), None, None, Some(2.0), false)
        );
    }

    #[test]
    fn records_serialise_with_a_snake_case_type_tag() {
        let record = Record::CheckpointSaved {
            iteration: Some(2000),
            path: Some("/ckpt/a".to_string()),
        };
        let json = serde_json::to_string(&record).unwrap();
        assert_eq!(
            json,
            r#"{"type":"checkpoint_saved","iteration":2000,"path":"/ckpt/a"}"#
        );
        assert_eq!(serde_json::from_str::<Record>(&json).unwrap(), record);
        assert_eq!(
            serde_json::to_string(&Record::TracebackStart).unwrap(),
            r#"{"type":"traceback_start"}"#
        );
    }
}
