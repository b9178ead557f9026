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

use crate::text::clip;
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::line::{is_ascii_space, trim};
use super::structured;
use super::traceback::{TORCHSCRIPT_START, TRACEBACK_START};

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
    Regex::new(&format!("^{GLOG_ERROR_HEADER_ANYWHERE}")).expect("constant pattern compiles")
});

/// [`GLOG_ERROR_HEADER`] without its anchor: a line whose message starts with the header holds it.
const GLOG_ERROR_HEADER_ANYWHERE: &str =
    r"\[?[EF](?:\d{4} \d\d:\d\d:\d\d\.\d+)?\s+(?:\d+\s+)?[\w./-]+:\d+\]";

/// What a line holds whenever [`recognise_hinted`] recognises it without its markers (those of
/// [`signal_marker_literals`]): a bar or a carriage return (progress bars, Megatron's iterations,
/// telemetry records), a brace (JSON telemetry), an exception's name or a traceback's start, and
/// the error prefixes; the glog header is [`unhinted_pattern`]. A line that holds none of them and
/// none of the markers is nothing to the recognisers, so a whole-read scan for them all lets the
/// digest pass it by without framing it.
pub fn unhinted_literals() -> Vec<&'static str> {
    let mut literals = vec![
        "|",
        "\r",
        "{",
        TRACEBACK_START,
        TORCHSCRIPT_START,
        "[NeMo E ",
    ];
    literals.extend(EXCEPTION_SUFFIXES);
    literals
}

/// The pattern beside [`unhinted_literals`]: a glog error header anywhere in the line.
pub fn unhinted_pattern() -> &'static str {
    GLOG_ERROR_HEADER_ANYWHERE
}

/// How the name of an exception a line reports ends (`RuntimeError`, `KeyboardInterrupt`, ...).
const EXCEPTION_SUFFIXES: [&str; 5] = ["Error", "Exception", "Interrupt", "Exit", "Warning"];

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
    // Most lines hold neither a carriage return nor a bar: one search tells, instead of one for each.
    let plain = memchr::memchr2(b'\r', b'|', message.as_bytes()).is_none();
    let message = if plain {
        super::line::trim(message)
    } else {
        super::line::trim(latest_progress_update(message))
    };
    if message.is_empty() {
        return None;
    }
    // A logger may print its prefix before the header (`... CRITICAL | Traceback (most recent call
    // last):`, `ERROR:root:Traceback ...`).
    if message.starts_with(TRACEBACK_START)
        || message.ends_with(TRACEBACK_START)
        || message.starts_with(TORCHSCRIPT_START)
    {
        return Some(Record::TracebackStart);
    }
    // Structured telemetry: JSON lines start with `{`; key=value records are
    // `[type=... | ...]`, so a line without `|` cannot be one. A telemetry
    // record says what it says; its free text is not read for other signals.
    let has_bar = !plain && memchr::memchr(b'|', message.as_bytes()).is_some();
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
        Some((location, after)) if !rest.starts_with("NCCL ") && is_source_location(location) => {
            after
        }
        _ => rest,
    };
    (numbers_fit && rest.starts_with("NCCL ") && is_hostname(host)).then_some(host)
}

/// `transport/net_ib.cc:1696`: a C, C++ or CUDA source file and line (NCCL before 2.19 built `.cu`
/// files, and headers such as `include/socket.h` print too).
fn is_source_location(text: &str) -> bool {
    text.rsplit_once(':').is_some_and(|(file, line)| {
        !line.is_empty()
            && line.bytes().all(|b| b.is_ascii_digit())
            && [".cc", ".cu", ".cpp", ".cxx", ".c", ".h", ".hpp", ".cuh"]
                .iter()
                .any(|extension| file.ends_with(extension))
    })
}

/// A host name's labels start and end with a letter or digit, so a poster's redaction (`...-48`) names
/// no host.
pub fn is_hostname(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 253
        && text.split('.').all(|label| {
            label
                .bytes()
                .next()
                .is_some_and(|b| b.is_ascii_alphanumeric())
                && label
                    .bytes()
                    .last()
                    .is_some_and(|b| b.is_ascii_alphanumeric())
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'))
        })
}

