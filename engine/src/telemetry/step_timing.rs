//! How long one training step took, and how much of it went to waiting for data, as trainers print
//! it in their progress lines:
//!
//! | trainer | example |
//! | --- | --- |
//! | PyTorch's examples, timm and the many scripts built on them | `Time 0.414 (0.414)  Data 0.001 (0.001)`, `Time: 0.412s, 310.56/s ... Data: 0.012 (0.015)` |
//! | mmengine, mmcv, Detectron2 | `time: 0.5076  data_time: 0.0192`, `time: 0.512, data_time: 0.023` |
//! | scripts that time each step | `Iteration took 32.709 s.`, `step took 812 ms` |
//!
//! The first number after a key is the step's own (the one in parentheses is a running average).

/// One step's wall time and, when the line says, the part of it spent loading data (seconds).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepTiming {
    pub step_secs: f64,
    pub data_secs: Option<f64>,
}

/// The keys of a step timer's line: `Iteration took 32.7 s`.
const TOOK: &[&str] = &[
    "Iteration took",
    "iteration took",
    "Step took",
    "step took",
    "Batch took",
    "batch took",
];

/// Literals one of which every line [`parse`] reads holds.
pub fn markers() -> impl Iterator<Item = &'static str> {
    ["Data ", "Data:", "data_time:"]
        .into_iter()
        .chain(TOOK.iter().copied())
}

/// The step timing a progress line's message reports; None for any other line.
pub fn parse(message: &str) -> Option<StepTiming> {
    if let Some(data) = number_after_key(message, "data_time:") {
        let step = number_after_key(message, "time:")?;
        return timing(step, Some(data));
    }
    if let Some(data) = number_after_key(message, "Data") {
        let step = number_after_key(message, "Time")?;
        return timing(step, Some(data));
    }
    let (_, after) = TOOK.iter().find_map(|key| message.split_once(key))?;
    let (value, rest) = leading_number(after.trim_start())?;
    let rest = rest.trim_start();
    let secs = if rest.starts_with("ms") {
        value / 1000.0
    } else if rest.starts_with('s') {
        value
    } else {
        return None;
    };
    timing(secs, None)
}

/// A timing that makes sense: a positive step, data not longer than the step (with rounding).
fn timing(step_secs: f64, data_secs: Option<f64>) -> Option<StepTiming> {
    let sane = step_secs.is_finite()
        && step_secs > 0.0
        && data_secs.is_none_or(|data| data.is_finite() && data >= 0.0 && data <= step_secs * 1.05);
    sane.then_some(StepTiming {
        step_secs,
        data_secs,
    })
}

/// The number after `key` where `key` starts a word (`time:` is not found inside `data_time:`),
/// after an optional colon and spaces, with an optional `s` unit.
fn number_after_key(message: &str, key: &str) -> Option<f64> {
    let mut from = 0;
    while let Some(at) = message.get(from..).and_then(|rest| rest.find(key)) {
        let start = from + at;
        from = start + key.len();
        let word_start = message[..start]
            .chars()
            .next_back()
            .is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        if !word_start {
            continue;
        }
        let after = &message[from..];
        let after = after.strip_prefix(':').unwrap_or(after);
        if !after.starts_with([' ', '\t']) {
            continue;
        }
        if let Some((value, _)) = leading_number(after.trim_start()) {
            return Some(value);
        }
    }
    None
}

/// A decimal number at the start of `text`, and the rest.
fn leading_number(text: &str) -> Option<(f64, &str)> {
    let end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let value = text.get(..end)?.parse().ok()?;
    Some((value, &text[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(message: &str) -> Option<(f64, Option<f64>)> {
        parse(message).map(|t| (t.step_secs, t.data_secs))
    }

    #[test]
    fn reads_the_step_and_data_time_of_each_trainer_s_progress_line() {
        assert_eq!(
            secs(
                "Epoch: [1][100/5005]\tTime 8.719 (0.361)\tData 8.597 (0.230)\tLoss 1.2987 (1.2753)"
            ),
            Some((8.719, Some(8.597)))
        );
        assert_eq!(
            secs(
                "Train: 3 [ 200/1251 ( 16%)]  Loss: 3.12 (3.20)  Time: 0.412s,  310.56/s  (0.420s,  304.1/s)  LR: 1.000e-03  Data: 0.012 (0.015)"
            ),
            Some((0.412, Some(0.012)))
        );
        assert_eq!(
            secs(
                "Epoch(train) [1][ 50/500]  lr: 2.0e-02  eta: 0:10:11  time: 0.5076  data_time: 0.0192  memory: 3500  loss: 1.12"
            ),
            Some((0.5076, Some(0.0192)))
        );
        assert_eq!(
            secs("iter: 19  total_loss: 2.1  time: 0.3852  data_time: 0.0110  lr: 0.0002"),
            Some((0.3852, Some(0.0110)))
        );
        assert_eq!(secs("Iteration took 32.709 s."), Some((32.709, None)));
        assert_eq!(secs("step took 812 ms"), Some((0.812, None)));
    }

    #[test]
    fn other_lines_and_nonsense_values_give_nothing() {
        for message in [
            "Data loaded from /datasets/imagenet",
            "DataLoader worker (pid 42) is killed by signal: Killed.",
            "Time 0.5 with no data field",
            "data_time: 0.2 without the step's time",
            "Time 0.0 (0.0)  Data 0.0 (0.0)",
            "Time 0.1 (0.1)  Data 5.0 (5.0)",
            "Iteration took forever",
            "Iteration took 3 minutes",
            "Metadata 0.5 Timeout 3",
        ] {
            assert_eq!(parse(message), None, "{message}");
        }
    }
}
