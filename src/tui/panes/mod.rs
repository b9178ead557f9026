//! One file per pane; [`draw`] lays out the frame: tabs, the focused pane, the status line, overlays.

pub mod approvals;
pub mod capacity;
pub mod charts;
pub mod compare;
pub mod details;
pub mod help;
pub mod log;
pub mod nodes;
pub mod notifications;
pub mod overview;
pub mod report;
pub mod timeline;

use chrono::{DateTime, TimeDelta, Utc};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Tabs};

use super::app::{App, Mode, Pane};
use super::keys;
use super::snapshot::Snapshot;
use super::theme::Theme;

/// What every pane draws from: the cockpit's state, the store's snapshot, the theme and the engine's
/// time.
#[derive(Clone, Copy)]
pub struct View<'a> {
    pub app: &'a App,
    pub snapshot: &'a Snapshot,
    pub theme: &'a Theme,
    pub now: DateTime<Utc>,
}

impl<'a> View<'a> {
    /// Everything at once, for a pane's `draw`.
    pub fn parts(&self) -> (&'a App, &'a Snapshot, &'a Theme, DateTime<Utc>) {
        (self.app, self.snapshot, self.theme, self.now)
    }
}

/// Draws the whole cockpit.
pub fn draw(
    frame: &mut Frame<'_>,
    app: &App,
    snapshot: &Snapshot,
    theme: &Theme,
    now: DateTime<Utc>,
) {
    let view = View {
        app,
        snapshot,
        theme,
        now,
    };
    let area = frame.area();
    frame.render_widget(Block::default().style(theme.text()), area);
    let [tabs, body, status] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(area);
    draw_tabs(frame, tabs, app, snapshot, theme);
    match app.pane {
        Pane::Overview => overview::draw(frame, body, &view),
        Pane::Details => details::draw(frame, body, &view),
        Pane::Charts => charts::draw(frame, body, &view),
        Pane::Timeline => timeline::draw(frame, body, &view),
        Pane::Approvals => approvals::draw(frame, body, &view),
        Pane::Notifications => notifications::draw(frame, body, &view),
        Pane::Compare => compare::draw(frame, body, &view),
        Pane::Nodes => nodes::draw(frame, body, &view),
        Pane::Capacity => capacity::draw(frame, body, &view),
        Pane::Log => {
            let evidence = app
                .focused(snapshot, now)
                .and_then(|row| {
                    snapshot
                        .detail(row.workflow_id)?
                        .attributions
                        .iter()
                        .rev()
                        .find(|a| a.attempt_index == row.attempt.index)
                })
                .map(|a| a.evidence.clone())
                .unwrap_or_default();
            log::draw(frame, body, &app.log, &evidence, theme)
        }
    }
    draw_status(frame, status, app, snapshot, theme);
    if let Some(view) = &app.report {
        report::draw(frame, body, view, snapshot, theme, now);
    }
    if app.help {
        help::draw(frame, area, theme);
    }
}

fn draw_tabs(frame: &mut Frame<'_>, area: Rect, app: &App, snapshot: &Snapshot, theme: &Theme) {
    let titles_of = |short: bool| -> Vec<String> {
        Pane::ALL
            .iter()
            .enumerate()
            .map(|(n, pane)| {
                let name = if short {
                    pane.short_title()
                } else {
                    pane.title()
                };
                // The tenth pane is on key 0.
                let mut title = format!("{} {name}", (n + 1) % 10);
                if *pane == Pane::Approvals && !snapshot.approvals.is_empty() {
                    title.push_str(&format!(" ({})", snapshot.approvals.len()));
                }
                title
            })
            .collect()
    };
    // On a narrow terminal the short names (and a shorter mode) keep every tab in view.
    let mut titles = titles_of(false);
    let needed: usize = titles.iter().map(|t| t.chars().count() + 2).sum();
    let short = needed + 12 > usize::from(area.width);
    if short {
        titles = titles_of(true);
    }
    let titles: Vec<Line<'_>> = titles.into_iter().map(Line::from).collect();
    let selected = Pane::ALL.iter().position(|p| *p == app.pane).unwrap_or(0);
    let tabs = Tabs::new(titles)
        .select(selected)
        .style(theme.muted())
        .highlight_style(theme.accent())
        .padding("", " ")
        .divider("│");
    let mode = match (app.owns_engine, short) {
        (true, false) => "engine here",
        (true, true) => "engine",
        (false, _) => "viewer",
    };
    let [left, right] = Layout::horizontal([
        Constraint::Min(10),
        Constraint::Length(mode.len() as u16 + 1),
    ])
    .areas(area);
    frame.render_widget(tabs, left);
    frame.render_widget(
        Paragraph::new(Line::from(vec![Span::styled(
            mode.to_string(),
            theme.muted(),
        )]))
        .right_aligned(),
        right,
    );
}

fn draw_status(frame: &mut Frame<'_>, area: Rect, app: &App, snapshot: &Snapshot, theme: &Theme) {
    let line = match app.mode {
        Mode::Search => Line::from(vec![
            Span::styled("/", theme.accent()),
            Span::raw(app.input.clone()),
            Span::styled("▏", theme.accent()),
        ]),
        Mode::Command => Line::from(vec![
            Span::styled(":", theme.accent()),
            Span::raw(app.input.clone()),
            Span::styled("▏", theme.accent()),
        ]),
        Mode::Normal => {
            let mut spans = Vec::new();
            if let Some(message) = &app.message {
                spans.push(Span::styled(message.clone(), theme.approval()));
                spans.push(Span::raw("  "));
            }
            if !app.search.is_empty() {
                spans.push(Span::styled(format!("/{} ", app.search), theme.accent()));
            }
            let f = &app.filters;
            for (key, value) in [
                ("state", &f.state),
                ("user", &f.user),
                ("partition", &f.partition),
                ("backend", &f.backend),
            ] {
                if let Some(value) = value {
                    spans.push(Span::styled(format!("{key}={value} "), theme.accent()));
                }
            }
            spans.push(Span::styled(
                format!(
                    "{} attempts · {} waiting for approval · {}",
                    snapshot.rows.len(),
                    snapshot.approvals.len(),
                    keys::hints()
                ),
                theme.muted(),
            ));
            Line::from(spans)
        }
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// `DD HH:MM:SS` (days only when there are some) or whole seconds.
pub fn format_duration(delta: TimeDelta, clock: bool) -> String {
    let seconds = delta.num_seconds().max(0);
    if !clock {
        return format!("{seconds}s");
    }
    let (days, rest) = (seconds / 86_400, seconds % 86_400);
    let (hours, minutes, secs) = (rest / 3600, rest % 3600 / 60, rest % 60);
    if days > 0 {
        format!("{days:02} {hours:02}:{minutes:02}:{secs:02}")
    } else {
        format!("{hours:02}:{minutes:02}:{secs:02}")
    }
}

/// A time as `MM-DD HH:MM:SS`, or how long ago.
pub fn format_time(time: Option<DateTime<Utc>>, elapsed: bool, now: DateTime<Utc>) -> String {
    match time {
        None => "-".to_string(),
        Some(time) if elapsed => format!("{} ago", format_duration(now - time, true)),
        Some(time) => time.format("%m-%d %H:%M:%S").to_string(),
    }
}
