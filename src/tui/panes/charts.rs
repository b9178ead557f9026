//! Charts of the focused workflow across all its attempts: throughput (TFLOP/s per GPU) with the
//! anomalies marked where they were raised, and the checkpoints saved, both on one time axis with the
//! start of each attempt drawn as a vertical line.

use std::collections::BTreeMap;

use chrono::{DateTime, TimeDelta, Utc};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style};
use ratatui::symbols::Marker;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Axis, Block, Chart, Dataset, GraphType, Paragraph};

use crate::tui::app::App;
use crate::tui::snapshot::Snapshot;
use crate::tui::theme::Theme;
use runguard_engine::report::WorkflowHistory;

/// Anomalies listed under the throughput chart; more are counted.
const LISTED_ANOMALIES: usize = 4;

/// Draws the charts of the focused row's workflow.
pub fn draw(
    frame: &mut Frame<'_>,
    area: Rect,
    app: &App,
    snapshot: &Snapshot,
    theme: &Theme,
    now: DateTime<Utc>,
) {
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
    let chart = Chart::new(datasets)
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
                .title("TFLOP/s/GPU")
                .style(theme.muted())
                .bounds([0.0, top])
                .labels(value_labels(top)),
        );
    frame.render_widget(chart, chart_area);
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
    let chart = Chart::new(datasets)
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
                .title("iteration")
                .style(theme.muted())
                .bounds([0.0, top])
                .labels(value_labels(top)),
        );
    frame.render_widget(chart, chart_area);
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

