//! Alert deliveries: one row per notification and channel, kept until it is delivered, given up or
//! dropped, so that an alert queued before a restart still goes out after it.

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, Row, params};
use serde::Serialize;

use super::db::{Db, collect};
use super::{StoreError, time_from_text, time_to_text};
use crate::model::{AlertEvent, Severity, WorkflowId};

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Waiting for its (next) try.
    Pending,
    Delivered,
    /// Given up: every try failed, or the channel refused it for good.
    Failed,
    /// Not sent on purpose: a duplicate, or over the channel's rate limit.
    Dropped,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Failed => "failed",
            Self::Dropped => "dropped",
        }
    }

    pub fn parse(name: &str) -> Option<Self> {
        [Self::Pending, Self::Delivered, Self::Failed, Self::Dropped]
            .into_iter()
            .find(|state| state.as_str() == name)
    }
}

/// One alert on its way to one channel.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Delivery {
    pub id: i64,
    pub notification_id: i64,
    pub workflow_id: Option<WorkflowId>,
    pub channel: String,
    pub event: AlertEvent,
    pub severity: Severity,
    pub dedupe_key: String,
    /// The alert as JSON, built when it was queued.
    pub payload: String,
    pub state: DeliveryState,
    pub attempts: u32,
    pub next_try_at: DateTime<Utc>,
    /// Why the last try failed, or why it was dropped (already redacted).
    pub last_error: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

const DELIVERY_COLUMNS: &str = "id, notification_id, workflow_id, channel, event, severity, dedupe_key, \
     payload, state, attempts, next_try_at, last_error, created_at, updated_at";

fn delivery_from_row(row: &Row<'_>) -> rusqlite::Result<Result<Delivery, StoreError>> {
    let event: String = row.get(4)?;
    let severity: String = row.get(5)?;
    let state: String = row.get(8)?;
    let next_try_at: String = row.get(10)?;
    let created_at: String = row.get(12)?;
    let updated_at: String = row.get(13)?;
    let (id, notification_id, workflow_id, channel, dedupe_key, payload, attempts, last_error) = (
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(6)?,
        row.get(7)?,
        row.get(9)?,
        row.get(11)?,
    );
    Ok((|| {
        Ok(Delivery {
            id,
            notification_id,
            workflow_id,
            channel,
            event: AlertEvent::parse(&event).unwrap_or(AlertEvent::Notice),
            severity: Severity::parse(&severity)
                .ok_or_else(|| StoreError::Corrupt(format!("severity {severity:?}")))?,
            dedupe_key,
            payload,
            state: DeliveryState::parse(&state)
                .ok_or_else(|| StoreError::Corrupt(format!("delivery state {state:?}")))?,
            attempts,
            next_try_at: time_from_text(&next_try_at)?,
            last_error,
            created_at: time_from_text(&created_at)?,
            updated_at: time_from_text(&updated_at)?,
        })
    })())
}

