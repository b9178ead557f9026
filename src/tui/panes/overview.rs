//! The workflows overview (home): one row per attempt, grouped by workflow, newest first.

use super::View;
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, TableState};

use crate::tui::app::{App, Column};
use crate::tui::columns::CellContext;
use crate::tui::snapshot::AttemptRow;
use crate::tui::theme::Theme;

pub fn draw(frame: &mut Frame<'_>, area: Rect, view: &View<'_>) {
    let (app, snapshot, theme, now) = view.parts();
    let rows = app.visible_rows(snapshot, now);
    let focused = rows
        .get(app.cursor.min(rows.len().saturating_sub(1)))
        .copied();
    let [table_area, focus_area] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(3)]).areas(area);
    let header = Row::new(app.columns.iter().map(|column| {
        let mut heading = column.heading().to_string();
        if let Some((sorted, descending)) = app.sort
            && sorted == *column
        {
            heading.push(if descending { '▼' } else { '▲' });
        }
        Cell::from(heading)
    }))
    .style(theme.accent());
    // Only the rows in view are built: thousands of attempts cost a sort, not a table of thousands.
    let height = usize::from(table_area.height.saturating_sub(3)).max(1);
    let cursor = app.cursor.min(rows.len().saturating_sub(1));
    let offset = cursor.saturating_sub(height - 1);
    let cx = CellContext { app, theme, now };
    let body: Vec<Row<'_>> = rows
        .iter()
        .skip(offset)
        .take(height)
        .map(|row| Row::new(app.columns.iter().map(|column| column.cell(row, &cx))))
        .collect();
    let widths: Vec<Constraint> = app.columns.iter().map(|c| c.width()).collect();
    let title = format!(
        " Workflows · {} of {} attempts ",
        rows.len(),
        snapshot.rows.len()
    );
    let table = Table::new(body, widths)
        .header(header)
        .block(Block::bordered().title(title).border_style(theme.accent()))
        .row_highlight_style(theme.selected())
        .column_spacing(1);
    let mut state = TableState::default();
    if !rows.is_empty() {
        state.select(Some(cursor - offset));
    }
    frame.render_stateful_widget(table, table_area, &mut state);
    frame.render_widget(focus_line(focused, theme), focus_area);
}

/// What a focused row hides in its cells: anomalies, attribution, last checkpoint.
fn focus_line<'a>(row: Option<&'a AttemptRow>, theme: &Theme) -> Paragraph<'a> {
    let Some(row) = row else {
        return Paragraph::new("no workflow yet: runguard enrols jobs as they appear")
            .style(theme.muted())
            .block(Block::bordered());
    };
    let mut lines = Vec::new();
    let first = match (row.anomalies.last(), &row.attribution) {
        (Some(anomaly), Some(attribution)) => Line::from(vec![
            Span::styled("▲ ", theme.anomaly()),
            Span::raw(anomaly.clone()),
            Span::styled(format!("  ⇒ {attribution}"), theme.accent()),
        ]),
        (Some(anomaly), None) => Line::from(vec![
            Span::styled("▲ ", theme.anomaly()),
            Span::raw(anomaly.clone()),
        ]),
        _ => Line::styled(
            format!("{} attempt {}: no anomaly", row.workflow, row.attempt.index),
            theme.muted(),
        ),
    };
    lines.push(first);
    if let Some(time) = row.last_checkpoint {
        lines.push(Line::styled(
            format!("last checkpoint {}", time.format("%Y-%m-%d %H:%M:%S")),
            theme.muted(),
        ));
    }
    Paragraph::new(lines).block(Block::bordered().border_style(theme.muted()))
}

/// The column whose heading is at `x` in a frame `frame_width` wide (the table's border is 1 wide and
/// its columns are laid out as the table lays them out).
pub fn column_at(app: &App, frame_width: u16, x: u16) -> Option<Column> {
    let inner = Rect::new(1, 0, frame_width.saturating_sub(2), 1);
    let widths: Vec<Constraint> = app.columns.iter().map(|c| c.width()).collect();
    let areas = Layout::horizontal(widths).spacing(1).split(inner);
    app.columns
        .iter()
        .zip(areas.iter())
        .find(|(_, area)| x >= area.x && x < area.x + area.width)
        .map(|(column, _)| *column)
}
