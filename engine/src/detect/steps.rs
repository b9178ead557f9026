//! Rules over the step times progress lines report: a run whose input pipeline sets the pace, and a
//! run whose steps became much slower than they were and stayed so (with the throughput rule's
//! windows: `throughput_warmup_samples`, `throughput_baseline_samples`, `throughput_drop_samples`).

use crate::config::DetectConfig;
use crate::model::AnomalyKind;
use crate::telemetry::step_timing::StepTiming;

use super::{Finding, median};

/// Over the last `input_bound_reports` reports (or all, when there are fewer but at least three),
/// loading data took at least `input_bound_percent` of the time, and more than one of them waited on
/// it: the GPUs wait on the input pipeline. A pool of loader workers that cannot keep up shows as a
/// long wait every few steps rather than on each, so the window's total counts; one cold-cache stall
/// is not enough.
pub fn input_bound(timings: &[StepTiming], config: &DetectConfig) -> Option<Finding> {
    const FEWEST: usize = 3;
    let with_data: Vec<(f64, f64)> = timings
        .iter()
        .filter_map(|t| Some((t.step_secs, t.data_secs?)))
        .collect();
    if with_data.len() < FEWEST {
        return None;
    }
    let window = config.input_bound_reports.max(FEWEST).min(with_data.len());
    let recent = &with_data[with_data.len() - window..];
    let (step, data) = recent
        .iter()
        .fold((0.0, 0.0), |(step, data), (s, d)| (step + s, data + d));
    let share = data / step * 100.0;
    let waiting = recent
        .iter()
        .filter(|(step, data)| data / step * 100.0 >= config.input_bound_percent)
        .count();
    if share < config.input_bound_percent || waiting < 2 {
        return None;
    }
    Some(Finding {
        kind: AnomalyKind::ThroughputDrop,
        summary: format!(
            "input-bound: waiting for data took {share:.0}% of the time of the last {window} reports"
        ),
        evidence: Vec::new(),
        node: None,
    })
}

/// After the warm-up, the median step time of the baseline reports; the last
/// `throughput_drop_samples` reports all took at least `step_slowdown_factor` times as long.
pub fn step_slowdown(timings: &[StepTiming], config: &DetectConfig) -> Option<Finding> {
    let warmup = config.throughput_warmup_samples;
    let baseline_end = warmup + config.throughput_baseline_samples.max(1);
    let needed = config.throughput_drop_samples.max(1);
    if timings.len() < baseline_end + needed {
        return None;
    }
    let mut baseline: Vec<f64> = timings[warmup..baseline_end]
        .iter()
        .map(|t| t.step_secs)
        .collect();
    let baseline = median(&mut baseline)?;
    let recent = &timings[timings.len() - needed..];
    if !recent
        .iter()
        .all(|t| t.step_secs >= baseline * config.step_slowdown_factor)
    {
        return None;
    }
    let mut slow: Vec<f64> = recent.iter().map(|t| t.step_secs).collect();
    let now = median(&mut slow)?;
    Some(Finding {
        kind: AnomalyKind::ThroughputDrop,
        summary: format!(
            "slowdown: steps take {:.1}x as long as at the start ({now:.3} s against {baseline:.3} s) in the last {needed} reports",
            now / baseline
        ),
        evidence: Vec::new(),
        node: None,
    })
}

/// Data waits an attempt's input-stall rule looks back over.
const WAITS_KEPT: usize = 64;

/// The step timings of one running attempt, as much as the rules need: its first reports (warm-up and
/// baseline) and its latest ones, with its latest data waits. Fed read by read; a finding is returned
/// once, when it first holds.
#[derive(Debug, Default)]
pub struct StepWatch {
    head: Vec<StepTiming>,
    tail: std::collections::VecDeque<StepTiming>,
    /// The last [`WAITS_KEPT`] data waits, from step lines and from the loaders' own lines.
    waits: std::collections::VecDeque<f64>,
    raised: bool,
}

