//! Notifications: what the user is told, in the history and through alerts.

use rusqlite::{Row, params};

use super::columns::{named, time};
use super::db::{Db, FromRow};
use super::{StoreError, time_to_text};
use crate::model::{AlertEvent, Notification, Severity};

impl FromRow for Notification {
    const COLUMNS: &'static str = "id, workflow_id, time, severity, title, body, event";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        let event: String = row.get(6)?;
        Ok(Self {
            id: row.get(0)?,
            workflow_id: row.get(1)?,
            time: time(row, 2)?,
            // An event name written by a newer version reads as a plain notice.
            event: AlertEvent::parse(&event).unwrap_or(AlertEvent::Notice),
            severity: named(row, 3, "severity", Severity::parse)?,
            title: row.get(4)?,
            body: row.get(5)?,
        })
    }
}

impl Db<'_> {
    pub fn insert_notification(&self, notification: &Notification) -> Result<i64, StoreError> {
        self.execute(
            "INSERT INTO notifications (workflow_id, time, severity, title, body, event) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                notification.workflow_id,
                time_to_text(notification.time),
                notification.severity.as_str(),
                notification.title,
                notification.body,
                notification.event.as_str(),
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// The newest `limit` notifications, newest first.
    pub fn notifications(&self, limit: u32) -> Result<Vec<Notification>, StoreError> {
        self.select("FROM notifications ORDER BY id DESC LIMIT ?1", [limit])
    }

    /// Notifications after `after_id`, oldest first, at most `limit`.
    pub fn notifications_after(
        &self,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<Notification>, StoreError> {
        self.select(
            "FROM notifications WHERE id > ?1 ORDER BY id LIMIT ?2",
            params![after_id, limit],
        )
    }

    /// The highest notification id, 0 when there is none.
    pub fn last_notification_id(&self) -> Result<i64, StoreError> {
        Ok(self.query_row(
            "SELECT COALESCE(MAX(id), 0) FROM notifications",
            [],
            |row| row.get(0),
        )?)
    }
}
