//! Which overview rows show, in which order: the search, the filters and the sort; the row and the
//! approval the keys act on.

use chrono::{DateTime, Utc};

use super::{App, Column};
use crate::tui::snapshot::{Approval, AttemptRow, Snapshot};
use runguard_engine::model::JobState;

impl App {
    /// The overview's rows after search, filters and sort: grouped by workflow, newest first, unless a
    /// column sort is chosen.
    pub fn visible_rows<'s>(
        &self,
        snapshot: &'s Snapshot,
        now: DateTime<Utc>,
    ) -> Vec<&'s AttemptRow> {
        let needle = self.search.to_lowercase();
        let mut rows: Vec<&AttemptRow> = snapshot
            .rows
            .iter()
            .filter(|row| {
                needle.is_empty()
                    || row.workflow.to_lowercase().contains(&needle)
                    || row.attempt.job_id.contains(&needle)
            })
            .filter(|row| {
                let f = &self.filters;
                f.state.as_deref().is_none_or(|s| {
                    row.attempt.state.as_str() == s || row.attempt.state_raw.eq_ignore_ascii_case(s)
                }) && f.user.as_deref().is_none_or(|u| row.user == u)
                    && f.partition
                        .as_deref()
                        .is_none_or(|p| row.partition.as_deref() == Some(p))
                    && f.backend
                        .as_deref()
                        .is_none_or(|b| row.backend.as_str() == b)
            })
            .collect();
        match self.sort {
            None => rows.sort_by(|a, b| {
                b.workflow_id
                    .cmp(&a.workflow_id)
                    .then(b.attempt.index.cmp(&a.attempt.index))
            }),
            Some((column, descending)) => {
                rows.sort_by(|a, b| {
                    let order = column.order(a, b, now);
                    if descending { order.reverse() } else { order }
                });
            }
        }
        rows
    }

    /// The overview row under the cursor.
    pub fn focused<'s>(
        &self,
        snapshot: &'s Snapshot,
        now: DateTime<Utc>,
    ) -> Option<&'s AttemptRow> {
        let rows = self.visible_rows(snapshot, now);
        rows.get(self.cursor.min(rows.len().saturating_sub(1)))
            .copied()
    }

    /// The approval the keys act on: the one under the cursor in the approvals pane, elsewhere the
    /// oldest one of the focused workflow.
    pub fn focused_approval<'s>(
        &self,
        snapshot: &'s Snapshot,
        now: DateTime<Utc>,
    ) -> Option<&'s Approval> {
        if self.pane == super::Pane::Approvals {
            return snapshot.approvals.get(
                self.approval_cursor
                    .min(snapshot.approvals.len().saturating_sub(1)),
            );
        }
        let row = self.focused(snapshot, now)?;
        snapshot
            .approvals
            .iter()
            .find(|a| a.action.workflow_id == row.workflow_id)
    }

    /// Sorts by `column`; again on the same column reverses the order.
    pub(super) fn sort_by(&mut self, column: Column) {
        self.sort = match self.sort {
            Some((current, descending)) if current == column => Some((column, !descending)),
            _ => Some((column, false)),
        };
        self.message = Some(self.sort_label());
    }

    /// Sorts by the next visible column; after the last, by workflow again.
    pub(super) fn sort_next(&mut self) {
        let sortable: Vec<Column> = self
            .columns
            .iter()
            .copied()
            .filter(|c| *c != Column::Select)
            .collect();
        let next = match self.sort {
            None => sortable.first().copied(),
            Some((current, _)) => sortable
                .iter()
                .position(|c| *c == current)
                .and_then(|at| sortable.get(at + 1).copied()),
        };
        match next {
            Some(column) => self.sort = Some((column, false)),
            None => self.sort = None,
        }
        self.message = Some(self.sort_label());
    }

    pub(super) fn sort_label(&self) -> String {
        match self.sort {
            None => "sorted by workflow, newest first".to_string(),
            Some((column, descending)) => format!(
                "sorted by {}{}",
                column.name(),
                if descending { ", descending" } else { "" }
            ),
        }
    }
}

/// How long an attempt ran (until now when it still runs).
pub fn duration_of(row: &AttemptRow, now: DateTime<Utc>) -> Option<chrono::TimeDelta> {
    let start = row.attempt.start_time?;
    let end = if row.attempt.state.is_terminal() || row.attempt.state == JobState::Requeued {
        row.attempt.end_time.unwrap_or(now)
    } else {
        now
    };
    Some((end - start).max(chrono::TimeDelta::zero()))
}
