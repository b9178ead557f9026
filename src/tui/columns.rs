//! The overview's columns, each defined once: the name `:sort`, `:columns` and the config use, the
//! heading, the width, the cell it draws for a row and the order it sorts rows in.

use std::cmp::Ordering;

use chrono::{DateTime, Utc};
use ratatui::layout::Constraint;
use ratatui::text::{Line, Span};
use ratatui::widgets::Cell;

use super::app::{App, duration_of};
use super::panes::{format_duration, format_time};
use super::snapshot::AttemptRow;
use super::theme::Theme;

/// The overview's columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Column {
    Select,
    Job,
    Workflow,
    Nodes,
    Gpus,
    State,
    Reason,
    Duration,
    Checkpoints,
    Submitted,
    Updated,
    User,
    Partition,
    Backend,
}

/// What a cell may show besides its row: the selection, the time formats, the colours, the time.
pub struct CellContext<'c> {
    pub app: &'c App,
    pub theme: &'c Theme,
    pub now: DateTime<Utc>,
}

/// Everything about one column.
pub struct ColumnDef {
    pub column: Column,
    /// In `:sort`, `:columns` and the config (`cockpit.toml`): never rename.
    pub name: &'static str,
    /// The heading shown in the table.
    pub heading: &'static str,
    pub width: Constraint,
    pub cell: for<'r> fn(&'r AttemptRow, &CellContext<'_>) -> Cell<'r>,
    /// The order of two rows when this column is sorted on, ascending.
    pub order: fn(&AttemptRow, &AttemptRow, DateTime<Utc>) -> Ordering,
}

/// The columns, in [`Column`]'s order (checked when compiling).
const COLUMNS: [ColumnDef; 14] = [
    ColumnDef {
        column: Column::Select,
        name: "sel",
        heading: " ",
        width: Constraint::Length(1),
        cell: |row, cx| {
            let selected = cx
                .app
                .selected
                .contains(&(row.workflow_id, row.attempt.index));
            Cell::from(if selected { "✓" } else { " " })
        },
        order: job_order,
    },
    ColumnDef {
        column: Column::Job,
        name: "job",
        heading: "JOB.ATT",
        width: Constraint::Length(10),
        cell: |row, _| Cell::from(format!("{}.{}", row.attempt.job_id, row.attempt.index)),
        order: job_order,
    },
    ColumnDef {
        column: Column::Workflow,
        name: "workflow",
        heading: "WORKFLOW",
        width: Constraint::Min(12),
        cell: |row, _| Cell::from(row.workflow.as_str()),
        order: |a, b, _| a.workflow.cmp(&b.workflow),
    },
    ColumnDef {
        column: Column::Nodes,
        name: "nodes",
        heading: "NODES",
        width: Constraint::Length(5),
        cell: |row, _| Cell::from(row.attempt.nodes.len().to_string()),
        order: |a, b, _| a.attempt.nodes.len().cmp(&b.attempt.nodes.len()),
    },
    ColumnDef {
        column: Column::Gpus,
        name: "gpus",
        heading: "GPUS",
        width: Constraint::Length(4),
        cell: |row, _| Cell::from(row.attempt.gpus.to_string()),
        order: |a, b, _| a.attempt.gpus.cmp(&b.attempt.gpus),
    },
    ColumnDef {
        column: Column::State,
        name: "state",
        heading: "STATE",
        width: Constraint::Length(12),
        cell: |row, cx| {
            let attempt = &row.attempt;
            let mut spans = vec![Span::styled(
                attempt.state_raw.clone(),
                cx.theme.state(attempt.state),
            )];
            if !row.anomalies.is_empty() {
                spans.push(Span::styled(" ▲", cx.theme.anomaly()));
            }
            Cell::from(Line::from(spans))
        },
        order: |a, b, _| a.attempt.state_raw.cmp(&b.attempt.state_raw),
    },
    ColumnDef {
        column: Column::Reason,
        name: "reason",
        heading: "REASON",
        width: Constraint::Length(14),
        cell: |row, _| Cell::from(row.attempt.reason.clone().unwrap_or_else(|| "-".into())),
        order: |a, b, _| a.attempt.reason.cmp(&b.attempt.reason),
    },
    ColumnDef {
        column: Column::Duration,
        name: "duration",
        heading: "DURATION",
        width: Constraint::Length(11),
        cell: |row, cx| {
            Cell::from(
                duration_of(row, cx.now)
                    .map(|d| format_duration(d, cx.app.duration_clock))
                    .unwrap_or_else(|| "-".into()),
            )
        },
        order: |a, b, now| duration_of(a, now).cmp(&duration_of(b, now)),
    },
    ColumnDef {
        column: Column::Checkpoints,
        name: "checkpoints",
        heading: "CKPTS",
        width: Constraint::Length(5),
        cell: |row, _| Cell::from(row.checkpoints.to_string()),
        order: |a, b, _| a.checkpoints.cmp(&b.checkpoints),
    },
    ColumnDef {
        column: Column::Submitted,
        name: "submitted",
        heading: "SUBMITTED",
        width: Constraint::Length(14),
        cell: |row, cx| {
            Cell::from(format_time(
                row.attempt.submit_time,
                cx.app.submitted_elapsed,
                cx.now,
            ))
        },
        order: |a, b, _| a.attempt.submit_time.cmp(&b.attempt.submit_time),
    },
    ColumnDef {
        column: Column::Updated,
        name: "updated",
        heading: "UPDATED",
        width: Constraint::Length(14),
        cell: |row, cx| {
            Cell::from(format_time(
                Some(row.attempt.updated_at),
                cx.app.updated_elapsed,
                cx.now,
            ))
        },
        order: |a, b, _| a.attempt.updated_at.cmp(&b.attempt.updated_at),
    },
    ColumnDef {
        column: Column::User,
        name: "user",
        heading: "USER",
        width: Constraint::Length(8),
        cell: |row, _| Cell::from(row.user.as_str()),
        order: |a, b, _| a.user.cmp(&b.user),
    },
    ColumnDef {
        column: Column::Partition,
        name: "partition",
        heading: "PARTITION",
        width: Constraint::Length(9),
        cell: |row, _| Cell::from(row.partition.clone().unwrap_or_else(|| "-".into())),
        order: |a, b, _| a.partition.cmp(&b.partition),
    },
    ColumnDef {
        column: Column::Backend,
        name: "backend",
        heading: "BACKEND",
        width: Constraint::Length(7),
        cell: |row, _| Cell::from(row.backend.as_str()),
        order: |a, b, _| a.backend.as_str().cmp(b.backend.as_str()),
    },
];

