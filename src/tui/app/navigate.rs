//! Moving around: the cursor (or the report's or the log's scroll), the panes, the details and back,
//! clicks, the selection for comparison, the report overlay and the log's error lines.

use std::cell::Cell;

use chrono::{DateTime, Utc};

use super::{App, Pane, ReportView};
use crate::tui::snapshot::Snapshot;

impl App {
    /// Moves by `by` rows: the report's scroll while it is open, the log's in the log pane, else the
    /// cursor of the approvals or the overview.
    pub(super) fn move_cursor(&mut self, by: i64, snapshot: &Snapshot, now: DateTime<Utc>) {
        if let Some(report) = &mut self.report {
            let last = report.max_scroll.get() as i64;
            report.scroll = (report.scroll as i64).saturating_add(by).clamp(0, last) as usize;
            return;
        }
        if self.pane == Pane::Log {
            self.log.scroll(by, self.log_height);
            return;
        }
        let (cursor, len) = match self.pane {
            Pane::Approvals => (&mut self.approval_cursor, snapshot.approvals.len()),
            _ => {
                let rows = self.visible_rows(snapshot, now).len();
                (&mut self.cursor, rows)
            }
        };
        let last = len.saturating_sub(1) as i64;
        *cursor = (*cursor as i64).saturating_add(by).clamp(0, last.max(0)) as usize;
    }

    /// The pane `step` places further in Tab order.
    pub(super) fn cycle_pane(&mut self, step: usize) {
        let at = Pane::ALL.iter().position(|p| *p == self.pane).unwrap_or(0);
        self.pane = Pane::ALL[(at + step) % Pane::ALL.len()];
    }

    /// From the overview, the focused row's details.
    pub(super) fn enter(&mut self, snapshot: &Snapshot, now: DateTime<Utc>) {
        if self.pane == Pane::Overview && !self.visible_rows(snapshot, now).is_empty() {
            self.pane = Pane::Details;
        }
    }

    /// Back to the overview; there, the search is cleared.
    pub(super) fn back(&mut self) {
        if self.pane != Pane::Overview {
            self.pane = Pane::Overview;
        } else if !self.search.is_empty() {
            self.search.clear();
        }
    }

    /// Selects the focused attempt for comparison, or no longer.
    pub(super) fn toggle_select(&mut self, snapshot: &Snapshot, now: DateTime<Utc>) {
        if let Some(row) = self.focused(snapshot, now) {
            let key = (row.workflow_id, row.attempt.index);
            if !self.selected.remove(&key) {
                self.selected.insert(key);
            }
        }
    }

    /// A click on the overview's row `index`: the cursor goes there; a second click opens its details.
    pub(super) fn click_row(&mut self, index: usize, snapshot: &Snapshot, now: DateTime<Utc>) {
        // The rows are hidden under the report.
        if index < self.visible_rows(snapshot, now).len() && self.report.is_none() {
            if self.cursor == index {
                self.pane = Pane::Details;
            }
            self.cursor = index;
        }
    }

    /// Opens the focused workflow's recovery report, or closes the open one.
    pub(super) fn toggle_report(&mut self, snapshot: &Snapshot, now: DateTime<Utc>) {
        if self.report.take().is_none() {
            match self.focused(snapshot, now) {
                Some(row) => {
                    self.report = Some(ReportView {
                        workflow_id: row.workflow_id,
                        scroll: 0,
                        max_scroll: Cell::new(0),
                    });
                }
                None => self.message = Some("no workflow to report on".into()),
            }
        }
    }

    /// In the log, the next (or previous) line that looks like an error.
    pub(super) fn jump_to_error(&mut self, forward: bool) {
        if self.pane == Pane::Log && !self.log.jump_to_error(forward) {
            self.message = Some("no more error lines that way".into());
        }
    }

    /// In the log, its end in view from now on.
    pub(super) fn follow_log(&mut self) {
        if self.pane == Pane::Log {
            self.log.follow = true;
            self.log.scroll(i64::MAX / 2, self.log_height);
        }
    }
}