impl Db<'_> {
    /// The last notification already turned into deliveries; `None` before alerts ever ran.
    pub fn alert_cursor(&self) -> Result<Option<i64>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT last_notification_id FROM alert_cursor WHERE id = 1",
                [],
                |row| row.get(0),
            )
            .optional()?)
    }

    pub fn set_alert_cursor(&self, last_notification_id: i64) -> Result<(), StoreError> {
        self.conn.execute(
            "INSERT INTO alert_cursor (id, last_notification_id) VALUES (1, ?1) \
             ON CONFLICT(id) DO UPDATE SET last_notification_id = excluded.last_notification_id",
            [last_notification_id],
        )?;
        Ok(())
    }

    pub fn insert_delivery(&self, delivery: &Delivery) -> Result<i64, StoreError> {
        self.conn.execute(
            &format!(
                "INSERT INTO alert_deliveries ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                DELIVERY_COLUMNS.trim_start_matches("id, ")
            ),
            params![
                delivery.notification_id,
                delivery.workflow_id,
                delivery.channel,
                delivery.event.as_str(),
                delivery.severity.as_str(),
                delivery.dedupe_key,
                delivery.payload,
                delivery.state.as_str(),
                delivery.attempts,
                time_to_text(delivery.next_try_at),
                delivery.last_error,
                time_to_text(delivery.created_at),
                time_to_text(delivery.updated_at),
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Records a try's outcome.
    pub fn update_delivery(&self, delivery: &Delivery) -> Result<(), StoreError> {
        self.conn.execute(
            "UPDATE alert_deliveries SET state = ?2, attempts = ?3, next_try_at = ?4, last_error = ?5, \
             updated_at = ?6 WHERE id = ?1",
            params![
                delivery.id,
                delivery.state.as_str(),
                delivery.attempts,
                time_to_text(delivery.next_try_at),
                delivery.last_error,
                time_to_text(delivery.updated_at),
            ],
        )?;
        Ok(())
    }

    /// An earlier delivery of the same alert to the same channel since `since` (not one that was
    /// dropped or given up: those did not reach anyone).
    pub fn earlier_delivery(
        &self,
        channel: &str,
        dedupe_key: &str,
        since: DateTime<Utc>,
    ) -> Result<Option<i64>, StoreError> {
        Ok(self
            .conn
            .query_row(
                "SELECT id FROM alert_deliveries WHERE channel = ?1 AND dedupe_key = ?2 \
                 AND created_at >= ?3 AND state IN ('pending', 'delivered') ORDER BY id LIMIT 1",
                params![channel, dedupe_key, time_to_text(since)],
                |row| row.get(0),
            )
            .optional()?)
    }

    /// Pending deliveries whose try is due, oldest first.
    pub fn due_deliveries(
        &self,
        now: DateTime<Utc>,
        limit: u32,
    ) -> Result<Vec<Delivery>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM alert_deliveries WHERE state = 'pending' AND next_try_at <= ?1 \
             ORDER BY id LIMIT ?2"
        ))?;
        collect(stmt.query_map(params![time_to_text(now), limit], delivery_from_row)?)
    }

    /// When each of a channel's deliveries since `since` went out, oldest first: the rate limit's window.
    pub fn delivered_since(
        &self,
        channel: &str,
        since: DateTime<Utc>,
    ) -> Result<Vec<DateTime<Utc>>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT updated_at FROM alert_deliveries WHERE channel = ?1 AND state = 'delivered' \
             AND updated_at >= ?2 ORDER BY updated_at",
        )?;
        collect(
            stmt.query_map(params![channel, time_to_text(since)], |row| {
                let text: String = row.get(0)?;
                Ok(time_from_text(&text))
            })?,
        )
    }

    /// How many deliveries of `channel` still wait, due or not.
    pub fn pending_deliveries(&self, channel: &str) -> Result<u32, StoreError> {
        Ok(self.conn.query_row(
            "SELECT COUNT(*) FROM alert_deliveries WHERE channel = ?1 AND state = 'pending'",
            [channel],
            |row| row.get(0),
        )?)
    }

    /// The newest `limit` deliveries, newest first.
    pub fn deliveries(&self, limit: u32) -> Result<Vec<Delivery>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM alert_deliveries ORDER BY id DESC LIMIT ?1"
        ))?;
        collect(stmt.query_map([limit], delivery_from_row)?)
    }

    /// How many deliveries each channel has in each state.
    pub fn delivery_counts(&self) -> Result<Vec<(String, DeliveryState, u64)>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT channel, state, COUNT(*) FROM alert_deliveries GROUP BY channel, state ORDER BY channel, state",
        )?;
        collect(stmt.query_map([], |row| {
            let channel: String = row.get(0)?;
            let state: String = row.get(1)?;
            let count: i64 = row.get(2)?;
            let count = u64::try_from(count).unwrap_or_default();
            Ok(DeliveryState::parse(&state)
                .map(|state| (channel, state, count))
                .ok_or_else(|| StoreError::Corrupt(format!("delivery state {state:?}"))))
        })?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;

    fn at(secs: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + secs, 0).unwrap_or_default()
    }

    fn delivery(channel: &str, key: &str, state: DeliveryState, created: i64) -> Delivery {
        Delivery {
            id: 0,
            notification_id: 1,
            workflow_id: None,
            channel: channel.to_string(),
            event: AlertEvent::Failure,
            severity: Severity::Critical,
            dedupe_key: key.to_string(),
            payload: "{}".to_string(),
            state,
            attempts: 0,
            next_try_at: at(created),
            last_error: None,
            created_at: at(created),
            updated_at: at(created),
        }
    }

    #[test]
    fn deliveries_round_trip_and_come_due_in_order() {
        let mut store = Store::open_in_memory().unwrap();
        store
            .write(|db| {
                db.insert_delivery(&delivery("a", "k1", DeliveryState::Pending, 0))?;
                db.insert_delivery(&delivery("a", "k2", DeliveryState::Pending, 50))?;
                db.insert_delivery(&delivery("b", "k1", DeliveryState::Delivered, 0))
            })
            .unwrap();
        let due = store.db().due_deliveries(at(10), 10).unwrap();
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].dedupe_key, "k1");
        let mut first = due[0].clone();
        first.state = DeliveryState::Failed;
        first.attempts = 3;
        first.last_error = Some("refused".to_string());
        store.write(|db| db.update_delivery(&first)).unwrap();
        let all = store.db().deliveries(10).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[2].state, DeliveryState::Failed);
        assert_eq!(all[2].attempts, 3);
        let counts = store.db().delivery_counts().unwrap();
        assert!(counts.contains(&("a".to_string(), DeliveryState::Failed, 1)));
        assert!(counts.contains(&("b".to_string(), DeliveryState::Delivered, 1)));
    }

    #[test]
    fn only_a_recent_sent_or_waiting_delivery_counts_as_earlier() {
        let mut store = Store::open_in_memory().unwrap();
        store
            .write(|db| {
                db.insert_delivery(&delivery("a", "k", DeliveryState::Dropped, 100))?;
                db.insert_delivery(&delivery("a", "k", DeliveryState::Delivered, 0))
            })
            .unwrap();
        assert!(
            store
                .db()
                .earlier_delivery("a", "k", at(-10))
                .unwrap()
                .is_some()
        );
        assert!(
            store
                .db()
                .earlier_delivery("a", "k", at(10))
                .unwrap()
                .is_none()
        );
        assert!(
            store
                .db()
                .earlier_delivery("b", "k", at(-10))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn the_cursor_starts_unset_and_moves() {
        let mut store = Store::open_in_memory().unwrap();
        assert_eq!(store.db().alert_cursor().unwrap(), None);
        store.write(|db| db.set_alert_cursor(5)).unwrap();
        store.write(|db| db.set_alert_cursor(9)).unwrap();
        assert_eq!(store.db().alert_cursor().unwrap(), Some(9));
    }
}