// `Column::def` finds a column's definition by its place in the enum.
const _: () = {
    let mut at = 0;
    while at < COLUMNS.len() {
        assert!(COLUMNS[at].column as usize == at, "COLUMNS is out of order");
        at += 1;
    }
};

/// Job ids in numeric order where they are numbers (Slurm's), then as text, then by attempt.
fn job_order(a: &AttemptRow, b: &AttemptRow, _: DateTime<Utc>) -> Ordering {
    let number = |row: &AttemptRow| row.attempt.job_id.parse::<u64>().unwrap_or(0);
    number(a)
        .cmp(&number(b))
        .then(a.attempt.job_id.cmp(&b.attempt.job_id))
        .then(a.attempt.index.cmp(&b.attempt.index))
}

/// The default columns, as the AJR cockpit shows them.
pub const DEFAULT_COLUMNS: [Column; 11] = [
    Column::Select,
    Column::Job,
    Column::Workflow,
    Column::Nodes,
    Column::Gpus,
    Column::State,
    Column::Reason,
    Column::Duration,
    Column::Checkpoints,
    Column::Submitted,
    Column::Updated,
];

impl Column {
    /// Every column, in the order of the table of definitions.
    pub const ALL: [Column; 14] = {
        let mut all = [Column::Select; 14];
        let mut at = 0;
        while at < all.len() {
            all[at] = COLUMNS[at].column;
            at += 1;
        }
        all
    };

    pub fn def(self) -> &'static ColumnDef {
        &COLUMNS[self as usize]
    }

    pub fn name(self) -> &'static str {
        self.def().name
    }

    pub fn parse(name: &str) -> Option<Column> {
        COLUMNS.iter().find(|c| c.name == name).map(|c| c.column)
    }

    pub fn heading(self) -> &'static str {
        self.def().heading
    }

    pub fn width(self) -> Constraint {
        self.def().width
    }

    pub fn cell<'r>(self, row: &'r AttemptRow, cx: &CellContext<'_>) -> Cell<'r> {
        (self.def().cell)(row, cx)
    }

    /// The order of two rows sorted on this column, ascending.
    pub fn order(self, a: &AttemptRow, b: &AttemptRow, now: DateTime<Utc>) -> Ordering {
        (self.def().order)(a, b, now)
    }

    /// Every column's name, for a message.
    pub fn names() -> String {
        COLUMNS
            .iter()
            .map(|c| c.name)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_ones_configs_and_commands_use_and_parse_back() {
        // Kept in users' cockpit.toml: a rename would drop their columns.
        assert_eq!(
            Column::names(),
            "sel, job, workflow, nodes, gpus, state, reason, duration, checkpoints, submitted, \
             updated, user, partition, backend"
        );
        for column in Column::ALL {
            assert_eq!(Column::parse(column.name()), Some(column));
            assert_eq!(column.def().column, column);
        }
        assert_eq!(Column::parse("JOB"), None);
    }
}
