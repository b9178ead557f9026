//! The attempts timeline of the focused workflow: each attempt as a bar on a shared time axis (queued,
//! then running), the recovery gaps between attempts, the work recomputed after each failure and the
//! workflow's goodput. The arithmetic lives in [`runguard_engine::report::downtime`]; this file only draws.

use super::View;
use std::ops::Range;

use chrono::{DateTime, TimeDelta, Utc};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, Wrap};

use super::format_duration;
use crate::tui::theme::Theme;
use runguard_engine::model::{Attempt, JobState};
use runguard_engine::report::WorkflowHistory;
use runguard_engine::report::downtime::{
    GapKind, Goodput, Recovery, goodput, queued_at, recoveries, running_end, timeline_bounds,
};

/// Width of the label column left of the bars.
const LABEL_WIDTH: u16 = 22;

/// Draws the attempts timeline of the focused row's workflow.
pub fn draw(frame: &mut Frame<'_>, area: Rect, view: &View<'_>) {
    let (app, snapshot, theme, now) = view.parts();
    let focused = app.focused(snapshot, now);
    let Some(detail) = focused.and_then(|row| snapshot.detail(row.workflow_id)) else {
        frame.render_widget(
            Paragraph::new("no workflow to show").block(Block::bordered().title(" Timeline ")),
            area,
        );
        return;
    };
    let block = Block::bordered()
        .title(format!(" {} · attempts timeline ", detail.workflow.name))
        .border_style(theme.accent());
    let inner = block.inner(area);
    frame.render_widget(block, area);

    let recoveries = recoveries(detail, now);
    let bar_rows = detail.attempts.len() as u16 + 2;
    // The summary and the legend wrap on a narrow terminal rather than lose their ends.
    let [summary_area, bars_area, legend_area, table_area] = Layout::vertical([
        Constraint::Length(3),
        Constraint::Length(bar_rows),
        Constraint::Length(2),
        Constraint::Min(3),
    ])
    .areas(inner);
    frame.render_widget(
        Paragraph::new(summary(goodput(detail, now), &recoveries, theme)).wrap(Wrap { trim: true }),
        summary_area,
    );
    let focused_attempt = focused.map(|row| row.attempt.index);
    frame.render_widget(
        Paragraph::new(bars(
            detail,
            &recoveries,
            focused_attempt,
            bars_area.width,
            theme,
            now,
        )),
        bars_area,
    );
    frame.render_widget(
        Paragraph::new(legend(theme)).wrap(Wrap { trim: true }),
        legend_area,
    );
    draw_gap_table(frame, table_area, &recoveries, theme);
}

/// The goodput line and one line of lost work.
fn summary<'a>(goodput: Option<Goodput>, recoveries: &[Recovery], theme: &Theme) -> Vec<Line<'a>> {
    let clock = |d: TimeDelta| format_duration(d, true);
    let mut lines = vec![match goodput {
        None => Line::styled("goodput -: no attempt has started yet", theme.muted()),
        Some(g) => Line::from(vec![
            Span::styled(format!("goodput {:.1}%", g.ratio() * 100.0), theme.accent()),
            Span::raw(format!(
                " · useful {} of {} since the first start",
                clock(g.useful),
                clock(g.wall)
            )),
            Span::styled(
                format!(
                    " (running {} − {} recomputed)",
                    clock(g.running),
                    clock(g.lost)
                ),
                theme.muted(),
            ),
        ]),
    }];
    let lost: u64 = recoveries.iter().map(|r| r.lost_iterations).sum();
    lines.push(if recoveries.is_empty() {
        Line::styled("no failure: no work recomputed", theme.muted())
    } else {
        Line::from(vec![
            Span::raw(format!(
                "lost work: {lost} iterations recomputed over {} {}",
                recoveries.len(),
                if recoveries.len() == 1 {
                    "failure"
                } else {
                    "failures"
                }
            )),
            Span::styled(
                " (each failed attempt's last iteration minus the checkpoint it resumed from)",
                theme.muted(),
            ),
        ])
    });
    lines
}

/// Maps times to the columns of a bar of `width` cells.
struct Scale {
    from: DateTime<Utc>,
    to: DateTime<Utc>,
    width: usize,
}

impl Scale {
    fn column(&self, time: DateTime<Utc>) -> usize {
        let span = (self.to - self.from).num_milliseconds().max(1) as f64;
        let at = (time - self.from).num_milliseconds() as f64 / span;
        ((at * self.width as f64).floor().max(0.0) as usize).min(self.width.saturating_sub(1))
    }

