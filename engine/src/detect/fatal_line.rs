//! Fatal while running: a running attempt whose log shows an error that means its collective cannot
//! complete (the lines the catalog marks `fatal_while_running`: NCCL's IB work-completion errors with
//! a fatal status, its remote and system errors, a watchdog's collective timeout) has failed as soon
//! as its progress stopped after the line. Without this the ranks hang, silent, until the NCCL
//! watchdog or the silence bound ends them minutes later.
//!
//! A warning a healthy run recovers from is never acted on: the line must come after the last
//! progress report, and no progress may follow it for the confirmation window, twice the run's
//! median gap between progress reports within `[detect] fatal_confirm_min_secs ..= max_secs`,
//! counted from when the engine read the line.

use chrono::{DateTime, TimeDelta, Utc};

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

/// The fatal line an attempt is being watched for, and when the engine first read it: a line
/// without a stamp of its own carries the last stamp before it, which may be much older.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FatalLineTracker {
    sighting: Option<Sighting>,
}

#[derive(Debug, Clone, PartialEq)]
struct Sighting {
    text: String,
    stamp: DateTime<Utc>,
    read: DateTime<Utc>,
    /// When the confirmation window ends if no progress comes: the attempt fails then.
    due: DateTime<Utc>,
}

impl FatalLineTracker {
    /// Whether nothing is being watched (the tracker can be dropped).
    pub fn is_idle(&self) -> bool {
        self.sighting.is_none()
    }

    /// When the pending confirmation window ends, if one is pending: looking at the attempt again
    /// then fails it, so the engine wakes itself at that moment rather than at its next poll (a hung
    /// run writes nothing that would wake it).
    pub fn due(&self) -> Option<DateTime<Utc>> {
        self.sighting.as_ref().map(|seen| seen.due)
    }

    /// Looks at the attempt at `now`: the first fatal line after its last progress report is
    /// remembered with when it was first seen, and a finding returned once no progress followed it
    /// for the confirmation window.
    pub fn observe(
        &mut self,
        attempt: &Attempt,
        log: &RunningLog<'_>,
        catalog: &Catalog,
        now: DateTime<Utc>,
        config: &DetectConfig,
    ) -> Option<Finding> {
        if attempt.state != JobState::Running || config.fatal_confirm_max_secs == 0 {
            self.sighting = None;
            return None;
        }
        let progress: Vec<ThroughputSample> = log
            .progress
            .iter()
            .filter(|sample| sample.attempt_index == attempt.index)
            .cloned()
            .collect();
        // Lines and progress reports are ordered on the lines' own clock (their stamps): a line read
        // after a report carries a stamp no older than the report's.
        let last_report = progress
            .iter()
            .map(|sample| sample.time)
            .max()
            .or(attempt.last_progress_time);
        let Some((line, signature)) = log
            .lines
            .iter()
            .filter(|line| last_report.is_none_or(|report| line.time >= report))
            .find_map(|line| {
                catalog
                    .fatal_while_running(&line.text)
                    .map(|signature| (line, signature))
            })
        else {
            self.sighting = None;
            return None;
        };
        let known = self
            .sighting
            .as_ref()
            .filter(|seen| seen.text == line.text && seen.stamp == line.time)
            .map(|seen| seen.read);
        // Waiting is measured on the engine's clock, as progress is: from when the line was read.
        let read = known.unwrap_or(now);
        let since = attempt
            .last_progress_time
            .map_or(read, |progress| read.max(progress));
        let window = confirmation_window(&progress, config);
        let due = since + TimeDelta::seconds(window.secs as i64);
        self.sighting = Some(Sighting {
            text: line.text.clone(),
            stamp: line.time,
            read,
            due,
        });
        let quiet = (now - since).num_seconds();
        if now < due {
            return None;
        }
        self.sighting = None;
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
                "job {} (attempt {}) printed a fatal {}{status}{on}, read at {}; no progress for \
                 {quiet} s since (confirmation window {} s: {})",
                attempt.job_id,
                attempt.index,
                signature.spec.title,
                read.format("%Y-%m-%d %H:%M:%S UTC"),
                window.secs,
                window.basis
            ),
            evidence: vec![format!("{rank}{}", line.text)],
            node: host
                .filter(|host| attempt.nodes.iter().any(|node| node == host))
                .map(str::to_string),
        })
    }
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
