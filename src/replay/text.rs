//! The replay's report as text and as markdown tables.

use std::fmt::Write;

use runguard_engine::replay::{Handler, Policy, PolicyResult};

use super::{Projection, ReplayReport};

/// Column headings of the per-policy table.
const HEADINGS: [&str; 11] = [
    "policy",
    "ETTR",
    "at source size",
    "failures",
    "repeats",
    "pages",
    "failing s",
    "response s",
    "restart s",
    "lost work s",
    "runguard's share s (mean / max)",
];

fn header(report: &ReplayReport) -> Vec<String> {
    let causes: Vec<String> = report
        .onsets
        .iter()
        .map(|(name, count)| format!("{name} {count}"))
        .collect();
    let mut lines = vec![
        format!("Replay of {}: {}", report.trace, report.title),
        format!("Source: {}", report.source),
        format!(
            "Source rate: {} interruptions in {} days on {} nodes = {:.3e} per node-hour",
            report.source_interruptions,
            report.source_days,
            report.source_nodes,
            report.failures_per_node_hour
        ),
        format!(
            "Replayed: {} job nodes + {} spares ({}, same rate per node-hour), {} days, seed {}, a look every {} s",
            report.nodes,
            report.spare_nodes,
            match report.nodes.cmp(&report.source_nodes) {
                std::cmp::Ordering::Less => format!("scaled down from {}", report.source_nodes),
                std::cmp::Ordering::Equal => "the source's size".to_string(),
                std::cmp::Ordering::Greater => format!("scaled up from {}", report.source_nodes),
            },
            report.days,
            report.seed,
            report.poll_s
        ),
        format!(
            "Faults set in: {} ({})",
            report.onset_count,
            causes.join(", ")
        ),
    ];
    lines.extend(report.warnings.iter().map(|w| format!("Warning: {w}")));
    lines
}

fn row(result: &PolicyResult, projection: Option<&Projection>) -> Vec<String> {
    let d = &result.mean_downtime;
    let share = match (result.own_share_mean_s, result.own_share_max_s) {
        (Some(mean), Some(max)) => format!("{mean:.1} / {max:.1}"),
        _ => "-".to_string(),
    };
    vec![
        result.policy.as_str().to_string(),
        format!("{:.4}", result.ettr),
        projection.map_or("-".into(), |p| format!("{:.3}", p.ettr)),
        result.failures.len().to_string(),
        result.repeats.to_string(),
        result.pages.to_string(),
        format!("{:.0}", d.failing),
        format!("{:.0}", d.response),
        format!("{:.0}", d.restart),
        format!("{:.0}", d.lost_work),
        share,
    ]
}

/// A policy's result with its projection to the source's size.
type Row<'a> = (&'a PolicyResult, Option<&'a Projection>);

