//! Megatron's straggler detector summary (`--log-straggler`), one line per report interval:
//! `| MnRtt/Rnk: 3012.40ms/3 | MxRtt/Rnk: 4217.36ms/20 | MnPwr/Rnk: ... | MxTmp/Rnk: 86C/20 | ...`.

/// The fastest and slowest rank of one report interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StragglerReport {
    pub fastest_ms: f64,
    pub fastest_rank: u32,
    pub slowest_ms: f64,
    pub slowest_rank: u32,
}

impl StragglerReport {
    /// How much slower the slowest rank is than the fastest, in percent.
    pub fn spread_percent(&self) -> f64 {
        if self.fastest_ms <= 0.0 {
            return 0.0;
        }
        (self.slowest_ms / self.fastest_ms - 1.0) * 100.0
    }
}

/// What every report line holds.
pub const MARKER: &str = "MxRtt/Rnk:";

/// Parses a straggler report line's message; None for any other line (cheaply).
pub fn parse(message: &str) -> Option<StragglerReport> {
    if !message.contains(MARKER) {
        return None;
    }
    let (fastest_ms, fastest_rank) = field(message, "MnRtt/Rnk:")?;
    let (slowest_ms, slowest_rank) = field(message, "MxRtt/Rnk:")?;
    Some(StragglerReport {
        fastest_ms,
        fastest_rank,
        slowest_ms,
        slowest_rank,
    })
}

/// `MxRtt/Rnk: 4217.36ms/20` → (4217.36, 20).
fn field(message: &str, key: &str) -> Option<(f64, u32)> {
    let start = message.find(key)? + key.len();
    let rest = message[start..].trim_start();
    let end = rest.find(['|', ' ']).unwrap_or(rest.len());
    let (value, rank) = rest[..end].split_once('/')?;
    let value = value.trim_end_matches("ms").parse::<f64>().ok()?;
    (value.is_finite() && value >= 0.0).then_some(())?;
    Some((value, rank.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_fastest_and_slowest_rank() {
        let line = " [2026-01-05 08:14:02] | MnRtt/Rnk: 3012.40ms/3 | MxRtt/Rnk: 4217.36ms/20 | MnPwr/Rnk: 598000mW/20 | MxTmp/Rnk: 86C/20 |";
        let report = parse(line).unwrap();
        assert_eq!(report.fastest_rank, 3);
        assert_eq!(report.slowest_rank, 20);
        assert!((report.spread_percent() - 40.0).abs() < 0.1);
    }

    #[test]
    fn other_lines_and_garbled_reports_are_ignored() {
        assert!(parse("iteration 10/100 | elapsed time per iteration (ms): 3000").is_none());
        assert!(parse("| MnRtt/Rnk: x/3 | MxRtt/Rnk: 4217.36ms/20 |").is_none());
        assert!(parse("| MnRtt/Rnk: 1ms/3 | MxRtt/Rnk: 4217.36ms/-1 |").is_none());
        assert!(parse("MxRtt/Rnk:").is_none());
    }
}