    /// The cells from `start` to `end`: at least one when the span is not empty, so a short gap stays
    /// visible on a long axis.
    fn cells(&self, start: DateTime<Utc>, end: DateTime<Utc>) -> Range<usize> {
        if end <= start || self.width == 0 {
            return 0..0;
        }
        let first = self.column(start);
        first..self.column(end).max(first + 1).min(self.width)
    }
}

/// A row of cells painted by spans of time, then turned into styled text.
struct Strip {
    cells: Vec<(char, Style)>,
}

impl Strip {
    fn new(width: usize) -> Self {
        Self {
            cells: vec![(' ', Style::default()); width],
        }
    }

    fn paint(&mut self, range: Range<usize>, symbol: char, style: Style) {
        for cell in &mut self.cells[range] {
            *cell = (symbol, style);
        }
    }

    fn into_spans<'a>(self) -> Vec<Span<'a>> {
        let mut spans: Vec<Span<'a>> = Vec::new();
        let mut run = String::new();
        let mut style = Style::default();
        for (symbol, cell_style) in self.cells {
            if cell_style != style && !run.is_empty() {
                spans.push(Span::styled(std::mem::take(&mut run), style));
            }
            style = cell_style;
            run.push(symbol);
        }
        if !run.is_empty() {
            spans.push(Span::styled(run, style));
        }
        spans
    }
}

/// The colour of a gap, in the bars and the table alike.
fn gap_color(kind: GapKind, theme: &Theme) -> Color {
    match kind {
        GapKind::Detection => theme.anomaly,
        GapKind::Analysis => theme.accent,
        GapKind::Requeue => theme.approval,
        GapKind::Pending => theme.pending,
        GapKind::CheckpointLoad => theme.recovering,
    }
}

/// The letter and style of a gap on the recovery row; letters keep the gaps apart without colour.
fn gap_mark(kind: GapKind, theme: &Theme) -> (char, Style) {
    let letter = match kind {
        GapKind::Detection => 'D',
        GapKind::Analysis => 'A',
        GapKind::Requeue => 'R',
        GapKind::Pending => 'P',
        GapKind::CheckpointLoad => 'L',
    };
    (
        letter,
        Style::default()
            .fg(gap_color(kind, theme))
            .add_modifier(Modifier::REVERSED),
    )
}

/// When an attempt left the queue: its start, or while it still waits, now (or its last update once
/// it ended without starting).
fn queued_until(attempt: &Attempt, now: DateTime<Utc>) -> DateTime<Utc> {
    attempt
        .start_time
        .unwrap_or(if attempt.state.is_terminal() {
            attempt.updated_at
        } else {
            now
        })
}

fn bars<'a>(
    detail: &WorkflowHistory,
    recoveries: &[Recovery],
    focused_attempt: Option<u32>,
    width: u16,
    theme: &Theme,
    now: DateTime<Utc>,
) -> Vec<Line<'a>> {
    let Some((from, to)) = timeline_bounds(detail, now) else {
        return vec![Line::styled(
            "no attempt has been submitted yet",
            theme.muted(),
        )];
    };
    let scale = Scale {
        from,
        to,
        width: width.saturating_sub(LABEL_WIDTH) as usize,
    };
    let label = |text: String, style: Style| {
        Span::styled(format!("{text:<w$}", w = LABEL_WIDTH as usize), style)
    };
    let mut lines = Vec::new();
    let mut attempts: Vec<&Attempt> = detail.attempts.iter().collect();
    attempts.sort_by_key(|a| a.index);
    for attempt in attempts {
        let mut strip = Strip::new(scale.width);
        if let Some(queued) = queued_at(detail, attempt, now) {
            strip.paint(
                scale.cells(queued, queued_until(attempt, now)),
                '░',
                theme.state(JobState::Pending),
            );
        }
        if let (Some(start), Some(end)) = (attempt.start_time, running_end(attempt, now)) {
            strip.paint(scale.cells(start, end), '█', theme.state(attempt.state));
        }
        let label_style = if focused_attempt == Some(attempt.index) {
            theme.selected()
        } else {
            theme.state(attempt.state)
        };
        let mut spans = vec![label(
            format!("attempt {} {}", attempt.index, attempt.state_raw),
            label_style,
        )];
        spans.extend(strip.into_spans());
        lines.push(Line::from(spans));
    }
    let mut strip = Strip::new(scale.width);
    for gap in recoveries.iter().flat_map(|r| &r.gaps) {
        let (letter, style) = gap_mark(gap.kind, theme);
        strip.paint(scale.cells(gap.start, gap.end), letter, style);
    }
    let mut spans = vec![label("recovery".into(), theme.muted())];
    spans.extend(strip.into_spans());
    lines.push(Line::from(spans));
    lines.push(Line::from(vec![
        label(String::new(), theme.muted()),
        Span::styled(time_axis(from, to, scale.width), theme.muted()),
    ]));
    lines
}

