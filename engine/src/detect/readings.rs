//! Rules over the numbers tools print in a log ([`crate::telemetry::readings`]): a GPU at its
//! temperature limit, an input pipeline that stalls the steps, one device far slower than its peers.
//! They explain a log that shows no failure but a run that was slow.

use std::collections::BTreeMap;

use crate::config::DetectConfig;
use crate::model::AnomalyKind;
use crate::telemetry::readings::Reading;

use super::{Finding, median};

/// A GPU ran at its temperature limit: a reading at or within a degree of the slowdown limit the same
/// report states (`nvidia-smi -q`), a margin to it of a degree or less, or, where no limit is stated,
/// a reading at or above `thermal_limit_c`.
pub fn hot_gpu(readings: &[Reading], config: &DetectConfig) -> Option<Finding> {
    let mut current: Option<f64> = None;
    // The hottest reading found at its limit, with what it says.
    let mut hottest: Option<(f64, String)> = None;
    let mut keep = |value: f64, what: String| {
        if hottest.as_ref().is_none_or(|(known, _)| value > *known) {
            hottest = Some((value, what));
        }
    };
    for reading in readings {
        match *reading {
            Reading::GpuTemp(value) => {
                current = Some(value);
                if value >= config.thermal_limit_c {
                    keep(
                        value,
                        format!(
                            "a GPU read {value} C, at or above the {} C limit",
                            config.thermal_limit_c
                        ),
                    );
                }
            }
            Reading::GpuTempUnread => current = None,
            // A limit belongs to the report's last reading (`nvidia-smi -q` lists the GPU's current
            // temperature first, then its limits).
            Reading::GpuTempLimit(limit) => {
                if let Some(value) = current
                    && value >= limit - 1.0
                {
                    keep(
                        value,
                        format!("a GPU read {value} C, its stated slowdown limit being {limit} C"),
                    );
                }
            }
            Reading::GpuTempMargin(margin) => {
                if margin <= 1.0 {
                    let value = current.unwrap_or(f64::MIN);
                    keep(
                        value,
                        format!("a GPU is {margin} C from its slowdown limit"),
                    );
                }
            }
            Reading::GpuUtil { .. } | Reading::DataWait(_) | Reading::DeviceThroughput { .. } => {}
        }
    }
    let (_, what) = hottest?;
    Some(Finding {
        kind: AnomalyKind::ThroughputDrop,
        summary: format!("thermal: {what}"),
        evidence: Vec::new(),
        node: None,
    })
}

/// The input pipeline stalls the steps: of at least three data waits, their median is
/// `input_stall_secs` or more (every batch waits that long), or at least two waits and a tenth of
/// them last `input_stall_secs` and ten times the median (workers that cannot keep up stall every few
/// steps). One stall (a cold cache, an epoch's new workers) is not enough.
pub fn input_stalls(waits: &[f64], config: &DetectConfig) -> Option<Finding> {
    const FEWEST: usize = 3;
    if waits.len() < FEWEST {
        return None;
    }
    let mut sorted = waits.to_vec();
    let typical = median(&mut sorted)?;
    let bound = config.input_stall_secs.max(typical * 10.0);
    let stalls: Vec<f64> = waits.iter().copied().filter(|w| *w >= bound).collect();
    let summary = if typical >= config.input_stall_secs {
        format!(
            "input stalls: batches waited {typical:.1} s for data (median of {} waits)",
            waits.len()
        )
    } else if stalls.len() >= 2 && stalls.len() * 10 >= waits.len() {
        let longest = stalls.iter().copied().fold(0.0, f64::max);
        format!(
            "input stalls: {} of {} batches waited {bound:.1} s or more for data (up to {longest:.1} s; \
             the median wait is {typical:.3} s)",
            stalls.len(),
            waits.len()
        )
    } else {
        return None;
    };
    Some(Finding {
        kind: AnomalyKind::ThroughputDrop,
        summary,
        evidence: Vec::new(),
        node: None,
    })
}

