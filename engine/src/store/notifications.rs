//! Notifications: what the user is told, in the history and through alerts.

use rusqlite::params;

use super::db::{Db, collect};
use super::{StoreError, time_from_text, time_to_text};
use crate::model::{AlertEvent, Notification, Severity};

const NOTIFICATION_COLUMNS: &str = "id, workflow_id, time, severity, title, body, event";

fn notification_from_row(
    row: &rusqlite::Row<'_>,
) -> rusqlite::Result<Result<Notification, StoreError>> {
    let time: String = row.get(2)?;
    let severity: String = row.get(3)?;
    let event: String = row.get(6)?;
    let (id, workflow_id, title, body) = (row.get(0)?, row.get(1)?, row.get(4)?, row.get(5)?);
    Ok((|| {
        Ok(Notification {
            id,
            workflow_id,
            time: time_from_text(&time)?,
            // An event name written by a newer version reads as a plain notice.
            event: AlertEvent::parse(&event).unwrap_or(AlertEvent::Notice),
            severity: Severity::parse(&severity)
                .ok_or_else(|| StoreError::Corrupt(format!("severity {severity:?}")))?,
            title,
            body,
        })
    })())
}

impl Db<'_> {
    pub fn insert_notification(&self, notification: &Notification) -> Result<i64, StoreError> {
        self.conn.execute(
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
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {NOTIFICATION_COLUMNS} FROM notifications ORDER BY id DESC LIMIT ?1"
        ))?;
        collect(stmt.query_map([limit], notification_from_row)?)
    }

    /// Notifications after `after_id`, oldest first, at most `limit`.
    pub fn notifications_after(
        &self,
        after_id: i64,
        limit: u32,
    ) -> Result<Vec<Notification>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {NOTIFICATION_COLUMNS} FROM notifications WHERE id > ?1 ORDER BY id LIMIT ?2"
        ))?;
        collect(stmt.query_map(params![after_id, limit], notification_from_row)?)
    }

    /// The highest notification id, 0 when there is none.
    pub fn last_notification_id(&self) -> Result<i64, StoreError> {
        Ok(self.conn.query_row(
            "SELECT COALESCE(MAX(id), 0) FROM notifications",
            [],
            |row| row.get(0),
        )?)
    }
}
