//! Detectors: small pure functions over what telemetry stored about one attempt, each returning a
//! finding when its rule fires. The engine raises each kind at most once per attempt.
//!
//! Crashes and silence (heartbeat) are found by the engine from the scheduler state and log times;
//! these are the rules that need history: progress, throughput, stragglers, checkpoints, pending time.

pub mod fatal_line;
pub mod node_silence;
pub mod readings;
pub mod sections;
pub mod steps;

use chrono::{DateTime, Utc};

use crate::config::DetectConfig;
use crate::model::{AnomalyKind, Attempt, Checkpoint, EvidenceLine, JobState, ThroughputSample};
use crate::telemetry::straggler_report::StragglerReport;

/// What a detector saw.
#[derive(Debug, Clone, PartialEq)]
pub struct Finding {
    pub kind: AnomalyKind,
    pub summary: String,
    pub evidence: Vec<String>,
    /// The node the finding points at, when it points at one.
    pub node: Option<String>,
}

/// Lines kept of the last error block: a traceback's frames, or the last error lines.
const ERROR_BLOCK_LINES: usize = 40;

/// The last error block of an attempt's evidence: the last Python traceback (of the rank that wrote it,
/// through its exception line), else the last few error lines. This is what a crash is shown with.
pub fn last_error_block(lines: &[EvidenceLine]) -> Vec<String> {
    let start = lines
        .iter()
        .rposition(|line| line.text.starts_with("Traceback (most recent call last)"));
    let quote = |line: &EvidenceLine| match line.rank {
        Some(rank) => format!("{rank}: {}", line.text),
        None => line.text.clone(),
    };
    match start {
        Some(start) => {
            let rank = lines[start].rank;
            lines[start..]
                .iter()
                .filter(|line| line.rank == rank)
                .take(ERROR_BLOCK_LINES)
                .map(quote)
                .collect()
        }
        None => {
            let from = lines.len().saturating_sub(10);
            lines[from..].iter().map(quote).collect()
        }
    }
}

/// The signal a process exit code (128 + n) or a scheduler's `0:n` stands for, by name.
pub fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        15 => "SIGTERM",
        _ => return None,
    })
}

/// Running, and lines keep coming, but the iteration count has not moved for `progress_timeout_secs`.
pub fn no_progress(
    attempt: &Attempt,
    now: DateTime<Utc>,
    config: &DetectConfig,
) -> Option<Finding> {
    if attempt.state != JobState::Running {
        return None;
    }
    // Before the first iteration there is no progress to lose (compilation, checkpoint load).
    let since = attempt.last_progress_time?;
    let stalled = (now - since).num_seconds();
    (stalled >= config.progress_timeout_secs as i64).then(|| Finding {
        kind: AnomalyKind::Hang,
        summary: format!(
            "job {} (attempt {}) made no training progress for {stalled} s: still at iteration {} (progress timeout {} s)",
            attempt.job_id,
            attempt.index,
            attempt.last_iteration.unwrap_or(0),
            config.progress_timeout_secs
        ),
        evidence: Vec::new(),
        node: None,
    })
}

/// The median of `values` (sorted in place), `None` for none.
pub(crate) fn median(values: &mut [f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let mid = values.len() / 2;
    Some(if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2.0
    } else {
        values[mid]
    })
}

/// A persistent throughput drop: after the warm-up, the median of the next samples is the baseline; the
/// last `throughput_drop_samples` samples all below it by more than `throughput_drop_percent`.
///
/// `head` are the attempt's first samples, `tail` its most recent, both in time order.
pub fn throughput_drop(
    head: &[ThroughputSample],
    tail: &[ThroughputSample],
    config: &DetectConfig,
) -> Option<Finding> {
    let warmup = config.throughput_warmup_samples;
    let baseline_end = warmup + config.throughput_baseline_samples;
    if head.len() < baseline_end {
        return None;
    }
    let mut baseline_values: Vec<f64> = head[warmup..baseline_end]
        .iter()
        .map(|s| s.tflops_per_gpu)
        .collect();
    let baseline = median(&mut baseline_values)?;
    if baseline <= 0.0 {
        return None;
    }
    let last_baseline_iteration = head[baseline_end - 1].iteration;
    let window: Vec<&ThroughputSample> = tail
        .iter()
        .filter(|s| s.iteration > last_baseline_iteration)
        .collect();
    let needed = config.throughput_drop_samples;
    if window.len() < needed {
        return None;
    }
    let recent = &window[window.len() - needed..];
    let limit = baseline * (1.0 - config.throughput_drop_percent / 100.0);
    if !recent.iter().all(|s| s.tflops_per_gpu < limit) {
        return None;
    }
    let mut recent_values: Vec<f64> = recent.iter().map(|s| s.tflops_per_gpu).collect();
    let now_value = median(&mut recent_values)?;
    let drop = (1.0 - now_value / baseline) * 100.0;
    Some(Finding {
        kind: AnomalyKind::ThroughputDrop,
        summary: format!(
            "throughput fell {drop:.0}% below its baseline: {now_value:.1} TFLOP/s/GPU over the last {needed} samples against {baseline:.1} (iterations {}..{})",
            recent[0].iteration,
            recent[needed - 1].iteration
        ),
        evidence: recent
            .iter()
            .map(|s| {
                format!(
                    "iteration {}: {:.1} TFLOP/s/GPU",
                    s.iteration, s.tflops_per_gpu
                )
            })
            .collect(),
        node: None,
    })
}

