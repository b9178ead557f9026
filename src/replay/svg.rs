//! The replay's plot, written by hand as SVG: ETTR against the checkpoint interval, one line per
//! policy, with the ceiling a run without failures reaches.

use std::fmt::Write;

use runguard_engine::replay::Policy;

use super::ReplayReport;

const WIDTH: f64 = 720.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 50.0;
const BOTTOM: f64 = 60.0;

fn colour(policy: Option<Policy>) -> &'static str {
    match policy {
        Some(Policy::Runguard) => "#1b9e77",
        Some(Policy::Blind) => "#d95f02",
        Some(Policy::Paged) => "#7570b3",
        None => "#999999",
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// One line of the plot: its policy (None: the ceiling), label and (minutes, ETTR) points.
type Series = (Option<Policy>, String, Vec<(f64, f64)>);

/// The plot of `report`'s sweep.
pub fn ettr_by_interval(report: &ReplayReport) -> String {
    let mut minutes: Vec<f64> = report
        .results
        .iter()
        .map(|r| r.checkpoint_minutes)
        .collect();
    minutes.sort_by(f64::total_cmp);
    minutes.dedup();
    let lowest = report.results.iter().map(|r| r.ettr).fold(1.0, f64::min);
    // The y axis from a round tenth below the lowest ratio to 1.
    let y_min = ((lowest * 20.0).floor() / 20.0).clamp(0.0, 0.95);
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    // Intervals spread evenly by rank: a sweep like 5, 10, 30, 60 reads best that way.
    let x_of = |m: f64| {
        let rank = minutes.iter().position(|x| *x == m).unwrap_or(0) as f64;
        let span = (minutes.len().max(2) - 1) as f64;
        LEFT + plot_w * rank / span
    };
    let y_of = |ettr: f64| TOP + plot_h * (1.0 - (ettr - y_min) / (1.0 - y_min).max(1e-9));
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" viewBox=\"0 0 {WIDTH} {HEIGHT}\" font-family=\"sans-serif\" font-size=\"12\">"
    );
    let _ = writeln!(svg, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
    let _ = writeln!(
        svg,
        "<text x=\"{LEFT}\" y=\"22\" font-size=\"14\" font-weight=\"bold\">{}</text>",
        escape(&format!(
            "ETTR by checkpoint interval — {} replayed ({} + {} nodes, {} days, seed {})",
            report.trace, report.nodes, report.spare_nodes, report.days, report.seed
        ))
    );
    let _ = writeln!(
        svg,
        "<text x=\"{LEFT}\" y=\"38\" fill=\"#555\">{} faults set in; effective training time ratio = progress kept / wall time</text>",
        report.onset_count
    );
    // Grid and y labels every 0.05.
    let mut tick = y_min;
    while tick <= 1.0 + 1e-9 {
        let y = y_of(tick);
        let _ = writeln!(
            svg,
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#eee\"/><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{tick:.2}</text>",
            LEFT + plot_w,
            LEFT - 8.0,
            y + 4.0
        );
        tick += 0.05;
    }
    for m in &minutes {
        let x = x_of(*m);
        let _ = writeln!(
            svg,
            "<line x1=\"{x:.1}\" y1=\"{TOP}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#eee\"/><text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{m} min</text>",
            TOP + plot_h,
            TOP + plot_h + 18.0
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">checkpoint interval</text>",
        LEFT + plot_w / 2.0,
        HEIGHT - 14.0
    );
    let _ = writeln!(
        svg,
        "<rect x=\"{LEFT}\" y=\"{TOP}\" width=\"{plot_w}\" height=\"{plot_h}\" fill=\"none\" stroke=\"#888\"/>"
    );
    // The ceiling, then one line per policy.
    let mut series: Vec<Series> = Vec::new();
    let mut ceiling: Vec<(f64, f64)> = Vec::new();
    for m in &minutes {
        if let Some(r) = report.results.iter().find(|r| r.checkpoint_minutes == *m) {
            ceiling.push((*m, r.ettr_without_failures));
        }
    }
    series.push((None, "without failures".to_string(), ceiling));
    for policy in Policy::ALL {
        let points: Vec<(f64, f64)> = report
            .results
            .iter()
            .filter(|r| r.policy == policy)
            .map(|r| (r.checkpoint_minutes, r.ettr))
            .collect();
        if !points.is_empty() {
            series.push((Some(policy), policy.as_str().to_string(), points));
        }
    }
    for (index, (policy, label, mut points)) in series.into_iter().enumerate() {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
        let path: Vec<String> = points
            .iter()
            .map(|(m, e)| format!("{:.1},{:.1}", x_of(*m), y_of(*e)))
            .collect();
        let dash = if policy.is_none() {
            " stroke-dasharray=\"5,4\""
        } else {
            ""
        };
        let _ = writeln!(
            svg,
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{}\" stroke-width=\"2\"{dash}/>",
            path.join(" "),
            colour(policy)
        );
        for (m, e) in &points {
            let _ = writeln!(
                svg,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{}\"><title>{} at {m} min: {e:.4}</title></circle>",
                x_of(*m),
                y_of(*e),
                colour(policy),
                escape(&label)
            );
        }
        let ly = TOP + 14.0 + index as f64 * 20.0;
        let lx = LEFT + plot_w + 16.0;
        let _ = writeln!(
            svg,
            "<line x1=\"{lx:.1}\" y1=\"{ly:.1}\" x2=\"{:.1}\" y2=\"{ly:.1}\" stroke=\"{}\" stroke-width=\"2\"{dash}/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            lx + 22.0,
            colour(policy),
            lx + 28.0,
            ly + 4.0,
            escape(&label)
        );
    }
    let _ = writeln!(svg, "</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use runguard_engine::replay::metrics::{RunTotals, summarize};

    fn report() -> ReplayReport {
        let results = [
            (Policy::Runguard, 10.0, 2_800),
            (Policy::Blind, 10.0, 2_500),
        ]
        .into_iter()
        .chain([
            (Policy::Runguard, 30.0, 2_850),
            (Policy::Blind, 30.0, 2_400),
        ])
        .map(|(policy, minutes, kept)| {
            summarize(
                RunTotals {
                    policy,
                    checkpoint_minutes: minutes,
                    wall_s: 86_400.0,
                    kept_iterations: kept,
                    seconds_per_iteration: 30.0,
                    save_s: 20.0,
                    excluded_nodes: 0,
                },
                Vec::new(),
            )
        })
        .collect();
        ReplayReport {
            trace: "t<1>".into(),
            title: String::new(),
            source: String::new(),
            seed: 1,
            days: 1.0,
            nodes: 4,
            spare_nodes: 1,
            source_nodes: 8,
            poll_s: 5.0,
            source_interruptions: 2,
            source_days: 1.0,
            failures_per_node_hour: 0.01,
            onsets: Vec::new(),
            onset_count: 0,
            warnings: Vec::new(),
            results,
            projections: Vec::new(),
            wall_s: 1.0,
        }
    }

    #[test]
    fn one_line_per_policy_and_the_ceiling_with_escaped_labels() {
        let svg = ettr_by_interval(&report());
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<polyline").count(), 3);
        assert!(svg.contains("runguard at 30 min: 0.9896"), "{svg}");
        assert!(svg.contains("t&lt;1&gt;") && !svg.contains("t<1>"));
        assert!(svg.contains(">10 min<") && svg.contains(">30 min<"));
    }
}
