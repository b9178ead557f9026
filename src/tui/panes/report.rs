//! The `R` overlay: the recovery report of a workflow, the same text `runguard report` prints, over
//! the pane. It shows the narratives kept in the store and never asks a language model itself.

use chrono::{DateTime, Utc};
use ratatui::Frame;
use ratatui::layout::Rect;
use ratatui::text::Line;
use ratatui::widgets::{Block, Clear, Paragraph};

use crate::tui::app::ReportView;
use crate::tui::snapshot::Snapshot;
use crate::tui::theme::Theme;
use runguard_engine::redact::redact_patterns;
use runguard_engine::report::{NARRATIVE_LABEL, Report, render};

/// Draws the report of `view`'s workflow over most of `area`, scrolled as far as `view` says (no
/// further than its end), and records for the keys how far it can scroll.
pub fn draw(
    frame: &mut Frame<'_>,
    area: Rect,
    view: &ReportView,
    snapshot: &Snapshot,
    theme: &Theme,
    now: DateTime<Utc>,
) {
    let popup = Rect {
        x: area.x + 2.min(area.width / 10),
        y: area.y + 1.min(area.height / 10),
        width: area.width.saturating_sub(2 * 2.min(area.width / 10)),
        height: area.height.saturating_sub(2 * 1.min(area.height / 10)),
    };
    frame.render_widget(Clear, popup);
    let Some(history) = snapshot.detail(view.workflow_id) else {
        frame.render_widget(
            Paragraph::new("this workflow is no longer in the store").block(
                Block::bordered()
                    .title(" Recovery report (Esc closes) ")
                    .border_style(theme.accent()),
            ),
            popup,
        );
        return;
    };
    let report = Report::from_history(history, now);
    let block = Block::bordered()
        .title(format!(
            " Recovery report · {} · j/k scroll · Esc closes ",
            history.workflow.name
        ))
        .border_style(theme.accent());
    let inner = block.inner(popup);
    // Evidence lines are the job's own output: what looks like a credential is masked, as everywhere.
    let rows = wrap(
        &redact_patterns(&render::text(&report)),
        usize::from(inner.width),
    );
    let visible = usize::from(inner.height);
    let max_scroll = rows.len().saturating_sub(visible);
    view.max_scroll.set(max_scroll);
    let top = view.scroll.min(max_scroll);
    let block = block.title_bottom(format!(
        " {}–{} of {} ",
        top + 1,
        (top + visible).min(rows.len()),
        rows.len()
    ));
    let lines: Vec<Line<'_>> = rows
        .into_iter()
        .skip(top)
        .take(visible)
        .map(|row| {
            let style = if row.starts_with(&format!("  {NARRATIVE_LABEL}"))
                || row.starts_with("  narrative unavailable")
            {
                theme.approval()
            } else if !row.starts_with(' ') && !row.is_empty() {
                theme.accent()
            } else if row.trim_start().starts_with('│') {
                theme.muted()
            } else {
                theme.text()
            };
            Line::styled(row, style)
        })
        .collect();
    frame.render_widget(Paragraph::new(lines).block(block), popup);
}

/// The text's lines cut to `width` characters (at a space when there is one in the second half of the
/// row), a cut line going on indented by its own indentation plus two, so that the number of rows, and
/// how far the report scrolls, is known before drawing.
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut rows = Vec::new();
    for line in text.lines() {
        let chars: Vec<char> = line.chars().collect();
        if chars.len() <= width || width == 0 {
            rows.push(line.to_string());
            continue;
        }
        let indent = chars.iter().take_while(|c| **c == ' ').count() + 2;
        let indent = if indent * 2 >= width { 0 } else { indent };
        let mut rest: &[char] = &chars;
        let mut first = true;
        while !rest.is_empty() {
            let room = if first { width } else { width - indent };
            let mut take = room.min(rest.len());
            let mut skip = 0;
            if take < rest.len()
                && let Some(space) = rest[..take].iter().rposition(|c| *c == ' ')
                && space > room / 2
            {
                (take, skip) = (space, 1);
            }
            let head: String = rest[..take].iter().collect();
            rows.push(if first {
                head
            } else {
                format!("{}{head}", " ".repeat(indent))
            });
            rest = &rest[take + skip..];
            first = false;
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::wrap;

    #[test]
    fn a_long_line_goes_on_indented_and_short_ones_stay_whole() {
        let rows = wrap("title\n    │ abcdefghijklmnop", 14);
        assert_eq!(rows, vec!["title", "    │ abcdefgh", "      ijklmnop"]);
        // Too narrow for the indentation: the rest starts at the left edge.
        assert_eq!(wrap("    abcdefgh", 6), vec!["    ab", "cdefgh"]);
        // Words stay whole where a space falls in the second half of the row.
        assert_eq!(
            wrap("  lost work after the checkpoint", 16),
            vec!["  lost work", "    after the", "    checkpoint"]
        );
        assert_eq!(wrap("", 10), Vec::<String>::new());
    }
}