/// Consecutive straggler reports naming the same slow rank, more than `straggler_percent` slower than
/// the fastest rank.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StragglerTracker {
    rank: Option<u32>,
    streak: usize,
    worst_percent: f64,
}

impl StragglerTracker {
    /// Feeds one report; returns a finding when the streak reaches `straggler_reports`.
    pub fn observe(
        &mut self,
        report: &StragglerReport,
        nodes: &[String],
        ranks_per_node: u32,
        config: &DetectConfig,
    ) -> Option<Finding> {
        let spread = report.spread_percent();
        if spread < config.straggler_percent {
            *self = Self::default();
            return None;
        }
        if self.rank == Some(report.slowest_rank) {
            self.streak += 1;
            self.worst_percent = self.worst_percent.max(spread);
        } else {
            self.rank = Some(report.slowest_rank);
            self.streak = 1;
            self.worst_percent = spread;
        }
        if self.streak != config.straggler_reports {
            return None;
        }
        let node = nodes
            .get((report.slowest_rank / ranks_per_node.max(1)) as usize)
            .cloned();
        Some(Finding {
            kind: AnomalyKind::Straggler,
            summary: format!(
                "rank {}{} is a straggler: up to {:.0}% slower than the fastest rank (rank {}) in {} consecutive reports",
                report.slowest_rank,
                node.as_deref()
                    .map(|n| format!(" on {n}"))
                    .unwrap_or_default(),
                self.worst_percent,
                report.fastest_rank,
                self.streak
            ),
            evidence: vec![format!(
                "slowest rank {} {:.1} ms, fastest rank {} {:.1} ms",
                report.slowest_rank, report.slowest_ms, report.fastest_rank, report.fastest_ms
            )],
            node,
        })
    }
}

/// Running, with an observed checkpoint interval, and no checkpoint for `checkpoint_stall_factor` times it.
///
/// The interval is the median gap between consecutive checkpoints of the same attempt, over the whole
/// workflow; the clock starts at the attempt's last checkpoint or, before its first, at its start.
pub fn checkpoint_stall(
    attempt: &Attempt,
    checkpoints: &[Checkpoint],
    now: DateTime<Utc>,
    config: &DetectConfig,
) -> Option<Finding> {
    if attempt.state != JobState::Running {
        return None;
    }
    let mut gaps: Vec<f64> = checkpoints
        .windows(2)
        .filter(|pair| pair[0].attempt_index == pair[1].attempt_index)
        .map(|pair| (pair[1].time - pair[0].time).num_milliseconds() as f64 / 1000.0)
        .filter(|gap| *gap > 0.0)
        .collect();
    let interval = median(&mut gaps)?;
    let last = checkpoints
        .iter()
        .filter(|c| c.attempt_index == attempt.index)
        .map(|c| c.time)
        .max()
        .or(attempt.start_time)?;
    let waited = (now - last).num_seconds() as f64;
    let limit = interval * config.checkpoint_stall_factor;
    (waited > limit).then(|| Finding {
        kind: AnomalyKind::CheckpointStall,
        summary: format!(
            "no checkpoint for {waited:.0} s, more than {} × the usual interval of {interval:.0} s: progress since the last one would be lost on a failure",
            config.checkpoint_stall_factor
        ),
        evidence: checkpoints
            .iter()
            .rev()
            .take(3)
            .map(|c| format!("checkpoint at iteration {} ({})", c.iteration, c.time.to_rfc3339()))
            .collect(),
        node: None,
    })
}

