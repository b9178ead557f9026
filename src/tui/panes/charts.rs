//! Charts of the focused workflow across all its attempts: throughput (TFLOP/s per GPU) with the
//! anomalies marked where they were raised, and the checkpoints saved, both on one time axis with the
//! start of each attempt drawn as a vertical line.

use super::View;
use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, Paragraph};

use crate::tui::theme::Theme;
use runguard_engine::report::WorkflowHistory;

/// Anomalies listed under the throughput chart; more are counted.
const LISTED_ANOMALIES: usize = 4;

/// Draws the charts of the focused row's workflow.
pub fn draw(frame: &mut Frame<'_>, area: Rect, view: &View<'_>) {
    let (app, snapshot, theme, now) = view.parts();
    let Some(detail) = app
        .focused(snapshot, now)
        .and_then(|row| snapshot.detail(row.workflow_id))
    else {
        frame.render_widget(
            Paragraph::new("no workflow to show").block(Block::bordered().title(" Charts ")),
            area,
        );
        return;
    };
    let [throughput_area, checkpoint_area] =
        Layout::vertical([Constraint::Percentage(60), Constraint::Percentage(40)]).areas(area);
    let axis = TimeAxis::of(detail, now);
    draw_throughput(frame, throughput_area, detail, axis, theme);
    draw_checkpoints(frame, checkpoint_area, detail, axis, theme);
}

/// The time axis both charts share, so one moment sits at the same column in both. X values are
/// seconds since `from`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct TimeAxis {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
}

impl TimeAxis {
    /// Spans every sample, checkpoint, anomaly and attempt start, and reaches `now` while the workflow
    /// is active (a run that went quiet shows as a line that stops short). A single moment is widened
    /// by a minute each side so its point has room. `None` when there is nothing to place.
    fn of(detail: &WorkflowHistory, now: DateTime<Utc>) -> Option<Self> {
        let times = detail
            .throughput
            .iter()
            .map(|s| s.time)
            .chain(detail.checkpoints.iter().map(|c| c.time))
            .chain(detail.anomalies.iter().map(|a| a.time))
            .chain(detail.attempts.iter().filter_map(|a| a.start_time));
        let (mut from, mut to) =
            times.fold(None, |span: Option<(DateTime<Utc>, DateTime<Utc>)>, t| {
                Some(span.map_or((t, t), |(from, to)| (from.min(t), to.max(t))))
            })?;
        if detail.workflow.status.is_active() {
            to = to.max(now);
        }
        if to - from < TimeDelta::seconds(1) {
            from -= TimeDelta::minutes(1);
            to += TimeDelta::minutes(1);
        }
        Some(Self { from, to })
    }

    fn x(&self, time: DateTime<Utc>) -> f64 {
        (time - self.from).num_milliseconds() as f64 / 1000.0
    }

    fn bounds(&self) -> [f64; 2] {
        [0.0, self.x(self.to)]
    }

    /// `HH:MM` at the start, the middle and the end.
    fn labels(&self) -> Vec<String> {
        let middle = self.from + (self.to - self.from) / 2;
        [self.from, middle, self.to]
            .iter()
            .map(|t| t.format("%H:%M").to_string())
            .collect()
    }
}