/// tqdm redraws its bar with `\r`, so a captured log line can hold many
/// redraws; only the last one is current.
fn latest_progress_update(message: &str) -> &str {
    if memchr::memchr(b'\r', message.as_bytes()).is_none() {
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
    let named_like_exception = EXCEPTION_SUFFIXES
        .iter()
        .any(|suffix| name.len() > suffix.len() && name.ends_with(suffix));
    named_like_exception.then(|| Record::ExceptionLine {
        exception: name.to_string(),
        message: clip(text, MAX_TEXT_BYTES).to_string(),
    })
}

/// Megatron-LM's `iteration N/ TOTAL | key: value | ...` line, old and new.
fn megatron_iteration(message: &str) -> Option<Record> {
    let (iteration, total) = match iteration_counter(message) {
        Counter::Found(iteration, total) => (iteration, total),
        Counter::Absent => return None,
        Counter::Undecided => {
            let captures = MEGATRON_ITERATION.captures(message)?;
            (captures.get(1)?.as_str(), captures.get(2)?.as_str())
        }
    };
    let iteration = iteration.parse().ok()?;
    let total = total.parse().ok();
    let mut elapsed_ms = None;
    let mut tflops_per_gpu = None;
    let mut lm_loss = None;
    let mut other_loss = None;
    let mut grad_norm_not_finite = false;
    let mut consumed_samples = None;
    let mut loss_scale = None;
    let mut skipped_iterations = None;
    let mut nan_iterations = None;
    for field in bar_fields(message) {
        let Some(colon) = memchr::memchr(b':', field.as_bytes()) else {
            continue;
        };
        // `:` is ASCII: both sides are whole characters.
        let key = trim(field.get(..colon).unwrap_or_default());
        let value = trim(field.get(colon + 1..).unwrap_or_default());
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

/// The fields of a line between its `|`, as `str::split('|')` gives them, found with one vector search.
fn bar_fields(message: &str) -> impl Iterator<Item = &str> + '_ {
    let mut start = 0;
    memchr::memchr_iter(b'|', message.as_bytes())
        .chain(std::iter::once(message.len()))
        .map(move |end| {
            // `|` is ASCII: every field is whole characters.
            let field = message.get(start..end).unwrap_or_default();
            start = end + 1;
            field
        })
}

/// What [`iteration_counter`] could tell without the regex.
#[derive(Debug, PartialEq)]
enum Counter<'m> {
    /// The iteration and the total, as [`MEGATRON_ITERATION`] captures them.
    Found(&'m str, &'m str),
    /// [`MEGATRON_ITERATION`] does not match.
    Absent,
    /// A character outside ASCII stands where the answer depends on it (a Unicode digit, space or
    /// letter): only the regex knows.
    Undecided,
}

/// [`MEGATRON_ITERATION`] (`\biteration\s+(\d+)\s*/\s*(\d+)\s*\|`) read by hand over ASCII: every
/// iteration line goes through it, and the regex's captures cost more than the rest of the line's
/// parse. Each `iteration` is tried in order, so the first that fits is the regex's leftmost match.
fn iteration_counter(message: &str) -> Counter<'_> {
    const WORD: &[u8] = b"iteration";
    let bytes = message.as_bytes();
    // Where a run of `take` bytes starting at `at` ends; None at a byte outside ASCII.
    fn run_of(bytes: &[u8], mut at: usize, take: impl Fn(u8) -> bool) -> Option<usize> {
        while let Some(&byte) = bytes.get(at) {
            if !byte.is_ascii() {
                return None;
            }
            if !take(byte) {
                break;
            }
            at += 1;
        }
        Some(at)
    }
    let digit = |byte: u8| byte.is_ascii_digit();
    // Built once: a searcher built per call costs as much as the search.
    static FINDER: LazyLock<memchr::memmem::Finder<'static>> =
        LazyLock::new(|| memchr::memmem::Finder::new(WORD));
    for found in FINDER.find_iter(bytes) {
        match found
            .checked_sub(1)
            .and_then(|before| bytes.get(before).copied())
        {
            Some(before) if !before.is_ascii() => return Counter::Undecided,
            Some(before) if before.is_ascii_alphanumeric() || before == b'_' => continue,
            _ => {}
        }
        let start = found + WORD.len();
        let Some(digits) = run_of(bytes, start, is_ascii_space) else {
            return Counter::Undecided;
        };
        let Some(after_iteration) = run_of(bytes, digits, digit) else {
            return Counter::Undecided;
        };
        let Some(slash) = run_of(bytes, after_iteration, is_ascii_space) else {
            return Counter::Undecided;
        };
        if digits == start || after_iteration == digits || bytes.get(slash) != Some(&b'/') {
            continue;
        }
        let Some(total_start) = run_of(bytes, slash + 1, is_ascii_space) else {
            return Counter::Undecided;
        };
        let Some(total_end) = run_of(bytes, total_start, digit) else {
            return Counter::Undecided;
        };
        let Some(bar) = run_of(bytes, total_end, is_ascii_space) else {
            return Counter::Undecided;
        };
        if total_end == total_start || bytes.get(bar) != Some(&b'|') {
            continue;
        }
        // Only ASCII bytes were passed over: the bounds are character boundaries.
        return match (
            message.get(digits..after_iteration),
            message.get(total_start..total_end),
        ) {
            (Some(iteration), Some(total)) => Counter::Found(iteration, total),
            _ => Counter::Undecided,
        };
    }
    Counter::Absent
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
    let text = trim(text);
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
        text: clip(message, MAX_TEXT_BYTES).to_string(),
    }
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

/// Whether a line announces a checkpoint save that a later line confirms (Megatron's `saving
/// checkpoint at iteration N`): the run is saving from here until that confirmation.
pub fn is_save_start(message: &str) -> bool {
    if !message.contains("heckpoint") {
        return false;
    }
    let lower = message.to_ascii_lowercase();
    SAVE_STARTS.iter().any(|phrase| lower.contains(phrase))
        && !CHECKPOINT_FAILURES.iter().any(|word| lower.contains(word))
        && !lower.contains("finished saving")
}

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
        .map(|text| clip(text, MAX_TEXT_BYTES))
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
mod tests;
