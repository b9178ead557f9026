//! The `?` overlay: every key, as the key table has it, and the commands.

use ratatui::Frame;
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph};

use crate::tui::app::COMMANDS;
use crate::tui::keys::help_rows;
use crate::tui::theme::Theme;

pub fn draw(frame: &mut Frame<'_>, area: Rect, theme: &Theme) {
    let row = |keys: &str, what: String, style| {
        Line::from(vec![
            Span::styled(format!("{keys:<21} "), style),
            Span::raw(what),
        ])
    };
    let mut lines: Vec<Line<'_>> = help_rows()
        .into_iter()
        .map(|r| {
            let style = if r.dangerous {
                theme.approval()
            } else {
                theme.accent()
            };
            row(&r.keys, r.what, style)
        })
        .collect();
    lines.extend(
        COMMANDS
            .iter()
            .map(|(command, what)| row(command, what.to_string(), theme.accent())),
    );
    lines.push(Line::styled(
        "also :q :approve ID :reject ID :detach :refresh; the mouse selects rows",
        theme.muted(),
    ));
    let height = (lines.len() as u16 + 3).min(area.height);
    let [vertical] = Layout::vertical([Constraint::Length(height)])
        .flex(Flex::Center)
        .areas(area);
    let [popup] = Layout::horizontal([Constraint::Length(76.min(area.width))])
        .flex(Flex::Center)
        .areas(vertical);
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