/// A GPU sits idle between busy stretches: of at least six utilisation samples of one GPU, a third or
/// more idle (5 % or less) and a fifth or more busy (50 % or more), switching between the two at least
/// twice. Its steps wait on their input (loading, preprocessing on the CPU) rather than on the GPU.
pub fn idle_between_steps(readings: &[Reading]) -> Option<Finding> {
    const FEWEST: usize = 6;
    let idle = |percent: f64| percent <= 5.0;
    let busy = |percent: f64| percent >= 50.0;
    let mut by_device: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for reading in readings {
        if let Reading::GpuUtil { device, percent } = reading {
            by_device.entry(device.as_str()).or_default().push(*percent);
        }
    }
    by_device.into_iter().find_map(|(device, samples)| {
        // Busy (true) or idle (false) of each sample that is either, the ones in between left out.
        let states: Vec<bool> = samples
            .iter()
            .filter(|p| idle(**p) || busy(**p))
            .map(|p| busy(*p))
            .collect();
        let busy = states.iter().filter(|b| **b).count();
        let idle = states.len() - busy;
        let switches = states.windows(2).filter(|pair| pair[0] != pair[1]).count();
        let n = samples.len();
        (n >= FEWEST && idle * 3 >= n && busy * 5 >= n && switches >= 2).then(|| Finding {
            kind: AnomalyKind::ThroughputDrop,
            summary: format!(
                "idle GPU: the GPU with {device} was idle in {idle} of {n} samples, between busy ones"
            ),
            evidence: Vec::new(),
            node: None,
        })
    })
}

