//! The `?` overlay: every key and command.

use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph};

use crate::tui::theme::Theme;

/// Keys and what they do, as shown.
pub const KEYS: [(&str, &str); 29] = [
    ("j/k ↓/↑", "move"),
    ("Ctrl-d/u PgDn/PgUp", "page"),
    ("g/G Home/End", "first / last"),
    ("Tab / Shift-Tab", "next / previous pane"),
    ("1-8", "the pane of that number on the tab bar"),
    ("3 / 4", "charts / timeline of the focused workflow"),
    ("7 / L", "the focused attempt's log"),
    ("8 / c", "compare the selected attempts side by side"),
    ("n / N / f", "log: next / previous error, follow the end"),
    ("Enter / l", "details of the focused attempt"),
    ("R", "recovery report of the focused workflow"),
    ("Esc / h", "back to the workflows"),
    ("Space", "select for comparison"),
    ("s", "sort by the next column (again: off)"),
    ("t", "duration: DD HH:MM:SS / seconds"),
    ("T", "submitted: time / elapsed"),
    ("U", "last update: time / elapsed"),
    ("/", "search by name or job id"),
    (":", "command line"),
    ("a / x", "approve / reject the proposed action"),
    ("A", "notifications: mine / everyone's"),
    ("r", "refresh"),
    ("D", "detach: leave the engine running headless"),
    ("?", "this help"),
    ("q / Ctrl-c", "quit"),
    (
        ":sort COL [desc]",
        "sort by a column (:sort alone: by workflow)",
    ),
    (
        ":filter k=v …",
        "state, user, partition, backend (:filter alone clears)",
    ),
    (
        ":columns COL …",
        "shown columns in order (saved in the config)",
    ),
    (":theme NAME", "dark, light, high-contrast, or your own"),
];

pub fn draw(frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
    let height = (KEYS.len() as u16 + 4).min(area.height);
    let [vertical] = Layout::vertical([Constraint::Length(height)])
        .flex(Flex::Center)
        .areas(area);
    let [popup] = Layout::horizontal([Constraint::Length(76.min(area.width))])
        .flex(Flex::Center)
        .areas(vertical);
    let mut lines: Vec<Line<'_>> = KEYS
        .iter()
        .map(|(key, what)| {
            Line::from(vec![
                Span::styled(format!("{key:<22}"), theme.accent()),
                Span::raw(*what),
            ])
        })
        .collect();
    lines.push(Line::styled(
        "also :q :approve ID :reject ID :detach :refresh; the mouse selects rows",
        theme.muted(),
    ));
    frame.render_widget(Clear, popup);
    frame.render_widget(
        Paragraph::new(lines).block(
            Block::bordered()
                .title(" Keys (? or Esc to close) ")
                .border_style(theme.accent()),
        ),
        popup,
    );
}
