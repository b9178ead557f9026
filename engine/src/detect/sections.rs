//! Hangs by the section the run is in: how long a run may stay silent depends on what it is doing —
//! starting up (compiling, loading a checkpoint), stepping, or saving — and each bound is learned
//! from the run itself, with no change to the job: a step's bound from the gaps between its progress
//! reports, a save's from the saves it made, a start-up's from its earlier attempts.

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::config::DetectConfig;
use crate::model::{Attempt, Checkpoint, ThroughputSample};

/// Gaps between progress reports needed before the step bound is learned.
const MIN_GAPS: usize = 5;

/// What the run is doing while silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Section {
    /// No progress report yet in this attempt.
    Setup,
    /// Between progress reports.
    Step,
    /// A checkpoint save is due after the last reported iteration.
    Save,
}

impl Section {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Setup => "setup",
            Self::Step => "step",
            Self::Save => "checkpoint save",
        }
    }
}

/// How long the run may stay silent in its section, and why.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bound {
    pub section: Section,
    pub secs: u64,
    pub basis: String,
}

/// What the bound is learned from: the workflow's attempts, progress reports and saves.
pub struct RunHistory<'a> {
    pub attempts: &'a [Attempt],
    pub throughput: &'a [ThroughputSample],
    pub checkpoints: &'a [Checkpoint],
}

/// The silence bound of `attempt` (running) in the section it is in; `heartbeat` where nothing was
/// learned.
/// `saving`: the log announced a save it has not confirmed yet.
pub fn silence_bound(
    attempt: &Attempt,
    history: &RunHistory<'_>,
    saving: bool,
    config: &DetectConfig,
    heartbeat: u64,
) -> Bound {
    let Some(last_iteration) = attempt
        .last_iteration
        .filter(|_| attempt.last_progress_time.is_some())
    else {
        return setup_bound(attempt, history, config);
    };
    if let Some(bound) = save_bound(last_iteration, history, saving, config, heartbeat) {
        return bound;
    }
    step_bound(history, config, heartbeat)
}

fn setup_bound(attempt: &Attempt, history: &RunHistory<'_>, config: &DetectConfig) -> Bound {
    // Earlier attempts' start-ups: from their start to their first progress report.
    let longest = history
        .attempts
        .iter()
        .filter(|earlier| earlier.index < attempt.index)
        .filter_map(|earlier| {
            let start = earlier.start_time?;
            let first = history
                .throughput
                .iter()
                .filter(|sample| sample.attempt_index == earlier.index)
                .map(|sample| sample.time)
                .min()?;
            Some((first - start).num_seconds().max(0) as u64)
        })
        .max();
    match longest {
        Some(longest) if longest * 3 > config.setup_timeout_secs => Bound {
            section: Section::Setup,
            secs: longest * 3,
            basis: format!("three times the longest earlier start-up ({longest} s)"),
        },
        _ => Bound {
            section: Section::Setup,
            secs: config.setup_timeout_secs,
            basis: "detect.setup_timeout_secs".to_string(),
        },
    }
}

/// The run is saving when its log announced a save not confirmed yet, or when the last reported
/// iteration is one it saves at: a multiple of its checkpoint interval beyond its newest checkpoint.
fn save_bound(
    last_iteration: u64,
    history: &RunHistory<'_>,
    saving: bool,
    config: &DetectConfig,
    heartbeat: u64,
) -> Option<Bound> {
    if !saving && !save_due(last_iteration, history) {
        return None;
    }
    let costs = save_durations(history.checkpoints, history.throughput);
    let longest = costs.iter().copied().fold(0.0_f64, f64::max);
    Some(if costs.is_empty() {
        Bound {
            section: Section::Save,
            secs: config.save_timeout_secs.max(heartbeat),
            basis: "detect.save_timeout_secs (no save measured yet)".to_string(),
        }
    } else {
        Bound {
            section: Section::Save,
            secs: ((longest * 4.0).ceil() as u64).max(heartbeat),
            basis: format!("four times the longest save seen ({longest:.0} s)"),
        }
    })
}