/// What the bar symbols and the gap letters stand for.
fn legend<'a>(theme: &Theme) -> Line<'a> {
    let mut legend = vec![
        Span::styled("░", theme.state(JobState::Pending)),
        Span::raw(" queued  "),
        Span::styled("█", theme.state(JobState::Running)),
        Span::raw(" running  "),
    ];
    for kind in GapKind::ALL {
        let (letter, style) = gap_mark(kind, theme);
        legend.push(Span::styled(letter.to_string(), style));
        legend.push(Span::raw(format!(" {}  ", kind.name())));
    }
    Line::from(legend)
}

/// `HH:MM` at the start, the middle and the end of the axis.
fn time_axis(from: DateTime<Utc>, to: DateTime<Utc>, width: usize) -> String {
    let mut row = vec![' '; width];
    let mut put = |text: String, at: usize| {
        let at = at.min(width.saturating_sub(text.chars().count()));
        for (offset, c) in text.chars().enumerate() {
            if let Some(cell) = row.get_mut(at + offset) {
                *cell = c;
            }
        }
    };
    let label = |time: DateTime<Utc>| time.format("%H:%M").to_string();
    put(label(from), 0);
    if width >= 24 {
        put(label(from + (to - from) / 2), (width / 2).saturating_sub(2));
    }
    if width >= 12 {
        put(label(to), width.saturating_sub(5));
    }
    row.into_iter().collect()
}

/// One row per recovery: each gap in seconds (`…` while it lasts), their total and the lost work.
fn draw_gap_table(frame: &mut Frame<'_>, area: Rect, recoveries: &[Recovery], theme: &Theme) {
    let block = Block::bordered()
        .title(" Recovery gaps (seconds) ")
        .border_style(theme.muted());
    if recoveries.is_empty() {
        frame.render_widget(
            Paragraph::new("no failure yet: no recovery gap to measure")
                .style(theme.muted())
                .block(block),
            area,
        );
        return;
    }
    let mut heading = vec![Cell::from("recovery")];
    heading.extend(GapKind::ALL.iter().map(|kind| Cell::from(kind.name())));
    heading.push(Cell::from("total"));
    heading.push(Cell::from("lost work"));
    let rows = recoveries.iter().map(|r| {
        let next = r
            .next_attempt
            .map_or_else(|| "…".to_string(), |n| n.to_string());
        let mut cells = vec![Cell::from(format!("{} → {next}", r.failed_attempt))];
        cells.extend(GapKind::ALL.iter().map(|kind| match r.gap(*kind) {
            None => Cell::from("-").style(theme.muted()),
            Some(gap) => {
                let seconds = gap.duration().num_seconds();
                let text = if gap.ongoing {
                    format!("{seconds}s…")
                } else {
                    format!("{seconds}s")
                };
                Cell::from(text).style(Style::default().fg(gap_color(*kind, theme)))
            }
        }));
        cells.push(Cell::from(format!("{}s", r.total().num_seconds())));
        cells.push(Cell::from(format!(
            "{} it from {}, {}s",
            r.lost_iterations,
            r.resumed_from.unwrap_or(0),
            r.lost_time.num_seconds()
        )));
        Row::new(cells)
    });
    // As narrow as the headings, so the lost work keeps what room there is.
    let widths = [
        Constraint::Length(8),
        Constraint::Length(9),
        Constraint::Length(8),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(15),
        Constraint::Length(6),
        Constraint::Min(14),
    ];
    frame.render_widget(
        Table::new(rows, widths)
            .header(Row::new(heading).style(theme.accent()))
            .column_spacing(1)
            .block(block),
        area,
    );
}

#[cfg(all(test, feature = "sim"))]
pub(crate) mod tests;