/// Each attempt's throughput as `(x, TFLOP/s/GPU)` points, by attempt index.
fn throughput_series(detail: &WorkflowHistory, axis: &TimeAxis) -> Vec<(u32, Vec<(f64, f64)>)> {
    let mut series: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
    for sample in &detail.throughput {
        series
            .entry(sample.attempt_index)
            .or_default()
            .push((axis.x(sample.time), sample.tflops_per_gpu));
    }
    for points in series.values_mut() {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    series.into_iter().collect()
}

/// Each anomaly at its time, at the height of its attempt's throughput then (the last sample at or
/// before it, else the attempt's first), or on the floor when its attempt reported none.
fn anomaly_points(detail: &WorkflowHistory, axis: &TimeAxis) -> Vec<(f64, f64)> {
    detail
        .anomalies
        .iter()
        .map(|anomaly| {
            let of_attempt = || {
                detail
                    .throughput
                    .iter()
                    .filter(|s| s.attempt_index == anomaly.attempt_index)
            };
            let height = of_attempt()
                .filter(|s| s.time <= anomaly.time)
                .max_by_key(|s| s.time)
                .or_else(|| of_attempt().min_by_key(|s| s.time))
                .map_or(0.0, |s| s.tflops_per_gpu);
            (axis.x(anomaly.time), height)
        })
        .collect()
}

/// X of every attempt start but the first: where one attempt hands over to the next.
fn attempt_boundaries(detail: &WorkflowHistory, axis: &TimeAxis) -> Vec<f64> {
    let mut starts: Vec<DateTime<Utc>> = detail
        .attempts
        .iter()
        .filter_map(|a| a.start_time)
        .collect();
    starts.sort();
    starts.iter().skip(1).map(|t| axis.x(*t)).collect()
}

/// The latest saved iteration over time, as a staircase from the axis start to its end.
fn checkpoint_steps(detail: &WorkflowHistory, axis: &TimeAxis) -> Vec<(f64, f64)> {
    let mut saved: Vec<(f64, f64)> = detail
        .checkpoints
        .iter()
        .map(|c| (axis.x(c.time), c.iteration as f64))
        .collect();
    saved.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut steps = vec![(0.0, 0.0)];
    let mut level = 0.0;
    for (x, iteration) in saved {
        steps.push((x, level));
        steps.push((x, iteration));
        level = iteration;
    }
    steps.push((axis.bounds()[1], level));
    steps
}

/// Each attempt's checkpoints as `(x, iteration)` points, by attempt index.
fn checkpoint_points(detail: &WorkflowHistory, axis: &TimeAxis) -> Vec<(u32, Vec<(f64, f64)>)> {
    let mut points: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
    for checkpoint in &detail.checkpoints {
        points
            .entry(checkpoint.attempt_index)
            .or_default()
            .push((axis.x(checkpoint.time), checkpoint.iteration as f64));
    }
    points.into_iter().collect()
}

/// The top of a value axis: a tenth above the highest value, never zero.
fn ceiling(highest: f64) -> f64 {
    if highest.is_finite() && highest > 0.0 {
        // Adding a tenth keeps round values round (200 → 220) where `* 1.1` would give 220.00…01.
        (highest + highest / 10.0).ceil()
    } else {
        1.0
    }
}

/// A chart over the workflow's time axis with a value axis from 0 to `top`.
fn time_chart<'d>(
    datasets: Vec<Dataset<'d>>,
    axis: &TimeAxis,
    title: &'static str,
    top: f64,
    theme: &Theme,
) -> Chart<'d> {
    Chart::new(datasets)
        .legend_position(None)
        .x_axis(
            Axis::default()
                .title("time (UTC)")
                .style(theme.muted())
                .bounds(axis.bounds())
                .labels(axis.labels()),
        )
        .y_axis(
            Axis::default()
                .title(title)
                .style(theme.muted())
                .bounds([0.0, top])
                .labels(value_labels(top)),
        )
}

/// `0`, the middle and the top of a value axis.
fn value_labels(top: f64) -> Vec<String> {
    [0.0, top / 2.0, top]
        .iter()
        .map(|v| format!("{v:.0}"))
        .collect()
}

/// One colour per attempt, cycling through the theme's state colours.
fn attempt_color(index: u32, theme: &Theme) -> Color {
    let palette = [
        theme.running,
        theme.accent,
        theme.recovering,
        theme.completed,
        theme.approval,
        theme.pending,
    ];
    palette[index as usize % palette.len()]
}

/// Vertical lines at the attempt boundaries, `top` high.
fn boundary_lines(xs: &[f64], top: f64) -> Vec<[(f64, f64); 2]> {
    xs.iter().map(|x| [(*x, 0.0), (*x, top)]).collect()
}

fn legend<'a>(attempts: &[u32], extra: Vec<Span<'a>>, theme: &Theme) -> Line<'a> {
    let mut spans = Vec::new();
    for attempt in attempts {
        spans.push(Span::styled(
            "━ ",
            Style::default().fg(attempt_color(*attempt, theme)),
        ));
        spans.push(Span::raw(format!("attempt {attempt}  ")));
    }
    spans.extend(extra);
    spans.push(Span::styled("│", theme.muted()));
    spans.push(Span::raw(" attempt start"));
    Line::from(spans)
}

