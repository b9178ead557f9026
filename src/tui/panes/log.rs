//! The focused attempt's log, followed, with the attribution's evidence lines and error lines
//! highlighted; `n`/`N` jump between errors, `f` follows the end again.

use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph};

use crate::tui::log_view::{LogView, is_error};
use crate::tui::theme::Theme;

/// Draws `view`; `evidence` are the lines the attribution quoted.
pub fn draw(frame: &mut Frame<'_>, area: Rect, view: &LogView, evidence: &[String], theme: &Theme) {
    let height = area.height.saturating_sub(2) as usize;
    let title = format!(
        " Log · {} · {} lines{} ",
        view.path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "-".into()),
        view.lines.len(),
        if view.follow {
            " · following"
        } else {
            " · f: follow"
        }
    );
    let lines: Vec<Line<'_>> = match &view.problem {
        Some(problem) => vec![Line::styled(problem.clone(), theme.muted())],
        None => view
            .lines
            .iter()
            .skip(view.top)
            .take(height)
            .map(|line| {
                if evidence
                    .iter()
                    .any(|quoted| quoted.contains(line.trim()) && !line.trim().is_empty())
                {
                    Line::from(vec![
                        Span::styled("» ", theme.anomaly()),
                        Span::styled(line.clone(), theme.anomaly()),
                    ])
                } else if is_error(line) {
                    Line::from(vec![
                        Span::raw("  "),
                        Span::styled(line.clone(), theme.approval()),
                    ])
                } else {
                    Line::from(vec![Span::raw("  "), Span::raw(line.clone())])
                }
            })
            .collect(),
    };
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(title).border_style(theme.accent())),
        area,
    );
}
