//! Fatal while running: a running attempt whose log shows an error that means its collective cannot
//! complete (the lines the catalog marks `fatal_while_running`: NCCL's IB work-completion errors with
//! a fatal status, its remote and system errors, a watchdog's collective timeout) has failed as soon
//! as its progress stopped after the line. Without this the ranks hang, silent, until the NCCL
//! watchdog or the silence bound ends them minutes later.
//!
//! A warning a healthy run recovers from is never acted on: the line must come after the last
//! progress report, and no progress may follow it for the confirmation window, twice the run's
//! median gap between progress reports within `[detect] fatal_confirm_min_secs ..= max_secs`.

use chrono::{DateTime, Utc};

use super::{Finding, median};
use crate::attribute::Catalog;
use crate::config::DetectConfig;
use crate::model::{AnomalyKind, Attempt, EvidenceLine, JobState, ThroughputSample};

/// Gaps between progress reports needed before the window is learned from them.
const MIN_GAPS: usize = 2;

/// How long progress must stay away after a fatal line, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub secs: u64,
    pub basis: String,
}

/// The confirmation window of a run whose recent progress reports are `progress` (time order).
pub fn confirmation_window(progress: &[ThroughputSample], config: &DetectConfig) -> Window {
    let (low, high) = (
        config
            .fatal_confirm_min_secs
            .min(config.fatal_confirm_max_secs),
        config.fatal_confirm_max_secs,
    );
    let mut gaps: Vec<f64> = progress
        .windows(2)
        .filter(|pair| {
            pair[0].attempt_index == pair[1].attempt_index
                && pair[0].rank == pair[1].rank
                && pair[1].iteration > pair[0].iteration
        })
        .map(|pair| (pair[1].time - pair[0].time).num_milliseconds() as f64 / 1000.0)
        .filter(|gap| *gap > 0.0)
        .collect();
    if gaps.len() < MIN_GAPS {
        return Window {
            secs: high,
            basis: "detect.fatal_confirm_max_secs (too few progress reports to learn from)"
                .to_string(),
        };
    }
    let Some(gap) = median(&mut gaps) else {
        return Window {
            secs: high,
            basis: "detect.fatal_confirm_max_secs".to_string(),
        };
    };
    let twice = (2.0 * gap).ceil() as u64;
    let secs = twice.clamp(low, high);
    let basis = if secs == twice {
        format!("twice the median gap between progress reports ({gap:.1} s)")
    } else if secs == high {
        format!(
            "twice the median gap between progress reports ({gap:.1} s), at most \
             detect.fatal_confirm_max_secs"
        )
    } else {
        format!(
            "twice the median gap between progress reports ({gap:.1} s), at least \
             detect.fatal_confirm_min_secs"
        )
    };
    Window { secs, basis }
}

/// What the rule reads of one running attempt.
pub struct RunningLog<'a> {
    /// The attempt's evidence lines in the order they arrived.
    pub lines: &'a [EvidenceLine],
    /// Its most recent progress reports, in time order.
    pub progress: &'a [ThroughputSample],
}

/// The first fatal line after the attempt's last progress report, once no progress followed it for
/// the confirmation window.
pub fn fatal_while_running(
    attempt: &Attempt,
    log: &RunningLog<'_>,
    catalog: &Catalog,
    now: DateTime<Utc>,
    config: &DetectConfig,
) -> Option<Finding> {
    if attempt.state != JobState::Running || config.fatal_confirm_max_secs == 0 {
        return None;
    }
    let progress: Vec<ThroughputSample> = log
        .progress
        .iter()
        .filter(|sample| sample.attempt_index == attempt.index)
        .cloned()
        .collect();
    // Lines and progress reports are compared on the lines' own clock (their stamps); a line without
    // a stamp of its own carries the one before it in the same read, so a line read after a report
    // is never older than it.
    let last_report = progress
        .iter()
        .map(|sample| sample.time)
        .max()
        .or(attempt.last_progress_time);
    let (line, signature) = log
        .lines
        .iter()
        .filter(|line| last_report.is_none_or(|report| line.time >= report))
        .find_map(|line| {
            catalog
                .fatal_while_running(&line.text)
                .map(|signature| (line, signature))
        })?;
    // When the line arrived, on the engine's clock as progress is: not before the last report
    // arrived (or the attempt started), not after the log last grew.
    let earliest = attempt.last_progress_time.or(attempt.start_time);
    let latest = attempt.last_log_time.unwrap_or(now).min(now);
    let since = earliest.map_or(line.time, |earliest| line.time.max(earliest));
    let since = since.min(latest);
    let window = confirmation_window(&progress, config);
    let quiet = (now - since).num_seconds();
    if quiet < window.secs as i64 {
        return None;
    }
    let host = reporting_host(&line.text);
    let status = completion_status(&line.text)
        .map(|status| format!(" (status {status})"))
        .unwrap_or_default();
    let on = host.map(|host| format!(" on {host}")).unwrap_or_default();
    let rank = line
        .rank
        .map(|rank| format!("{rank}: "))
        .unwrap_or_default();
    Some(Finding {
        kind: AnomalyKind::Hang,
        summary: format!(
            "job {} (attempt {}) printed a fatal {}{status}{on} at {}; no progress for {quiet} s \
             since (confirmation window {} s: {})",
            attempt.job_id,
            attempt.index,
            signature.spec.title,
            since.format("%Y-%m-%d %H:%M:%S UTC"),
            window.secs,
            window.basis
        ),
        evidence: vec![format!("{rank}{}", line.text)],
        node: host
            .filter(|host| attempt.nodes.iter().any(|node| node == host))
            .map(str::to_string),
    })
}

/// The host of NCCL's `host:pid:tid [dev] NCCL ...` prefix.
fn reporting_host(text: &str) -> Option<&str> {
    let (prefix, _) = text.split_once(" NCCL ")?;
    let mut fields = prefix.split(':');
    let host = fields.next()?;
    let numeric = |field: Option<&str>| {
        field.is_some_and(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
    };
    let pid = fields.next();
    let rest = fields.next().and_then(|tid| tid.split_once(' '));
    (!host.is_empty() && numeric(pid) && numeric(rest.map(|(tid, _)| tid))).then_some(host)
}

/// The work-completion status of an IB error line: `with status=12` or `with error 12`.
fn completion_status(text: &str) -> Option<u32> {
    let at = text
        .find("with status=")
        .map(|at| at + "with status=".len())
        .or_else(|| text.find("with error ").map(|at| at + "with error ".len()))?;
    let digits: String = text[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

#[cfg(test)]
mod tests;