fn draw_throughput(
    frame: &mut Frame<'_>,
    area: Rect,
    detail: &WorkflowHistory,
    axis: Option<TimeAxis>,
    theme: &Theme,
) {
    let block = Block::bordered()
        .title(format!(" {} · throughput ", detail.workflow.name))
        .border_style(theme.accent());
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let listed = detail.anomalies.len().min(LISTED_ANOMALIES);
    let more = usize::from(detail.anomalies.len() > LISTED_ANOMALIES);
    let anomaly_rows = (listed + more).max(1) as u16;
    let [chart_area, legend_area, anomaly_area] = Layout::vertical([
        Constraint::Min(3),
        Constraint::Length(1),
        Constraint::Length(anomaly_rows),
    ])
    .areas(inner);

    let mut anomaly_lines: Vec<Line<'_>> = detail
        .anomalies
        .iter()
        .take(LISTED_ANOMALIES)
        .map(|a| {
            Line::from(vec![
                Span::styled("▲ ", theme.anomaly()),
                Span::styled(a.time.format("%H:%M:%S ").to_string(), theme.muted()),
                Span::styled(a.kind.as_str(), theme.anomaly()),
                Span::styled(format!(" · attempt {} · ", a.attempt_index), theme.muted()),
                Span::raw(a.summary.clone()),
            ])
        })
        .collect();
    if more > 0 {
        anomaly_lines.push(Line::styled(
            format!(
                "… and {} more (details pane)",
                detail.anomalies.len() - LISTED_ANOMALIES
            ),
            theme.muted(),
        ));
    }
    if anomaly_lines.is_empty() {
        anomaly_lines.push(Line::styled("no anomaly", theme.muted()));
    }
    frame.render_widget(Paragraph::new(anomaly_lines), anomaly_area);

    let axis = match axis {
        Some(axis) if !detail.throughput.is_empty() => axis,
        _ => {
            frame.render_widget(
                Paragraph::new("no throughput reported yet").style(theme.muted()),
                chart_area,
            );
            return;
        }
    };
    let series = throughput_series(detail, &axis);
    let anomalies = anomaly_points(detail, &axis);
    let top = ceiling(
        series
            .iter()
            .flat_map(|(_, points)| points.iter().map(|p| p.1))
            .fold(0.0, f64::max),
    );
    let boundaries = boundary_lines(&attempt_boundaries(detail, &axis), top);
    let mut datasets: Vec<Dataset<'_>> = boundaries
        .iter()
        .map(|line| {
            Dataset::default()
                .graph_type(GraphType::Line)
                .marker(Marker::Braille)
                .style(theme.muted())
                .data(line)
        })
        .collect();
    for (attempt, points) in &series {
        datasets.push(
            Dataset::default()
                .graph_type(GraphType::Line)
                .marker(Marker::Braille)
                .style(Style::default().fg(attempt_color(*attempt, theme)))
                .data(points),
        );
    }
    datasets.push(
        Dataset::default()
            .graph_type(GraphType::Scatter)
            .marker(Marker::Custom('▲'))
            .style(theme.anomaly())
            .data(&anomalies),
    );
    frame.render_widget(
        time_chart(datasets, &axis, "TFLOP/s/GPU", top, theme),
        chart_area,
    );
    let attempts: Vec<u32> = series.iter().map(|(attempt, _)| *attempt).collect();
    frame.render_widget(
        Paragraph::new(legend(
            &attempts,
            vec![Span::styled("▲", theme.anomaly()), Span::raw(" anomaly  ")],
            theme,
        )),
        legend_area,
    );
}

fn draw_checkpoints(
    frame: &mut Frame<'_>,
    area: Rect,
    detail: &WorkflowHistory,
    axis: Option<TimeAxis>,
    theme: &Theme,
) {
    let block = Block::bordered()
        .title(" Checkpoints · iteration saved ")
        .border_style(theme.muted());
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let axis = match axis {
        Some(axis) if !detail.checkpoints.is_empty() => axis,
        _ => {
            frame.render_widget(
                Paragraph::new("no checkpoint saved yet").style(theme.muted()),
                inner,
            );
            return;
        }
    };
    let [chart_area, legend_area] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(1)]).areas(inner);
    let steps = checkpoint_steps(detail, &axis);
    let points = checkpoint_points(detail, &axis);
    let top = ceiling(steps.iter().map(|p| p.1).fold(0.0, f64::max));
    let boundaries = boundary_lines(&attempt_boundaries(detail, &axis), top);
    let mut datasets: Vec<Dataset<'_>> = boundaries
        .iter()
        .map(|line| {
            Dataset::default()
                .graph_type(GraphType::Line)
                .marker(Marker::Braille)
                .style(theme.muted())
                .data(line)
        })
        .collect();
    datasets.push(
        Dataset::default()
            .graph_type(GraphType::Line)
            .marker(Marker::Braille)
            .style(theme.text())
            .data(&steps),
    );
    for (attempt, saved) in &points {
        datasets.push(
            Dataset::default()
                .graph_type(GraphType::Scatter)
                .marker(Marker::Custom('●'))
                .style(Style::default().fg(attempt_color(*attempt, theme)))
                .data(saved),
        );
    }
    frame.render_widget(
        time_chart(datasets, &axis, "iteration", top, theme),
        chart_area,
    );
    let attempts: Vec<u32> = points.iter().map(|(attempt, _)| *attempt).collect();
    let last = detail
        .checkpoints
        .iter()
        .max_by_key(|c| c.time)
        .map(|c| {
            format!(
                "last: iteration {} at {}  ",
                c.iteration,
                c.time.format("%H:%M:%S")
            )
        })
        .unwrap_or_default();
    frame.render_widget(
        Paragraph::new(legend(
            &attempts,
            vec![Span::styled(last, theme.muted())],
            theme,
        )),
        legend_area,
    );
}

#[cfg(all(test, feature = "sim"))]
mod tests;
