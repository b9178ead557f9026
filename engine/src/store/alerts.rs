//! Alert deliveries: one row per notification and channel, kept until it is delivered, given up or
//! dropped, so that an alert queued before a restart still goes out after it.

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, Row, params};
use serde::Serialize;

use super::columns::{named, time};
use super::db::{Db, FromRow};
use super::{StoreError, time_to_text};
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

impl FromRow for Delivery {
    const COLUMNS: &'static str = "id, notification_id, workflow_id, channel, event, severity, \
         dedupe_key, payload, state, attempts, next_try_at, last_error, created_at, updated_at";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        let event: String = row.get(4)?;
        Ok(Self {
            id: row.get(0)?,
            notification_id: row.get(1)?,
            workflow_id: row.get(2)?,
            channel: row.get(3)?,
            event: AlertEvent::parse(&event).unwrap_or(AlertEvent::Notice),
            severity: named(row, 5, "severity", Severity::parse)?,
            dedupe_key: row.get(6)?,
            payload: row.get(7)?,
            state: named(row, 8, "delivery state", DeliveryState::parse)?,
            attempts: row.get(9)?,
            next_try_at: time(row, 10)?,
            last_error: row.get(11)?,
            created_at: time(row, 12)?,
            updated_at: time(row, 13)?,
        })
    }
}

impl Db<'_> {
    /// The last notification already turned into deliveries; `None` before alerts ever ran.
    pub fn alert_cursor(&self) -> Result<Option<i64>, StoreError> {
        Ok(self
            .query_row(
                "SELECT last_notification_id FROM alert_cursor WHERE id = 1",
                [],
                |row| row.get(0),
            )
            .optional()?)
    }

    pub fn set_alert_cursor(&self, last_notification_id: i64) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO alert_cursor (id, last_notification_id) VALUES (1, ?1) \
             ON CONFLICT(id) DO UPDATE SET last_notification_id = excluded.last_notification_id",
            [last_notification_id],
        )?;
        Ok(())
    }

    pub fn insert_delivery(&self, delivery: &Delivery) -> Result<i64, StoreError> {
        self.execute(
            &format!(
                "INSERT INTO alert_deliveries ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                Delivery::COLUMNS.trim_start_matches("id, ")
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
        self.execute(
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
        self.select(
            "FROM alert_deliveries WHERE state = 'pending' AND next_try_at <= ?1 ORDER BY id LIMIT ?2",
            params![time_to_text(now), limit],
        )
    }

    /// When each of a channel's deliveries since `since` went out, oldest first: the rate limit's window.
    pub fn delivered_since(
        &self,
        channel: &str,
        since: DateTime<Utc>,
    ) -> Result<Vec<DateTime<Utc>>, StoreError> {
        self.select_rows(
            "SELECT updated_at FROM alert_deliveries WHERE channel = ?1 AND state = 'delivered' \
             AND updated_at >= ?2 ORDER BY updated_at",
            params![channel, time_to_text(since)],
            |row| time(row, 0),
        )
    }

    /// How many deliveries of `channel` still wait, due or not.
    pub fn pending_deliveries(&self, channel: &str) -> Result<u32, StoreError> {
        Ok(self.query_row(
            "SELECT COUNT(*) FROM alert_deliveries WHERE channel = ?1 AND state = 'pending'",
            [channel],
            |row| row.get(0),
        )?)
    }

    /// The newest `limit` deliveries, newest first.
    pub fn deliveries(&self, limit: u32) -> Result<Vec<Delivery>, StoreError> {
        self.select("FROM alert_deliveries ORDER BY id DESC LIMIT ?1", [limit])
    }

    /// How many deliveries each channel has in each state.
    pub fn delivery_counts(&self) -> Result<Vec<(String, DeliveryState, u64)>, StoreError> {
        self.select_rows(
            "SELECT channel, state, COUNT(*) FROM alert_deliveries GROUP BY channel, state \
             ORDER BY channel, state",
            [],
            |row| {
                let count: i64 = row.get(2)?;
                Ok((
                    row.get(0)?,
                    named(row, 1, "delivery state", DeliveryState::parse)?,
                    u64::try_from(count).unwrap_or_default(),
                ))
            },
        )
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
