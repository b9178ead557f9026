//! Two or more selected attempts side by side (Space selects in the workflows pane): configuration,
//! nodes, throughput and anomalies, one column each.

use super::View;
use chrono::{DateTime, Utc};
use ratatui::Frame;
use ratatui::layout::{Constraint, Rect};
use ratatui::text::Line;
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table};

use super::format_duration;
use crate::tui::app::duration_of;
use crate::tui::snapshot::{AttemptRow, Snapshot};
use crate::tui::theme::Theme;

/// The fields compared, in order.
const FIELDS: [&str; 14] = [
    "workflow",
    "state",
    "reason",
    "partition",
    "nodes",
    "gpus",
    "excluded",
    "duration",
    "checkpoints",
    "TFLOP/s/GPU",
    "last iteration",
    "command",
    "anomalies",
    "attribution",
];

pub fn draw(frame: &mut Frame<'_>, area: Rect, view: &View<'_>) {
    let (app, snapshot, theme, now) = view.parts();
    let chosen: Vec<&AttemptRow> = snapshot
        .rows
        .iter()
        .filter(|row| app.selected.contains(&(row.workflow_id, row.attempt.index)))
        .collect();
    if chosen.len() < 2 {
        frame.render_widget(
            Paragraph::new(vec![
                Line::raw(format!("{} attempt(s) selected.", chosen.len())),
                Line::styled(
                    "Select two or more in the workflows pane with Space, then come back here.",
                    theme.muted(),
                ),
            ])
            .block(
                Block::bordered()
                    .title(" Compare ")
                    .border_style(theme.accent()),
            ),
            area,
        );
        return;
    }
    let header = Row::new(
        std::iter::once(Cell::from("")).chain(
            chosen
                .iter()
                .map(|row| Cell::from(format!("{}.{}", row.attempt.job_id, row.attempt.index))),
        ),
    )
    .style(theme.accent());
    let rows: Vec<Row<'_>> = FIELDS
        .iter()
        .map(|field| {
            Row::new(
                std::iter::once(Cell::from(*field).style(theme.muted())).chain(
                    chosen
                        .iter()
                        .map(|row| value(field, row, snapshot, theme, now)),
                ),
            )
        })
        .collect();
    let mut widths = vec![Constraint::Length(15)];
    widths.extend(chosen.iter().map(|_| Constraint::Fill(1)));
    frame.render_widget(
        Table::new(rows, widths)
            .header(header)
            .column_spacing(2)
            .block(
                Block::bordered()
                    .title(format!(" Compare · {} attempts ", chosen.len()))
                    .border_style(theme.accent()),
            ),
        area,
    );
}

fn value<'a>(
    field: &str,
    row: &'a AttemptRow,
    snapshot: &'a Snapshot,
    theme: &Theme,
    now: DateTime<Utc>,
) -> Cell<'a> {
    let attempt = &row.attempt;
    let detail = snapshot.detail(row.workflow_id);
    let list = |nodes: &[String]| {
        if nodes.is_empty() {
            "-".to_string()
        } else {
            nodes.join(",")
        }
    };
    match field {
        "workflow" => Cell::from(row.workflow.as_str()),
        "state" => Cell::from(attempt.state_raw.as_str()).style(theme.state(attempt.state)),
        "reason" => Cell::from(attempt.reason.clone().unwrap_or_else(|| "-".into())),
        "partition" => Cell::from(row.partition.clone().unwrap_or_else(|| "-".into())),
        "nodes" => Cell::from(format!("{} {}", attempt.nodes.len(), list(&attempt.nodes))),
        "gpus" => Cell::from(attempt.gpus.to_string()),
        "excluded" => Cell::from(list(&attempt.excluded_nodes)),
        "duration" => Cell::from(
            duration_of(row, now)
                .map(|d| format_duration(d, true))
                .unwrap_or_else(|| "-".into()),
        ),
        "checkpoints" => Cell::from(row.checkpoints.to_string()),
        "TFLOP/s/GPU" => Cell::from(
            detail
                .map(|d| {
                    let samples: Vec<f64> = d
                        .throughput
                        .iter()
                        .filter(|s| s.attempt_index == attempt.index)
                        .map(|s| s.tflops_per_gpu)
                        .collect();
                    if samples.is_empty() {
                        "-".to_string()
                    } else {
                        let mean = samples.iter().sum::<f64>() / samples.len() as f64;
                        format!(
                            "mean {mean:.1}, last {:.1}",
                            samples.last().copied().unwrap_or(mean)
                        )
                    }
                })
                .unwrap_or_else(|| "…".into()),
        ),
        "last iteration" => Cell::from(
            attempt
                .last_iteration
                .map(|i| i.to_string())
                .unwrap_or_else(|| "-".into()),
        ),
        "command" => Cell::from(
            detail
                .and_then(|d| d.workflow.spec.command.clone())
                .unwrap_or_else(|| "-".into()),
        ),
        "anomalies" => Cell::from(if row.anomalies.is_empty() {
            "none".to_string()
        } else {
            row.anomalies.join("; ")
        })
        .style(if row.anomalies.is_empty() {
            theme.muted()
        } else {
            theme.anomaly()
        }),
        "attribution" => Cell::from(row.attribution.clone().unwrap_or_else(|| "-".into())),
        _ => Cell::from(""),
    }
}
