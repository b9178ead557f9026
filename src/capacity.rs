//! `runguard capacity`: the capacity report over the recorded history, as text, Markdown or JSON.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, TimeDelta, Utc};
use runguard_engine::capacity::{self, CapacityReport, NodeUse, Window, peaks::HourSpan};
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

/// Minutes as minutes, or as hours from two hours on.
fn minutes(value: f64) -> String {
    if value >= 120.0 {
        format!("{:.1} h", value / 60.0)
    } else {
        format!("{value:.0} min")
    }
}

/// Eight levels of a bar, for a line of values.
fn sparkline(values: &[Option<f64>]) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    let max = values.iter().flatten().copied().fold(0.0f64, f64::max);
    values
        .iter()
        .map(|value| match value {
            None => ' ',
            Some(_) if max <= 0.0 => BARS[0],
            Some(v) => BARS[((v / max) * 7.0).round().clamp(0.0, 7.0) as usize],
        })
        .collect()
}

fn peak_hour(values: &[Option<f64>]) -> Option<(usize, f64)> {
    values
        .iter()
        .enumerate()
        .filter_map(|(h, v)| v.map(|v| (h, v)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
}

fn window_line(report: &CapacityReport) -> String {
    let days = capacity::history::hours(report.window.to - report.window.from) / 24.0;
    format!(
        "{} – {} ({days:.1} days)",
        report.window.from.format("%Y-%m-%d %H:%M UTC"),
        report.window.to.format("%Y-%m-%d %H:%M UTC"),
    )
}

fn state_share(report: &CapacityReport) -> Vec<(NodeUse, f64, f64)> {
    let total: f64 = report
        .idle
        .gpu_hours_by_state
        .iter()
        .map(|s| s.gpu_hours)
        .sum();
    report
        .idle
        .gpu_hours_by_state
        .iter()
        .map(|s| {
            let share = if total > 0.0 {
                s.gpu_hours / total
            } else {
                0.0
            };
            (s.state, s.gpu_hours, share)
        })
        .collect()
}

fn saved_line(report: &CapacityReport) -> String {
    let saved = &report.saved;
    format!(
        "{} recover{}: runguard's response (detection, analysis, requeue) averaged {} against a baseline of {} for a person noticing the failure and requeuing by hand (queue wait and checkpoint load are the same either way): {:.1} h of downtime saved, {:.0} GPU-hours.",
        saved.recoveries,
        if saved.recoveries == 1 { "y" } else { "ies" },
        minutes(saved.mean_response_minutes),
        minutes(saved.baseline_minutes),
        saved.saved_hours,
        saved.saved_gpu_hours,
    )
}

fn lost_line(report: &CapacityReport) -> String {
    let lost = &report.lost;
    let worst = lost
        .by_node
        .first()
        .map(|n| {
            format!(
                "; most on {} ({} span{}, {:.0} GPU-hours)",
                n.node,
                n.spans,
                if n.spans == 1 { "" } else { "s" },
                n.gpu_hours
            )
        })
        .unwrap_or_default();
    format!(
        "{} quarantine span{}, {:.0} node-hours, {:.0} GPU-hours ({:.1}% of capacity){worst}.",
        lost.spans,
        if lost.spans == 1 { "" } else { "s" },
        lost.node_hours,
        lost.gpu_hours,
        report.lost_share * 100.0,
    )
}

fn peak_lines(report: &CapacityReport) -> Vec<String> {
    let mut lines: Vec<String> = report
        .peaks
        .windows
        .iter()
        .map(|w| {
            format!(
                "peak {}: {:.0} GPUs asked for{}",
                w.hours,
                w.mean_demand_gpus,
                w.mean_capacity_gpus
                    .map(|c| format!(" against {c:.0} in service"))
                    .unwrap_or_default()
            )
        })
        .collect();
    if lines.is_empty() {
        lines.push("no hour of the day asked for more GPUs than were in service".to_string());
    }
    for partition in &report.peaks.partitions {
        for w in &partition.windows {
            lines.push(format!(
                "partition {}: peak {}: {:.0} GPUs asked for{}",
                partition.partition,
                w.hours,
                w.mean_demand_gpus,
                w.mean_capacity_gpus
                    .map(|c| format!(" against {c:.0} in service"))
                    .unwrap_or_default()
            ));
        }
    }
    if let Some(quiet) = report.peaks.quiet_slot {
        lines.push(format!("quietest {} h: {quiet}", hours_of(quiet)));
    }
    lines
}

fn hours_of(span: HourSpan) -> usize {
    span.hours().count()
}

/// The report as text for a terminal.
pub fn text(report: &CapacityReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Capacity {}\n", window_line(report));
    let _ = writeln!(out, "Queue wait (attempts submitted in the window)");
    let _ = writeln!(
        out,
        "  {:<12} {:>8} {:>8} {:>9} {:>9} {:>9}",
        "partition", "started", "waiting", "mean", "median", "p90"
    );
    for waits in std::iter::once(&report.waits.all)
        .chain(&report.waits.partitions)
        .chain(std::iter::once(&report.waits.requeued))
    {
        let _ = writeln!(
            out,
            "  {:<12} {:>8} {:>8} {:>9} {:>9} {:>9}",
            waits.partition,
            waits.started,
            waits.still_waiting,
            minutes(waits.mean_minutes),
            minutes(waits.median_minutes),
            minutes(waits.p90_minutes)
        );
    }
    let _ = writeln!(
        out,
        "  wait by hour of submission, UTC: 00 |{}| 23{}",
        sparkline(&report.waits.all.by_hour),
        peak_hour(&report.waits.all.by_hour)
            .map(|(h, v)| format!("  (longest {} at {h:02}:00)", minutes(v)))
            .unwrap_or_default()
    );
    if !report.waits.reasons.is_empty() {
        let reasons: Vec<String> = report
            .waits
            .reasons
            .iter()
            .map(|r| format!("{} {:.0}%", r.reason, r.share * 100.0))
            .collect();
        let _ = writeln!(out, "  pending time by reason: {}", reasons.join(", "));
    }
    let _ = writeln!(
        out,
        "\nPeak demand (GPUs running + waiting, by hour of day)"
    );
    let demand: Vec<Option<f64>> = report
        .peaks
        .demand_by_hour
        .iter()
        .map(|d| Some(*d))
        .collect();
    let _ = writeln!(out, "  demand, UTC: 00 |{}| 23", sparkline(&demand));
    for line in peak_lines(report) {
        let _ = writeln!(out, "  {line}");
    }
    let _ = writeln!(out, "\nGPUs idle while jobs wait");
    let _ = writeln!(
        out,
        "  {:.0} GPU-hours free on nodes that could have run a waiting job, over {:.0} h with jobs waiting",
        report.idle.idle_while_waiting_gpu_hours, report.idle.hours_with_waiting
    );
    let _ = writeln!(
        out,
        "  free GPUs while waiting, UTC: 00 |{}| 23",
        sparkline(&report.idle.idle_while_waiting_by_hour)
    );
    let states: Vec<String> = state_share(report)
        .into_iter()
        .map(|(state, hours, share)| {
            format!("{} {hours:.0} ({:.0}%)", state.as_str(), share * 100.0)
        })
        .collect();
    let _ = writeln!(out, "  GPU-hours by node state: {}", states.join(", "));
    let _ = writeln!(out, "\nCapacity lost to quarantined nodes");
    let _ = writeln!(out, "  {}", lost_line(report));
    let _ = writeln!(out, "\nDowntime saved");
    let _ = writeln!(out, "  {}", saved_line(report));
    let _ = writeln!(out, "\nRecommendations");
    for sentence in &report.recommendations.sentences {
        let _ = writeln!(out, "  - {sentence}");
    }
    out
}

/// The report as Markdown, for a wiki page or a ticket.
pub fn markdown(report: &CapacityReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Capacity {}\n", window_line(report));
    let _ = writeln!(out, "## Queue wait\n");
    let _ = writeln!(
        out,
        "| partition | started | still waiting | mean | median | p90 |\n|---|---:|---:|---:|---:|---:|"
    );
    for waits in std::iter::once(&report.waits.all)
        .chain(&report.waits.partitions)
        .chain(std::iter::once(&report.waits.requeued))
    {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} |",
            waits.partition,
            waits.started,
            waits.still_waiting,
            minutes(waits.mean_minutes),
            minutes(waits.median_minutes),
            minutes(waits.p90_minutes)
        );
    }
    let _ = writeln!(
        out,
        "\n### By hour of submission (UTC)\n\n| hour | mean wait | GPUs asked for | GPUs in service | free GPUs while jobs wait |\n|---:|---:|---:|---:|---:|"
    );
    let cell = |value: Option<f64>| value.map_or_else(|| "–".to_string(), |v| format!("{v:.0}"));
    for hour in 0..24 {
        let _ = writeln!(
            out,
            "| {hour:02}:00 | {} | {:.0} | {} | {} |",
            report.waits.all.by_hour[hour].map_or_else(|| "–".to_string(), minutes),
            report.peaks.demand_by_hour[hour],
            cell(report.peaks.capacity_by_hour[hour]),
            cell(report.idle.idle_while_waiting_by_hour[hour]),
        );
    }
    if !report.waits.reasons.is_empty() {
        let _ = writeln!(
            out,
            "\n### Pending time by reason\n\n| reason | job-hours | share |\n|---|---:|---:|"
        );
        for reason in &report.waits.reasons {
            let _ = writeln!(
                out,
                "| {} | {:.1} | {:.0}% |",
                reason.reason,
                reason.job_hours,
                reason.share * 100.0
            );
        }
    }
    let _ = writeln!(out, "\n## Peak demand\n");
    for line in peak_lines(report) {
        let _ = writeln!(out, "- {line}");
    }
    let _ = writeln!(out, "\n## GPUs idle while jobs wait\n");
    let _ = writeln!(
        out,
        "{:.0} GPU-hours free on nodes that could have run a waiting job, over {:.0} h with jobs waiting.\n",
        report.idle.idle_while_waiting_gpu_hours, report.idle.hours_with_waiting
    );
    let _ = writeln!(out, "| node state | GPU-hours | share |\n|---|---:|---:|");
    for (state, hours, share) in state_share(report) {
        let _ = writeln!(
            out,
            "| {} | {hours:.0} | {:.0}% |",
            state.as_str(),
            share * 100.0
        );
    }
    let _ = writeln!(
        out,
        "\n## Capacity lost to quarantined nodes\n\n{}",
        lost_line(report)
    );
    let _ = writeln!(out, "\n## Downtime saved\n\n{}", saved_line(report));
    let _ = writeln!(out, "\n## Recommendations\n");
    for sentence in &report.recommendations.sentences {
        let _ = writeln!(out, "- {sentence}");
    }
    out
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

    #[test]
    fn sparkline_scales_to_the_largest_value() {
        assert_eq!(sparkline(&[Some(0.0), Some(7.0), None, Some(3.5)]), "▁█ ▅");
    }
}