impl StepWatch {
    /// Takes in a read's timings and the data waits its loaders reported on their own lines
    /// ([`crate::telemetry::readings::Reading::DataWait`]); a finding the first time a rule holds.
    pub fn observe(
        &mut self,
        timings: &[StepTiming],
        loader_waits: &[f64],
        config: &DetectConfig,
    ) -> Option<Finding> {
        if (timings.is_empty() && loader_waits.is_empty()) || self.raised {
            return None;
        }
        let waits = timings.iter().filter_map(|t| t.data_secs);
        for wait in waits.chain(loader_waits.iter().copied()) {
            self.waits.push_back(wait);
            if self.waits.len() > WAITS_KEPT {
                self.waits.pop_front();
            }
        }
        let head = config.throughput_warmup_samples + config.throughput_baseline_samples.max(1);
        let keep = config
            .input_bound_reports
            .max(config.throughput_drop_samples)
            .max(1);
        for timing in timings {
            if self.head.len() < head {
                self.head.push(*timing);
            } else {
                self.tail.push_back(*timing);
                if self.tail.len() > keep {
                    self.tail.pop_front();
                }
            }
        }
        let all: Vec<StepTiming> = self.head.iter().chain(&self.tail).copied().collect();
        let waits: Vec<f64> = self.waits.iter().copied().collect();
        let finding = input_bound(&all, config)
            .or_else(|| super::readings::input_stalls(&waits, config))
            .or_else(|| step_slowdown(&all, config));
        self.raised = finding.is_some();
        finding
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn steps(values: &[(f64, Option<f64>)]) -> Vec<StepTiming> {
        values
            .iter()
            .map(|&(step_secs, data_secs)| StepTiming {
                step_secs,
                data_secs,
            })
            .collect()
    }

    #[test]
    fn a_pipeline_that_sets_the_pace_is_input_bound_and_one_slow_batch_is_not() {
        let config = DetectConfig::default();
        let mut log: Vec<(f64, Option<f64>)> = vec![(0.2, Some(0.01)); 10];
        assert!(input_bound(&steps(&log), &config).is_none());
        // One batch waits on a cold cache: no finding.
        log.push((2.0, Some(1.9)));
        log.push((0.2, Some(0.01)));
        assert!(input_bound(&steps(&log), &config).is_none());
        // Every recent step waits on data.
        let mut waiting = log.clone();
        waiting.extend(vec![(8.7, Some(8.6)); 3]);
        let finding = input_bound(&steps(&waiting), &config).unwrap();
        assert!(
            finding.summary.starts_with("input-bound"),
            "{}",
            finding.summary
        );
        // Every fourth step waits long (four loader workers that cannot keep up).
        let periodic: Vec<(f64, Option<f64>)> = (0..16)
            .map(|i| {
                if i % 4 == 0 {
                    (15.0, Some(14.9))
                } else {
                    (0.15, Some(0.001))
                }
            })
            .collect();
        assert!(input_bound(&steps(&periodic), &config).is_some());
        // Too few reports with a data time say nothing.
        let two = [(1.0, Some(0.9)), (1.0, Some(0.9))];
        assert!(input_bound(&steps(&two), &config).is_none());
    }

    #[test]
    fn a_watch_fed_read_by_read_finds_a_slowdown_once_and_keeps_little() {
        let config = DetectConfig::default();
        let mut watch = StepWatch::default();
        let steady = steps(&[(30.0, None); 40]);
        for read in steady.chunks(7) {
            assert!(watch.observe(read, &[], &config).is_none());
        }
        assert!(
            watch.tail.len()
                <= config
                    .input_bound_reports
                    .max(config.throughput_drop_samples)
        );
        let slow = steps(&[(95.0, None); 5]);
        let finding = watch.observe(&slow, &[], &config).unwrap();
        assert!(
            finding.summary.starts_with("slowdown"),
            "{}",
            finding.summary
        );
        // Raised once per attempt.
        assert!(watch.observe(&slow, &[], &config).is_none());
    }

    #[test]
    fn a_watch_reads_the_loaders_own_waits_beside_the_step_lines() {
        let config = DetectConfig::default();
        let mut watch = StepWatch::default();
        assert!(watch.observe(&[], &[0.02; 15], &config).is_none());
        assert!(watch.observe(&[], &[31.0], &config).is_none());
        let finding = watch.observe(&[], &[0.02, 0.02, 33.0], &config).unwrap();
        assert!(
            finding.summary.starts_with("input stalls"),
            "{}",
            finding.summary
        );
        assert!(watch.waits.len() <= WAITS_KEPT);
    }

    #[test]
    fn steps_that_stay_several_times_slower_are_a_slowdown_and_jitter_is_not() {
        let config = DetectConfig::default();
        let mut log: Vec<(f64, Option<f64>)> =
            (0..10).map(|i| (32.0 + f64::from(i % 3), None)).collect();
        assert!(step_slowdown(&steps(&log), &config).is_none());
        // 50 % slower is jitter or load, not a slowdown.
        log.extend(vec![(48.0, None); config.throughput_drop_samples]);
        assert!(step_slowdown(&steps(&log), &config).is_none());
        log.extend(vec![(102.0, None); config.throughput_drop_samples]);
        let finding = step_slowdown(&steps(&log), &config).unwrap();
        assert!(finding.summary.contains("3.1x"), "{}", finding.summary);
        // A slow warm-up (compilation, cold caches) is not the baseline: it would hide the slowdown.
        let warm: Vec<(f64, Option<f64>)> = vec![(300.0, None); config.throughput_warmup_samples]
            .into_iter()
            .chain(vec![(30.0, None); config.throughput_baseline_samples])
            .chain(vec![(100.0, None); config.throughput_drop_samples])
            .collect();
        assert!(step_slowdown(&steps(&warm), &config).is_some());
    }
}