fn save_due(last_iteration: u64, history: &RunHistory<'_>) -> bool {
    let mut iterations: Vec<u64> = history.checkpoints.iter().map(|c| c.iteration).collect();
    iterations.sort_unstable();
    iterations.dedup();
    let Some(&newest) = iterations.last() else {
        return false;
    };
    let interval = iterations
        .windows(2)
        .map(|pair| pair[1] - pair[0])
        .filter(|gap| *gap > 0)
        .min()
        .or((newest > 0).then_some(newest));
    interval
        .is_some_and(|interval| last_iteration > newest && last_iteration.is_multiple_of(interval))
}

/// How long each measured save held the run: the stretch between the progress reports around it
/// beyond what the same iterations take without a save (the median time per iteration elsewhere).
/// The save of iteration N falls in the stretch that starts at N: frameworks (Megatron, NeMo, the
/// test job) log an iteration, then save, then go on; the save's own line seldom carries a time.
/// Empty when no stretch without a save tells the usual pace.
pub fn save_durations(checkpoints: &[Checkpoint], throughput: &[ThroughputSample]) -> Vec<f64> {
    let mut per_iteration = Vec::new();
    let mut around = Vec::new();
    for pair in throughput.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.attempt_index != b.attempt_index || b.iteration <= a.iteration || a.rank != b.rank {
            continue;
        }
        let secs = (b.time - a.time).num_milliseconds() as f64 / 1000.0;
        let iterations = (b.iteration - a.iteration) as f64;
        let saved = checkpoints.iter().any(|c| {
            c.attempt_index == a.attempt_index
                && c.iteration >= a.iteration
                && c.iteration < b.iteration
        });
        if saved {
            around.push((secs, iterations));
        } else {
            per_iteration.push(secs / iterations);
        }
    }
    let Some(typical) = super::median(&mut per_iteration) else {
        return Vec::new();
    };
    around
        .iter()
        .map(|(secs, iterations)| (secs - iterations * typical).max(0.0))
        .collect()
}

fn step_bound(history: &RunHistory<'_>, config: &DetectConfig, heartbeat: u64) -> Bound {
    let mut gaps: Vec<f64> = history
        .throughput
        .windows(2)
        .filter(|pair| {
            pair[0].attempt_index == pair[1].attempt_index
                && pair[0].rank == pair[1].rank
                && pair[1].iteration > pair[0].iteration
        })
        .filter(|pair| {
            // Stretches holding a save are the save section's, not a step's.
            !history.checkpoints.iter().any(|c| {
                c.attempt_index == pair[0].attempt_index
                    && c.iteration >= pair[0].iteration
                    && c.iteration < pair[1].iteration
            })
        })
        .map(|pair| (pair[1].time - pair[0].time).num_milliseconds() as f64 / 1000.0)
        .filter(|gap| *gap >= 0.0)
        .collect();
    if gaps.len() < MIN_GAPS {
        return Bound {
            section: Section::Step,
            secs: heartbeat,
            basis: format!("engine.heartbeat_timeout_secs (fewer than {MIN_GAPS} gaps seen)"),
        };
    }
    gaps.sort_by(f64::total_cmp);
    let p99 = gaps[((gaps.len() as f64 * 0.99).ceil() as usize).clamp(1, gaps.len()) - 1];
    let secs = ((p99 * config.step_gap_factor).ceil() as u64).max(config.step_timeout_floor_secs);
    Bound {
        section: Section::Step,
        secs,
        basis: format!(
            "{} × the p99 gap between progress reports ({p99:.1} s, {} gaps)",
            config.step_gap_factor,
            gaps.len()
        ),
    }
}

/// When silence is measured from: the last byte the log received, or the attempt's start.
pub fn silent_since(attempt: &Attempt) -> Option<DateTime<Utc>> {
    attempt
        .last_log_time
        .or(attempt.start_time.max(Some(attempt.updated_at)))
}

#[cfg(test)]
mod tests;
