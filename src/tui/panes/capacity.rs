//! The capacity pane: the capacity report of the last thirty days of recorded listings as charts —
//! queue wait by hour of submission, GPUs idle while jobs wait and GPUs asked for by hour (the peak
//! hours marked) — with the headline figures and the recommendations in words.

use std::sync::Arc;

use chrono::TimeDelta;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::Style;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Bar, BarChart, BarGroup, Block, Paragraph, Wrap};

use runguard_engine::capacity::{self, CapacityReport, Window, saved::DEFAULT_BASELINE};
use runguard_engine::store::{Db, StoreError};

use super::View;
use crate::tui::snapshot::Snapshot;
use crate::tui::theme::Theme;

/// How far back the pane looks from the latest recorded listing.
pub const WINDOW: TimeDelta = TimeDelta::days(30);

/// Reads the history again when a listing was recorded since the report was built (the engine
/// records one at most every five minutes), so the pane costs one read per new listing, not per frame.
pub fn ensure(snapshot: &mut Snapshot, db: &Db<'_>) -> Result<(), StoreError> {
    let Some(last) = db.last_job_listing()? else {
        snapshot.capacity = None;
        return Ok(());
    };
    // Half open: the latest listing is inside.
    let to = last + TimeDelta::seconds(1);
    if snapshot
        .capacity
        .as_ref()
        .is_some_and(|report| report.window.to == to)
    {
        return Ok(());
    }
    let window = Window {
        from: to - WINDOW,
        to,
    };
    let history = db.capacity_history(window.from, window.to)?;
    snapshot.capacity = Some(Arc::new(capacity::build(
        &history,
        window,
        DEFAULT_BASELINE,
        to,
    )));
    Ok(())
}

pub fn draw(frame: &mut Frame<'_>, area: Rect, view: &View<'_>) {
    let theme = view.theme;
    let Some(report) = view.snapshot.capacity.as_deref() else {
        frame.render_widget(
            Paragraph::new(
                "no capacity history yet: the engine records the jobs (and the nodes, where the scheduler lists them) every five minutes",
            )
            .wrap(Wrap { trim: true })
            .block(Block::bordered().title(" Capacity ")),
            area,
        );
        return;
    };
    let block = Block::bordered()
        .title(format!(
            " Capacity · {} – {} ",
            report.window.from.format("%m-%d %H:%M"),
            report.window.to.format("%m-%d %H:%M UTC")
        ))
        .border_style(theme.accent());
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let [summary, waits, lower, advice] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Percentage(35),
        Constraint::Percentage(30),
        Constraint::Min(3),
    ])
    .areas(inner);
    frame.render_widget(
        Paragraph::new(summary_lines(report, theme)).wrap(Wrap { trim: true }),
        summary,
    );
    let wait_bars = hourly_bars(&report.waits.all.by_hour, |h| {
        if report
            .peaks
            .windows
            .iter()
            .any(|w| w.hours.hours().any(|p| p == h))
        {
            theme.anomaly()
        } else {
            theme.accent()
        }
    });
    draw_bars(
        frame,
        waits,
        " mean queue wait (min) by hour of submission, UTC; peak hours marked ",
        wait_bars,
        theme,
    );
    let [idle_area, demand_area] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(lower);
    draw_bars(
        frame,
        idle_area,
        " GPUs idle while jobs wait, by hour ",
        hourly_bars(&report.idle.idle_while_waiting_by_hour, |_| theme.accent()),
        theme,
    );
    let demand: Vec<Option<f64>> = report
        .peaks
        .demand_by_hour
        .iter()
        .map(|d| Some(*d))
        .collect();
    let demand_bars = hourly_bars(&demand, |h| {
        let over = report.peaks.capacity_by_hour[h as usize]
            .is_some_and(|capacity| report.peaks.demand_by_hour[h as usize] > capacity);
        if over { theme.anomaly() } else { theme.muted() }
    });
    draw_bars(
        frame,
        demand_area,
        " GPUs asked for by hour (over capacity marked) ",
        demand_bars,
        theme,
    );
    let lines: Vec<Line<'_>> = report
        .recommendations
        .sentences
        .iter()
        .map(|sentence| {
            Line::from(vec![
                Span::styled("• ", theme.accent()),
                Span::raw(sentence.as_str()),
            ])
        })
        .collect();
    frame.render_widget(
        Paragraph::new(lines)
            .wrap(Wrap { trim: true })
            .block(Block::bordered().title(" recommendations ")),
        advice,
    );
}

fn summary_lines<'a>(report: &CapacityReport, theme: &Theme) -> Vec<Line<'a>> {
    let waits = &report.waits.all;
    let figure = |label: &str, value: String| {
        vec![
            Span::styled(format!("{label} "), theme.muted()),
            Span::styled(value, theme.text()),
            Span::raw("   "),
        ]
    };
    let first: Vec<Span<'a>> = [
        figure(
            "queue wait",
            format!(
                "median {:.0} min · p90 {:.0} min · {} started, {} waiting",
                waits.median_minutes, waits.p90_minutes, waits.started, waits.still_waiting
            ),
        ),
        figure(
            "idle while waiting",
            format!("{:.0} GPU-h", report.idle.idle_while_waiting_gpu_hours),
        ),
    ]
    .concat();
    let second: Vec<Span<'a>> = [
        figure(
            "lost to quarantine",
            format!(
                "{:.0} GPU-h ({:.1}%)",
                report.lost.gpu_hours,
                report.lost_share * 100.0
            ),
        ),
        figure(
            "downtime saved",
            format!(
                "{:.1} h over {} recoveries (baseline {:.0} min by hand)",
                report.saved.saved_hours, report.saved.recoveries, report.saved.baseline_minutes
            ),
        ),
    ]
    .concat();
    vec![Line::from(first), Line::from(second)]
}

/// One bar an hour, labelled `00`..`23`; an hour without a value is an empty bar.
fn hourly_bars<'a>(values: &[Option<f64>], style: impl Fn(u32) -> Style) -> Vec<Bar<'a>> {
    values
        .iter()
        .enumerate()
        .map(|(hour, value)| {
            let hour = hour as u32;
            let shown = value.unwrap_or(0.0).max(0.0).round() as u64;
            Bar::new(shown)
                .label(Line::from(format!("{hour:02}")))
                .text_value(value.map_or_else(String::new, |v| format!("{v:.0}")))
                .style(style(hour))
        })
        .collect()
}

fn draw_bars(frame: &mut Frame<'_>, area: Rect, title: &str, bars: Vec<Bar<'_>>, theme: &Theme) {
    let block = Block::bordered().title(title.to_string());
    let inner = block.inner(area);
    let count = bars.len().max(1) as u16;
    // The bars share the width, a column of gap between two.
    let width = (inner.width.saturating_sub(count - 1) / count).max(1);
    let chart = BarChart::default()
        .block(block)
        .data(BarGroup::default().bars(&bars))
        .bar_width(width)
        .bar_gap(u16::from(width > 1))
        .value_style(theme.text())
        .label_style(theme.muted());
    frame.render_widget(chart, area);
}

#[cfg(test)]
mod tests;
