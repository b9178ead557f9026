//! `runguard capacity`: the capacity report over the recorded history, as text, Markdown or JSON.

mod render;

pub use render::{markdown, text};

use std::path::Path;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, TimeDelta, Utc};
use runguard_engine::capacity::{self, CapacityReport, Window};
use runguard_engine::store::Store;

/// The options of `runguard capacity`.
#[derive(Debug, Clone, clap::Args)]
pub struct CapacityArgs {
    /// How far back the report looks: a number and a unit, m (minutes), h, d or w.
    #[arg(long, default_value = "30d", value_parser = parse_span)]
    pub since: TimeDelta,
    /// The end of the window (RFC 3339; default: now).
    #[arg(long)]
    pub until: Option<DateTime<Utc>>,
    /// How long a person takes to notice a failure and requeue it by hand: the baseline the downtime
    /// runguard saved is measured against.
    #[arg(long, default_value = "2h", value_parser = parse_span)]
    pub baseline: TimeDelta,
    /// Report on a simulated cluster (16 nodes, generated from this seed, ending at `--until` or the
    /// last midnight) instead of the store: what the report looks like before a month of history has
    /// been recorded.
    #[arg(long, value_name = "SEED")]
    pub simulated: Option<u64>,
    /// Print JSON instead of text.
    #[arg(long, conflicts_with = "markdown")]
    pub json: bool,
    /// Print Markdown instead of text.
    #[arg(long)]
    pub markdown: bool,
}

/// `30d`, `12h`, `90m`, `2w` as a span of time.
pub fn parse_span(text: &str) -> Result<TimeDelta, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} has no unit: write e.g. 30d, 12h or 90m"))?;
    let (number, unit) = text.split_at(split);
    let number: i64 = number
        .parse()
        .map_err(|_| format!("{text:?} does not start with a whole number"))?;
    let span = match unit {
        "m" | "min" => TimeDelta::try_minutes(number),
        "h" => TimeDelta::try_hours(number),
        "d" => TimeDelta::try_days(number),
        "w" => TimeDelta::try_weeks(number),
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {text:?}: use m, h, d or w"
            ));
        }
    };
    match span {
        Some(span) if span > TimeDelta::zero() => Ok(span),
        _ => Err(format!("{text:?} is not a usable span of time")),
    }
}

/// Builds the report from the store at `store_path` and prints it.
pub fn run(store_path: &Path, args: &CapacityArgs) -> Result<()> {
    if let Some(seed) = args.simulated {
        return run_simulated(seed, args);
    }
    if !store_path.exists() {
        bail!(
            "no store at {}: nothing has been recorded yet (run `runguard run` for a while)",
            store_path.display()
        );
    }
    let store = Store::open(store_path)?;
    let now = Utc::now();
    let to = args.until.unwrap_or(now);
    let window = Window {
        from: to - args.since,
        to,
    };
    let history = store
        .db()
        .capacity_history(window.from, window.to)
        .with_context(|| format!("reading the history in {}", store_path.display()))?;
    let report = capacity::build(&history, window, args.baseline, now);
    print(&report, args)
}

/// The simulated month of `seed`, written to a store in memory as the engine would have recorded it,
/// and reported on up to its end.
fn run_simulated(seed: u64, args: &CapacityArgs) -> Result<()> {
    let days = u32::try_from(args.since.num_days().clamp(1, 366)).unwrap_or(30);
    let to = args.until.unwrap_or_else(|| {
        Utc::now()
            .date_naive()
            .and_hms_opt(0, 0, 0)
            .map_or_else(Utc::now, |midnight| midnight.and_utc())
    });
    let from = to - TimeDelta::days(i64::from(days));
    let month = capacity::simulated::month(seed, from, days);
    let mut store = Store::open_in_memory()?;
    month.store(&mut store)?;
    let history = store.db().capacity_history(from, to)?;
    let report = capacity::build(&history, Window { from, to }, args.baseline, to);
    print(&report, args)
}

fn print(report: &CapacityReport, args: &CapacityArgs) -> Result<()> {
    if args.json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else if args.markdown {
        print!("{}", markdown(report));
    } else {
        print!("{}", text(report));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_read_with_their_units() {
        assert_eq!(parse_span("30d"), Ok(TimeDelta::days(30)));
        assert_eq!(parse_span("12h"), Ok(TimeDelta::hours(12)));
        assert_eq!(parse_span("90m"), Ok(TimeDelta::minutes(90)));
        assert_eq!(parse_span("2w"), Ok(TimeDelta::weeks(2)));
        assert!(parse_span("30").is_err());
        assert!(parse_span("d").is_err());
        assert!(parse_span("0d").is_err());
        assert!(parse_span("3y").is_err());
        assert!(parse_span("99999999999999w").is_err());
    }
}