#[cfg(test)]
mod tests {
    use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};

    use super::*;
    use crate::tui::app::{Pane, UiAction};
    use crate::tui::panes::timeline::tests::recovered;
    use crate::tui::snapshot::AttemptRow;
    use crate::tui::tests::{failed_and_proposed, render};
    use runguard_engine::config::Config;
    use runguard_engine::model::{AnomalyKind, JobState, WorkflowStatus};
    use runguard_engine::recover::Policy;
    use runguard_engine::report::fixtures::{anomaly, attempt, checkpoint, history, sample, t};

    fn show_charts(snapshot: &Snapshot, now: DateTime<Utc>) -> App {
        let mut app = App::new("alice".into(), true);
        app.update(UiAction::Show(Pane::Charts), snapshot, now);
        assert_eq!(app.pane, Pane::Charts);
        app
    }

    /// A snapshot of one hand-built workflow, as the overview would list it.
    fn snapshot_of(detail: WorkflowHistory) -> Snapshot {
        let rows = detail
            .attempts
            .iter()
            .map(|attempt| AttemptRow {
                workflow_id: detail.workflow.id,
                workflow: detail.workflow.name.clone(),
                user: "alice".into(),
                partition: None,
                backend: "sim".into(),
                attempt: attempt.clone(),
                checkpoints: 0,
                last_checkpoint: None,
                anomalies: vec![],
                attribution: None,
            })
            .collect();
        Snapshot {
            rows,
            details: vec![detail],
            ..Snapshot::default()
        }
    }

    #[test]
    fn keys_3_and_4_open_the_charts_and_the_timeline_and_the_others_move_up() {
        let app = App::new("alice".into(), true);
        let key = |c| app.action_for_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
        assert_eq!(key('3'), Some(UiAction::Show(Pane::Charts)));
        assert_eq!(key('4'), Some(UiAction::Show(Pane::Timeline)));
        assert_eq!(key('5'), Some(UiAction::Show(Pane::Approvals)));
        assert_eq!(key('6'), Some(UiAction::Show(Pane::Notifications)));
        assert_eq!(
            Pane::ALL.map(Pane::title),
            [
                "Workflows",
                "Details",
                "Charts",
                "Timeline",
                "Approvals",
                "Notifications",
                "Log",
                "Compare"
            ]
        );
        assert_eq!(key('7'), Some(UiAction::Show(Pane::Log)));
        assert_eq!(key('8'), Some(UiAction::Show(Pane::Compare)));
    }

    #[test]
    fn a_failed_run_charts_its_throughput_the_crash_and_its_checkpoints() {
        let (_dir, store, now) = failed_and_proposed();
        let policy = Policy::from_config(&Config::default().recovery, true);
        let snapshot = Snapshot::load(&store.db(), &policy, Some(1)).unwrap();
        let app = show_charts(&snapshot, now);
        let text = render(&app, &snapshot, now, 140, 44);
        let detail = &snapshot.details[0];
        let first = detail.anomalies[0].kind.as_str();
        for expected in [
            "3 Charts",
            "llama3-8b-pretrain · throughput",
            "TFLOP/s/GPU",
            "time (UTC)",
            "━ attempt 0",
            "▲ anomaly",
            first,
            "Checkpoints · iteration saved",
            "iteration",
            "last: iteration 300",
            "08:00",
        ] {
            assert!(text.contains(expected), "{expected:?} missing:\n{text}");
        }
        // The y axis reaches a tenth above the highest reported throughput.
        let highest = detail
            .throughput
            .iter()
            .map(|s| s.tflops_per_gpu)
            .fold(0.0, f64::max);
        assert!(highest > 300.0, "{highest}");
        assert!(text.contains(&format!("{:.0}", ceiling(highest))), "{text}");
    }

    #[test]
    fn a_recovered_run_draws_one_line_per_attempt() {
        let (_dir, snapshot, now) = recovered();
        let app = show_charts(&snapshot, now);
        let text = render(&app, &snapshot, now, 140, 44);
        assert!(text.contains("━ attempt 0"), "{text}");
        assert!(text.contains("━ attempt 1"), "{text}");
        assert!(text.contains("last: iteration 600"), "{text}");
    }

    #[test]
    fn without_samples_the_chart_says_no_throughput_reported_yet() {
        let pending = history(
            WorkflowStatus::Enabled,
            vec![attempt(0, JobState::Running, [Some(0), Some(10), None])],
        );
        let snapshot = snapshot_of(pending);
        let app = show_charts(&snapshot, t(60));
        let text = render(&app, &snapshot, t(60), 100, 30);
        assert!(text.contains("no throughput reported yet"), "{text}");
        assert!(text.contains("no checkpoint saved yet"), "{text}");
        assert!(text.contains("no anomaly"), "{text}");
    }

    #[test]
    fn one_sample_is_drawn_on_a_widened_axis() {
        let mut one = history(
            WorkflowStatus::Completed,
            vec![attempt(0, JobState::Completed, [Some(0), None, None])],
        );
        one.throughput = vec![sample(0, 10, 30, 380.0)];
        let axis = TimeAxis::of(&one, t(999)).unwrap();
        assert_eq!((axis.from, axis.to), (t(-30), t(90)));
        let snapshot = snapshot_of(one);
        let app = show_charts(&snapshot, t(999));
        let text = render(&app, &snapshot, t(999), 100, 30);
        assert!(text.contains("TFLOP/s/GPU"), "{text}");
        assert!(text.contains("418"), "{text}");
        assert!(text.contains("07:59"), "{text}");
    }

    #[test]
    fn series_are_split_by_attempt_and_anomalies_sit_on_their_attempt_s_line() {
        let mut two = history(
            WorkflowStatus::Completed,
            vec![
                attempt(0, JobState::Failed, [Some(0), Some(0), Some(100)]),
                attempt(1, JobState::Completed, [Some(110), Some(120), Some(300)]),
            ],
        );
        two.throughput = vec![
            sample(0, 10, 20, 400.0),
            sample(0, 20, 40, 200.0),
            sample(1, 30, 150, 390.0),
        ];
        two.anomalies = vec![
            anomaly(0, AnomalyKind::ThroughputDrop, 50),
            anomaly(1, AnomalyKind::Straggler, 130),
        ];
        let axis = TimeAxis::of(&two, t(999)).unwrap();
        assert_eq!((axis.from, axis.to), (t(0), t(150)));
        assert_eq!(
            throughput_series(&two, &axis),
            vec![
                (0, vec![(20.0, 400.0), (40.0, 200.0)]),
                (1, vec![(150.0, 390.0)])
            ]
        );
        // The drop sits on attempt 0's last sample before it; the straggler, raised before attempt
        // 1 reported, on its first.
        assert_eq!(
            anomaly_points(&two, &axis),
            vec![(50.0, 200.0), (130.0, 390.0)]
        );
        assert_eq!(attempt_boundaries(&two, &axis), vec![120.0]);
        assert_eq!(axis.labels(), vec!["08:00", "08:01", "08:02"]);
    }

    #[test]
    fn checkpoints_make_a_staircase_of_the_latest_saved_iteration() {
        let mut saved = history(
            WorkflowStatus::Enabled,
            vec![attempt(0, JobState::Running, [Some(0), Some(0), None])],
        );
        saved.checkpoints = vec![checkpoint(0, 200, 80), checkpoint(0, 100, 40)];
        let axis = TimeAxis::of(&saved, t(120)).unwrap();
        assert_eq!(
            checkpoint_steps(&saved, &axis),
            vec![
                (0.0, 0.0),
                (40.0, 0.0),
                (40.0, 100.0),
                (80.0, 100.0),
                (80.0, 200.0),
                (120.0, 200.0)
            ]
        );
        assert_eq!(ceiling(200.0), 220.0);
        assert_eq!(ceiling(0.0), 1.0);
        assert_eq!(value_labels(220.0), vec!["0", "110", "220"]);
    }
}