/// Pending longer than `stuck_pending_secs`, with the scheduler's reason.
pub fn stuck_pending(
    attempt: &Attempt,
    now: DateTime<Utc>,
    config: &DetectConfig,
) -> Option<Finding> {
    if attempt.state != JobState::Pending {
        return None;
    }
    let since = attempt.submit_time?;
    let waited = (now - since).num_seconds();
    (waited >= config.stuck_pending_secs as i64).then(|| {
        let reason = attempt.reason.as_deref().unwrap_or("no reason given");
        Finding {
            kind: AnomalyKind::StuckPending,
            summary: format!(
                "job {} has been pending for {waited} s (limit {} s): {reason}",
                attempt.job_id, config.stuck_pending_secs
            ),
            evidence: vec![format!("scheduler reason: {reason}")],
            node: None,
        }
    })
}

#[cfg(test)]
mod tests {
    use chrono::TimeDelta;

    use super::*;

    fn t(seconds: i64) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-01-05T08:00:00Z")
            .unwrap()
            .with_timezone(&Utc)
            + TimeDelta::seconds(seconds)
    }

    fn attempt(state: JobState) -> Attempt {
        Attempt {
            workflow_id: 1,
            index: 0,
            job_id: "4201".into(),
            restart_count: 0,
            nodes: ["node-01", "node-02"].map(String::from).to_vec(),
            gpus: 16,
            state,
            state_raw: state.as_str().to_uppercase(),
            reason: Some("Resources".into()),
            submit_time: Some(t(0)),
            start_time: Some(t(60)),
            end_time: None,
            exit_code: None,
            excluded_nodes: vec![],
            log_path: None,
            last_log_time: Some(t(1000)),
            last_iteration: Some(120),
            last_progress_time: Some(t(100)),
            updated_at: t(0),
        }
    }

    fn samples(values: &[f64]) -> Vec<ThroughputSample> {
        values
            .iter()
            .enumerate()
            .map(|(i, v)| ThroughputSample {
                workflow_id: 1,
                attempt_index: 0,
                time: t(i as i64 * 30),
                iteration: (i as u64 + 1) * 10,
                tflops_per_gpu: *v,
                rank: None,
                node: None,
            })
            .collect()
    }

    fn checkpoint(attempt_index: u32, iteration: u64, at: i64) -> Checkpoint {
        Checkpoint {
            workflow_id: 1,
            attempt_index,
            iteration,
            time: t(at),
            path: String::new(),
        }
    }

    fn evidence(rank: Option<u32>, text: &str) -> EvidenceLine {
        EvidenceLine {
            time: t(0),
            rank,
            text: text.into(),
        }
    }

    #[test]
    fn the_last_error_block_is_the_last_traceback_of_its_rank() {
        let lines = vec![
            evidence(Some(1), "Traceback (most recent call last):"),
            evidence(Some(1), "KeyError: 'old'"),
            evidence(Some(4), "Traceback (most recent call last):"),
            evidence(Some(5), "NCCL WARN unrelated"),
            evidence(Some(4), "  File \"train.py\", line 3, in <module>"),
            evidence(Some(4), "torch.OutOfMemoryError: CUDA out of memory."),
        ];
        let block = last_error_block(&lines);
        assert_eq!(block.len(), 3);
        assert!(block[0].starts_with("4: Traceback"));
        assert!(block[2].contains("OutOfMemoryError"));
    }

    #[test]
    fn without_a_traceback_the_block_is_the_last_error_lines() {
        let lines: Vec<EvidenceLine> = (0..30)
            .map(|n| evidence(None, &format!("error {n}")))
            .collect();
        let block = last_error_block(&lines);
        assert_eq!(block.len(), 10);
        assert_eq!(block[9], "error 29");
        assert_eq!(signal_name(9), Some("SIGKILL"));
    }

    #[test]
    fn no_progress_fires_after_the_timeout_and_not_before() {
        let config = DetectConfig::default();
        let running = attempt(JobState::Running);
        assert!(no_progress(&running, t(100 + 1799), &config).is_none());
        let finding = no_progress(&running, t(100 + 1800), &config).unwrap();
        assert_eq!(finding.kind, AnomalyKind::Hang);
        assert!(finding.summary.contains("iteration 120"));
        assert!(no_progress(&attempt(JobState::Completed), t(99_999), &config).is_none());
    }

    #[test]
    fn a_persistent_drop_fires_and_a_healthy_or_brief_dip_does_not() {
        let config = DetectConfig::default();
        let healthy = samples(&[
            300.0, 380.0, 395.0, 400.0, 402.0, 398.0, 401.0, 399.0, 400.0, 397.0, 403.0, 399.0,
            401.0, 400.0,
        ]);
        assert!(throughput_drop(&healthy, &healthy, &config).is_none());

        let dip = samples(&[
            300.0, 390.0, 400.0, 400.0, 401.0, 399.0, 400.0, 402.0, 280.0, 285.0, 400.0, 401.0,
            399.0, 400.0,
        ]);
        assert!(throughput_drop(&dip, &dip, &config).is_none());

        let dropped = samples(&[
            300.0, 390.0, 400.0, 400.0, 401.0, 399.0, 400.0, 402.0, 285.0, 287.0, 286.0, 284.0,
            288.0,
        ]);
        let finding = throughput_drop(&dropped, &dropped, &config).unwrap();
        assert_eq!(finding.kind, AnomalyKind::ThroughputDrop);
        assert!(finding.summary.contains("29%"), "{}", finding.summary);
        assert_eq!(finding.evidence.len(), 5);
    }

    #[test]
    fn too_few_samples_for_a_baseline_raise_nothing() {
        let config = DetectConfig::default();
        let few = samples(&[400.0, 100.0, 100.0]);
        assert!(throughput_drop(&few, &few, &config).is_none());
    }

    #[test]
    fn a_rank_that_stays_slow_is_a_straggler_on_its_node() {
        let config = DetectConfig::default();
        let nodes = ["node-01", "node-02", "node-03"].map(String::from).to_vec();
        let slow = StragglerReport {
            fastest_ms: 3000.0,
            fastest_rank: 0,
            slowest_ms: 4200.0,
            slowest_rank: 19,
        };
        let mut tracker = StragglerTracker::default();
        assert!(tracker.observe(&slow, &nodes, 8, &config).is_none());
        assert!(tracker.observe(&slow, &nodes, 8, &config).is_none());
        let finding = tracker.observe(&slow, &nodes, 8, &config).unwrap();
        assert_eq!(finding.node.as_deref(), Some("node-03"));
        // Raised once, not on every later report.
        assert!(tracker.observe(&slow, &nodes, 8, &config).is_none());
    }

    #[test]
    fn normal_jitter_or_a_changing_slowest_rank_is_not_a_straggler() {
        let config = DetectConfig::default();
        let nodes = ["node-01".to_string()];
        let mut tracker = StragglerTracker::default();
        for rank in 0..10 {
            let report = StragglerReport {
                fastest_ms: 3000.0,
                fastest_rank: 0,
                slowest_ms: if rank % 2 == 0 { 3100.0 } else { 3900.0 },
                slowest_rank: rank,
            };
            assert!(tracker.observe(&report, &nodes, 8, &config).is_none());
        }
    }

    #[test]
    fn a_checkpoint_stall_is_measured_against_the_observed_interval() {
        let config = DetectConfig::default();
        let running = attempt(JobState::Running);
        let checkpoints = vec![
            checkpoint(0, 100, 400),
            checkpoint(0, 200, 700),
            checkpoint(0, 300, 1000),
        ];
        assert!(checkpoint_stall(&running, &checkpoints, t(1000 + 600), &config).is_none());
        let finding = checkpoint_stall(&running, &checkpoints, t(1000 + 601), &config).unwrap();
        assert_eq!(finding.kind, AnomalyKind::CheckpointStall);
        // One checkpoint gives no interval yet.
        assert!(checkpoint_stall(&running, &checkpoints[..1], t(99_999), &config).is_none());
    }

    #[test]
    fn a_new_attempt_waits_from_its_own_start() {
        let config = DetectConfig::default();
        let mut second = attempt(JobState::Running);
        second.index = 1;
        second.start_time = Some(t(2000));
        let checkpoints = vec![checkpoint(0, 100, 400), checkpoint(0, 200, 700)];
        assert!(checkpoint_stall(&second, &checkpoints, t(2000 + 600), &config).is_none());
        assert!(checkpoint_stall(&second, &checkpoints, t(2000 + 601), &config).is_some());
    }

    #[test]
    fn stuck_pending_names_the_scheduler_reason() {
        let config = DetectConfig::default();
        let pending = attempt(JobState::Pending);
        assert!(stuck_pending(&pending, t(3599), &config).is_none());
        let finding = stuck_pending(&pending, t(3600), &config).unwrap();
        assert!(finding.summary.contains("Resources"));
        assert!(stuck_pending(&attempt(JobState::Running), t(99_999), &config).is_none());
    }
}
