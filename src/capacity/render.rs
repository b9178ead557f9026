//! The capacity report as text for a terminal and as Markdown.

use std::fmt::Write as _;

use runguard_engine::capacity::{self, CapacityReport, NodeUse, peaks::HourSpan};

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
    fn sparkline_scales_to_the_largest_value() {
        assert_eq!(sparkline(&[Some(0.0), Some(7.0), None, Some(3.5)]), "▁█ ▅");
    }
}