/// Results grouped by checkpoint interval, in the order they ran.
fn by_interval(report: &ReplayReport) -> Vec<(f64, Vec<Row<'_>>)> {
    let mut groups: Vec<(f64, Vec<Row<'_>>)> = Vec::new();
    for (index, result) in report.results.iter().enumerate() {
        let projection = report.projections.get(index);
        match groups
            .iter_mut()
            .find(|(minutes, _)| *minutes == result.checkpoint_minutes)
        {
            Some((_, rows)) => rows.push((result, projection)),
            None => groups.push((result.checkpoint_minutes, vec![(result, projection)])),
        }
    }
    groups
}

fn goals(report: &ReplayReport) -> Vec<String> {
    let runguard: Vec<&PolicyResult> = report
        .results
        .iter()
        .filter(|r| r.policy == Policy::Runguard)
        .collect();
    let mut lines = Vec::new();
    if !runguard.is_empty() {
        let max_share = runguard
            .iter()
            .filter_map(|r| r.own_share_max_s)
            .fold(0.0, f64::max);
        let repeats: usize = runguard.iter().map(|r| r.repeats).sum();
        lines.push(format!(
            "runguard's own share of a failure's downtime (detection, analysis, requeue; simulated clock plus the wall time of its passes): at most {max_share:.1} s (goal ≤ 10 s: {})",
            if max_share <= 10.0 { "met" } else { "missed" }
        ));
        lines.push(format!(
            "runguard's share by cause, mean / max over the sweep, from the fault and from the failure's first log line: {}",
            share_by_cause(&runguard).join(", ")
        ));
        lines.push(format!(
            "Repeat failures on nodes already implicated under runguard: {repeats} (goal 0: {})",
            if repeats == 0 { "met" } else { "missed" }
        ));
    }
    lines.push(format!("Replayed in {:.0} s of wall time.", report.wall_s));
    lines
}

/// runguard's own share per cause over every failure it handled in `results`: from the fault, and
/// from the failure's first log line (what the fault itself took to show is the fabric's or the
/// driver's, not runguard's).
fn share_by_cause(results: &[&PolicyResult]) -> Vec<String> {
    let mut causes: Vec<(&str, Vec<f64>, Vec<f64>)> = Vec::new();
    for result in results {
        // The step time only weighs lost work, which the share leaves out.
        for failure in result
            .failures
            .iter()
            .filter(|f| f.handler == Handler::Runguard)
        {
            let share = failure.own_share_s(1.0);
            let from_line = failure.from_line_s();
            match causes
                .iter_mut()
                .find(|(cause, _, _)| *cause == failure.cause)
            {
                Some((_, shares, lines)) => {
                    shares.push(share);
                    lines.extend(from_line);
                }
                None => causes.push((
                    failure.cause.as_str(),
                    vec![share],
                    from_line.into_iter().collect(),
                )),
            }
        }
    }
    let mean_max = |values: &[f64]| {
        let mean = values.iter().sum::<f64>() / values.len().max(1) as f64;
        let max = values.iter().copied().fold(0.0, f64::max);
        format!("{mean:.1} / {max:.1} s")
    };
    causes
        .into_iter()
        .map(|(cause, shares, lines)| {
            let from_line = if lines.is_empty() {
                String::new()
            } else {
                format!(", {} from the line", mean_max(&lines))
            };
            format!(
                "{cause} {}{from_line} ({})",
                mean_max(&shares),
                shares.len()
            )
        })
        .collect()
}

pub fn plain(report: &ReplayReport) -> String {
    let mut out = String::new();
    for line in header(report) {
        let _ = writeln!(out, "{line}");
    }
    for (minutes, rows) in by_interval(report) {
        let ceiling = rows.first().map_or(0.0, |(r, _)| r.ettr_without_failures);
        let _ = writeln!(
            out,
            "\nCheckpoint every {minutes} min (ETTR without failures {ceiling:.4}); downtime per failure, mean:"
        );
        let cells: Vec<Vec<String>> =
            std::iter::once(HEADINGS.iter().map(|h| h.to_string()).collect())
                .chain(rows.iter().map(|(r, p)| row(r, *p)))
                .collect();
        let widths: Vec<usize> = (0..HEADINGS.len())
            .map(|column| {
                cells
                    .iter()
                    .map(|c| c[column].chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for line in cells {
            let padded: Vec<String> = line
                .iter()
                .zip(&widths)
                .map(|(cell, width)| format!("{cell:<width$}"))
                .collect();
            let _ = writeln!(out, "  {}", padded.join("  ").trim_end());
        }
    }
    let _ = writeln!(out);
    for line in goals(report) {
        let _ = writeln!(out, "{line}");
    }
    out
}

pub fn markdown(report: &ReplayReport) -> String {
    let mut out = String::new();
    for line in header(report) {
        let _ = writeln!(out, "{line}  ");
    }
    let _ = writeln!(
        out,
        "\n| checkpoint | {} |\n|{}",
        HEADINGS.join(" | "),
        "---|".repeat(HEADINGS.len() + 1)
    );
    for (minutes, rows) in by_interval(report) {
        for (result, projection) in rows {
            let _ = writeln!(
                out,
                "| {minutes} min | {} |",
                row(result, projection).join(" | ")
            );
        }
    }
    let _ = writeln!(out);
    for line in goals(report) {
        let _ = writeln!(out, "{line}  ");
    }
    out
}
