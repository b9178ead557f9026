//! Which overview rows show, in which order: the search, the filters and the sort; the row and the
//! approval the keys act on.

use chrono::{DateTime, Utc};

use std::sync::{Arc, Mutex};

use super::{App, Column, Filters};
use crate::tui::snapshot::{Approval, AttemptRow, Snapshot};
use runguard_engine::model::JobState;

impl App {
    /// The overview's rows after search, filters and sort: grouped by workflow, newest first, unless a
    /// column sort is chosen. The order is computed once for a snapshot (a store read) and kept while
    /// the search, the filters and the sort stay (and, sorted by duration, within the second).
    pub fn visible_rows<'s>(
        &self,
        snapshot: &'s Snapshot,
        now: DateTime<Utc>,
    ) -> Vec<&'s AttemptRow> {
        let key = OrderKey {
            rows: snapshot.rows.len(),
            search: self.search.clone(),
            filters: self.filters.clone(),
            sort: self.sort,
            second: matches!(self.sort, Some((Column::Duration, _))).then(|| now.timestamp()),
        };
        let order = snapshot
            .order
            .get_or_compute(key, || self.order_rows(snapshot, now));
        order
            .iter()
            .filter_map(|&at| snapshot.rows.get(at))
            .collect()
    }

    /// The places in `snapshot.rows` of the rows shown, in the order shown.
    fn order_rows(&self, snapshot: &Snapshot, now: DateTime<Utc>) -> Vec<usize> {
        let needle = self.search.to_lowercase();
        let rows = &snapshot.rows;
        let mut shown: Vec<usize> = (0..rows.len())
            .filter(|&at| {
                let row = &rows[at];
                (needle.is_empty()
                    || row.workflow.to_lowercase().contains(&needle)
                    || row.attempt.job_id.contains(&needle))
                    && self.passes_filters(row)
            })
            .collect();
        match self.sort {
            None => shown.sort_by(|&a, &b| {
                let (a, b) = (&rows[a], &rows[b]);
                b.workflow_id
                    .cmp(&a.workflow_id)
                    .then(b.attempt.index.cmp(&a.attempt.index))
            }),
            // A duration is computed once a row, not once a comparison.
            Some((Column::Duration, descending)) => {
                let mut keyed: Vec<(Option<chrono::TimeDelta>, usize)> = shown
                    .iter()
                    .map(|&at| (duration_of(&rows[at], now), at))
                    .collect();
                keyed.sort_by(|a, b| {
                    let order = a.0.cmp(&b.0);
                    if descending { order.reverse() } else { order }
                });
                shown = keyed.into_iter().map(|(_, at)| at).collect();
            }
            Some((column, descending)) => shown.sort_by(|&a, &b| {
                let order = column.order(&rows[a], &rows[b], now);
                if descending { order.reverse() } else { order }
            }),
        }
        shown
    }

    fn passes_filters(&self, row: &AttemptRow) -> bool {
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

/// What the overview's order depends on besides the snapshot's rows.
#[derive(Debug, Clone, PartialEq)]
struct OrderKey {
    /// A guard against rows changed in place: a new store read is a new snapshot.
    rows: usize,
    search: String,
    filters: Filters,
    sort: Option<(Column, bool)>,
    /// The second of `now`, for the one order that moves with time (durations of running attempts).
    second: Option<i64>,
}

/// The overview's order of one snapshot's rows, for the last search, filters and sort asked for: a
/// frame, a key and the focus look-ups reuse it, so 100 000 attempts are sorted once a store read, not
/// several times a frame. A copy of the snapshot starts without it.
#[derive(Default)]
pub struct RowOrder(Mutex<Option<(OrderKey, Arc<[usize]>)>>);

impl RowOrder {
    fn get_or_compute(&self, key: OrderKey, compute: impl FnOnce() -> Vec<usize>) -> Arc<[usize]> {
        // A panic while computing leaves the last order, which is still a whole one.
        let mut kept = self
            .0
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((known, order)) = kept.as_ref()
            && *known == key
        {
            return Arc::clone(order);
        }
        let order: Arc<[usize]> = compute().into();
        *kept = Some((key, Arc::clone(&order)));
        order
    }
}

impl Clone for RowOrder {
    fn clone(&self) -> Self {
        Self::default()
    }
}

/// A memo, not part of what the snapshot shows.
impl PartialEq for RowOrder {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl std::fmt::Debug for RowOrder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RowOrder")
    }
}