/// Of at least four devices a per-device report measures in the same unit, fewer than half are
/// `straggler_percent` or more below the median of all (each device's own median when it reports
/// several times): those are slow.
pub fn slow_device(readings: &[Reading], config: &DetectConfig) -> Option<Finding> {
    const FEWEST: usize = 4;
    let mut by_unit: BTreeMap<&str, BTreeMap<&str, Vec<f64>>> = BTreeMap::new();
    for reading in readings {
        if let Reading::DeviceThroughput {
            device,
            value,
            unit,
        } = reading
        {
            by_unit
                .entry(unit)
                .or_default()
                .entry(device.as_str())
                .or_default()
                .push(*value);
        }
    }
    for (unit, devices) in by_unit {
        if devices.len() < FEWEST {
            continue;
        }
        let own: Vec<(&str, f64)> = devices
            .into_iter()
            .filter_map(|(device, mut values)| Some((device, median(&mut values)?)))
            .collect();
        let mut all: Vec<f64> = own.iter().map(|(_, value)| *value).collect();
        let Some(typical) = median(&mut all) else {
            continue;
        };
        let bound = typical * (1.0 - config.straggler_percent / 100.0);
        let slow: Vec<String> = own
            .iter()
            .filter(|(_, value)| *value < bound)
            .map(|(device, value)| format!("{device} at {value:.0} {unit}"))
            .collect();
        if !slow.is_empty() && slow.len() * 2 < own.len() {
            return Some(Finding {
                kind: AnomalyKind::Straggler,
                summary: format!(
                    "slow device: {} against a median of {typical:.0} {unit} over {} devices",
                    slow.join(", "),
                    own.len()
                ),
                evidence: Vec::new(),
                node: None,
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_at_its_stated_or_configured_limit_is_hot_and_a_cool_one_is_not() {
        let config = DetectConfig::default();
        let report = |current: f64, limit: f64| {
            vec![
                Reading::GpuTemp(current),
                Reading::GpuTempLimit(102.0),
                Reading::GpuTempLimit(limit),
            ]
        };
        let hot = hot_gpu(&report(56.0, 57.0), &config).unwrap();
        assert!(hot.summary.contains("56 C"), "{}", hot.summary);
        assert!(hot_gpu(&report(37.0, 85.0), &config).is_none());
        // A limit belongs to the GPU just read, not to one read later.
        assert!(
            hot_gpu(
                &[Reading::GpuTempLimit(57.0), Reading::GpuTemp(56.0)],
                &config
            )
            .is_none()
        );
        // Nor to the GPU after it, whose own temperature reads N/A.
        assert!(
            hot_gpu(
                &[
                    Reading::GpuTemp(56.0),
                    Reading::GpuTempUnread,
                    Reading::GpuTempLimit(57.0)
                ],
                &config
            )
            .is_none()
        );
        assert!(hot_gpu(&[Reading::GpuTemp(94.0)], &config).is_some());
        assert!(hot_gpu(&[Reading::GpuTemp(83.0)], &config).is_none());
        assert!(
            hot_gpu(
                &[Reading::GpuTemp(36.0), Reading::GpuTempMargin(50.0)],
                &config
            )
            .is_none()
        );
        assert!(
            hot_gpu(
                &[Reading::GpuTemp(86.0), Reading::GpuTempMargin(0.0)],
                &config
            )
            .is_some()
        );
    }

    #[test]
    fn stalls_every_few_batches_or_on_every_batch_are_input_stalls_and_one_is_not() {
        let config = DetectConfig::default();
        let mut waits = vec![0.02; 30];
        assert!(input_stalls(&waits, &config).is_none());
        // One stall, as when an epoch's workers start.
        waits[10] = 40.0;
        assert!(input_stalls(&waits, &config).is_none());
        // One batch in eight waits half a minute.
        for at in [0, 8, 16, 24] {
            waits[at] = 35.0;
        }
        let finding = input_stalls(&waits, &config).unwrap();
        assert!(finding.summary.contains("5 of 30"), "{}", finding.summary);
        // Every batch waits seconds.
        assert!(input_stalls(&[6.5, 8.8, 5.0, 33.7, 38.0], &config).is_some());
        assert!(input_stalls(&[6.5, 8.8], &config).is_none());
    }

    fn utilisation(device: &str, samples: &[f64]) -> Vec<Reading> {
        samples
            .iter()
            .map(|percent| Reading::GpuUtil {
                device: device.into(),
                percent: *percent,
            })
            .collect()
    }

    #[test]
    fn a_gpu_idle_between_busy_samples_waits_on_its_input_and_a_busy_or_idle_one_does_not() {
        let waiting = [0.0, 31.0, 0.0, 95.0, 0.0, 24.0, 0.0, 94.0, 0.0, 0.0];
        let finding = idle_between_steps(&utilisation("5484MiB / 16130MiB", &waiting)).unwrap();
        assert!(finding.summary.contains("6 of 10"), "{}", finding.summary);
        assert!(idle_between_steps(&utilisation("a", &[97.0; 10])).is_none());
        assert!(idle_between_steps(&utilisation("a", &[0.0; 10])).is_none());
        // Idle until it started, then busy: one switch is a start, not a wait.
        let started = [0.0, 0.0, 0.0, 0.0, 98.0, 97.0, 99.0, 98.0];
        assert!(idle_between_steps(&utilisation("a", &started)).is_none());
        // Eight idle GPUs and one busy one, each sampled once: no GPU alternates.
        let mut one_each = Vec::new();
        for n in 0..9 {
            one_each.extend(utilisation(
                &format!("{n}MiB / 80000MiB"),
                &[if n == 0 { 99.0 } else { 0.0 }],
            ));
        }
        assert!(idle_between_steps(&one_each).is_none());
    }

    fn throughput(values: &[f64]) -> Vec<Reading> {
        values
            .iter()
            .enumerate()
            .map(|(index, value)| Reading::DeviceThroughput {
                device: format!("ADAPTER {index}"),
                value: *value,
                unit: "GFLOP/s",
            })
            .collect()
    }

    #[test]
    fn one_device_far_below_its_peers_is_slow_and_even_peers_are_not() {
        let config = DetectConfig::default();
        let slow = slow_device(
            &throughput(&[6698.0, 19239.0, 19148.0, 19256.0, 19190.0, 19096.0]),
            &config,
        )
        .unwrap();
        assert!(
            slow.summary.contains("ADAPTER 0 at 6698"),
            "{}",
            slow.summary
        );
        assert!(slow_device(&throughput(&[19000.0, 18500.0, 19200.0, 19100.0]), &config).is_none());
        // Too few devices to tell which is odd.
        assert!(slow_device(&throughput(&[6698.0, 19239.0, 19148.0]), &config).is_none());
        // Half of them slow: no one device is the odd one.
        assert!(slow_device(&throughput(&[10.0, 10.0, 20.0, 20.0]), &config).is_none());
    }
}
