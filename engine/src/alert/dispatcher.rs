//! Turns the store's notifications into deliveries and delivers them, beside the engine and never in
//! its way: it has its own store connection and its own tasks, one per channel, so a channel that is
//! down or slow delays neither a recovery nor the other channels.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};
use tokio::sync::watch;

use super::AlertError;
use super::channel::{Channel, SendError};
use super::config::AlertsConfig;
use super::payload::Alert;
use crate::config::Config;
use crate::model::Severity;
use crate::redact::Redactor;
use crate::store::{Delivery, DeliveryState, Store};

/// Notifications read per pass.
const ENQUEUE_BATCH: u32 = 200;
/// Deliveries tried per channel per pass.
const DELIVERY_BATCH: u32 = 50;
/// How often the tasks look for work.
const PASS_INTERVAL: Duration = Duration::from_millis(500);

/// What one pass over the due deliveries did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassReport {
    pub delivered: u32,
    pub retrying: u32,
    pub failed: u32,
    pub dropped: u32,
}

/// The alert side of a running engine.
pub struct Dispatcher {
    store_path: std::path::PathBuf,
    config: AlertsConfig,
    channels: Vec<Arc<Channel>>,
    redactor: Arc<Redactor>,
    system_max_requeues: u32,
}

impl Dispatcher {
    /// The dispatcher the config asks for; `None` when no channel is configured. Reading the channels'
    /// secrets happens here, so a missing variable stops the start with its name.
    pub fn new(config: &Config, store_path: &Path) -> Result<Option<Self>, AlertError> {
        if config.alerts.channels.is_empty() {
            return Ok(None);
        }
        let timeout = Duration::from_secs(config.alerts.timeout_secs);
        let mut redactor = Redactor::default();
        let channels = config
            .alerts
            .channels
            .iter()
            .map(|channel| Channel::resolve(channel, timeout, &mut redactor).map(Arc::new))
            .collect::<Result<Vec<_>, _>>()?;
        let mut store = Store::open(store_path)?;
        // Alerts start with what happens from now on, not with the store's whole history; a cursor
        // past the last notification (the demo forgot its workflows) starts over at it.
        let last = store.db().last_notification_id()?;
        match store.db().alert_cursor()? {
            Some(cursor) if cursor <= last => {}
            _ => store.write(|db| db.set_alert_cursor(last))?,
        }
        for channel in &channels {
            tracing::info!(channel = channel.name(), target = %channel.describe(), "alert channel ready");
        }
        Ok(Some(Self {
            store_path: store_path.to_path_buf(),
            config: config.alerts.clone(),
            channels,
            redactor: Arc::new(redactor),
            system_max_requeues: config.recovery.system_max_requeues,
        }))
    }

    /// Queues a delivery per channel for each notification since the last pass.
    pub fn enqueue(&self, store: &mut Store, now: DateTime<Utc>) -> Result<usize, AlertError> {
        let cursor = store.db().alert_cursor()?.unwrap_or(0);
        let notifications = store.db().notifications_after(cursor, ENQUEUE_BATCH)?;
        let Some(last) = notifications.last().map(|n| n.id) else {
            return Ok(0);
        };
        let dedupe_since = now - seconds(self.config.dedupe_window_secs);
        let mut queued = 0;
        store.write(|db| {
            for notification in &notifications {
                let alert = Alert::build(db, notification, self.system_max_requeues)?
                    .redacted(&self.redactor);
                let workflow_name = alert.workflow.as_ref().map(|w| w.name.as_str());
                let key = alert.dedupe_key();
                let payload = serde_json::to_string(&alert)
                    .map_err(|err| crate::store::StoreError::Corrupt(err.to_string()))?;
                for channel in &self.channels {
                    if !channel
                        .config
                        .wants(alert.event, alert.severity, workflow_name)
                    {
                        continue;
                    }
                    let earlier = db.earlier_delivery(channel.name(), &key, dedupe_since)?;
                    let (state, why) = match earlier {
                        Some(id) => (
                            DeliveryState::Dropped,
                            Some(format!("duplicate of delivery {id}")),
                        ),
                        None => (DeliveryState::Pending, None),
                    };
                    db.insert_delivery(&Delivery {
                        id: 0,
                        notification_id: notification.id,
                        workflow_id: notification.workflow_id,
                        channel: channel.name().to_string(),
                        event: alert.event,
                        severity: alert.severity,
                        dedupe_key: key.clone(),
                        payload: payload.clone(),
                        state,
                        attempts: 0,
                        next_try_at: now,
                        last_error: why,
                        created_at: now,
                        updated_at: now,
                    })?;
                    queued += usize::from(state == DeliveryState::Pending);
                }
            }
            db.set_alert_cursor(last)
        })?;
        Ok(queued)
    }

    /// Tries each due delivery of `channel` once.
    pub async fn deliver_due(
        &self,
        store: &mut Store,
        channel: &Channel,
        now: DateTime<Utc>,
    ) -> Result<PassReport, AlertError> {
        let mut report = PassReport::default();
        let due: Vec<Delivery> = store
            .db()
            .due_deliveries(now, DELIVERY_BATCH * 4)?
            .into_iter()
            .filter(|delivery| delivery.channel == channel.name())
            .take(DELIVERY_BATCH as usize)
            .collect();
        for mut delivery in due {
            let now = Utc::now();
            // The rate limit counts what this channel delivered in the window.
            let window = seconds(self.config.rate_window_secs);
            let sent = store.db().delivered_since(channel.name(), now - window)?;
            if sent.len() >= self.config.rate_limit as usize {
                if delivery.severity == Severity::Critical {
                    // A critical alert waits for room rather than being lost.
                    delivery.next_try_at = sent
                        .first()
                        .map_or(now, |oldest| *oldest + window + TimeDelta::seconds(1));
                    delivery.last_error = Some(format!(
                        "waiting: over the rate limit of {} per {} s",
                        self.config.rate_limit, self.config.rate_window_secs
                    ));
                } else {
                    delivery.state = DeliveryState::Dropped;
                    delivery.last_error = Some(format!(
                        "over the rate limit of {} per {} s",
                        self.config.rate_limit, self.config.rate_window_secs
                    ));
                    report.dropped += 1;
                }
                delivery.updated_at = now;
                store.write(|db| db.update_delivery(&delivery))?;
                continue;
            }
            let alert: Alert = match serde_json::from_str(&delivery.payload) {
                Ok(alert) => alert,
                Err(err) => {
                    delivery.state = DeliveryState::Failed;
                    delivery.last_error = Some(format!("unreadable alert: {err}"));
                    delivery.updated_at = now;
                    store.write(|db| db.update_delivery(&delivery))?;
                    report.failed += 1;
                    continue;
                }
            };
            let outcome = channel.send(&alert).await;
            let now = Utc::now();
            delivery.attempts += 1;
            delivery.updated_at = now;
            match outcome {
                Ok(detail) => {
                    crate::chaos::point("alert_sent");
                    delivery.state = DeliveryState::Delivered;
                    delivery.last_error = None;
                    report.delivered += 1;
                    tracing::info!(
                        channel = channel.name(),
                        alert = delivery.notification_id,
                        event = delivery.event.as_str(),
                        %detail,
                        "alert delivered"
                    );
                }
                Err(err) => {
                    let message = self.redactor.redact(err.message());
                    let permanent = matches!(err, SendError::Permanent(_));
                    if permanent || delivery.attempts >= self.config.max_attempts {
                        delivery.state = DeliveryState::Failed;
                        report.failed += 1;
                        tracing::warn!(
                            channel = channel.name(),
                            alert = delivery.notification_id,
                            attempts = delivery.attempts,
                            error = %message,
                            "alert delivery given up"
                        );
                    } else {
                        delivery.next_try_at = now + self.backoff(delivery.attempts);
                        report.retrying += 1;
                        tracing::warn!(
                            channel = channel.name(),
                            alert = delivery.notification_id,
                            attempts = delivery.attempts,
                            retry_at = %delivery.next_try_at,
                            error = %message,
                            "alert delivery failed; will retry"
                        );
                    }
                    delivery.last_error = Some(message);
                }
            }
            store.write(|db| db.update_delivery(&delivery))?;
        }
        Ok(report)
    }

    /// The wait before try `attempts + 1`: doubling from the initial wait, capped.
    fn backoff(&self, attempts: u32) -> TimeDelta {
        let initial = self.config.retry_initial_secs.max(1);
        let factor = 1u64 << attempts.saturating_sub(1).min(20);
        seconds(
            initial
                .saturating_mul(factor)
                .min(self.config.retry_max_secs.max(initial)),
        )
    }

    /// Queues and delivers until `stop` turns true, then gives undelivered alerts
    /// `flush_on_exit_secs` to go out. Each channel delivers on its own task.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        let this = Arc::new(self);
        let flush = Duration::from_secs(this.config.flush_on_exit_secs);
        let mut workers = tokio::task::JoinSet::new();
        for channel in this.channels.clone() {
            let this = Arc::clone(&this);
            let mut stop = stop.clone();
            workers.spawn(async move {
                let mut store = match Store::open(&this.store_path) {
                    Ok(store) => store,
                    Err(err) => {
                        tracing::error!(channel = channel.name(), %err, "alert channel cannot open the store");
                        return;
                    }
                };
                let mut stopping_since: Option<tokio::time::Instant> = None;
                loop {
                    if let Err(err) = this.deliver_due(&mut store, &channel, Utc::now()).await {
                        tracing::warn!(channel = channel.name(), %err, "alert delivery pass");
                    }
                    if stopping_since.is_some()
                        && store.db().pending_deliveries(channel.name()).unwrap_or(0) == 0
                    {
                        return;
                    }
                    if let Some(since) = stopping_since
                        && since.elapsed() >= flush
                    {
                        return;
                    }
                    if stopping_since.is_none() {
                        tokio::select! {
                            _ = tokio::time::sleep(PASS_INTERVAL) => {}
                            _ = async { stop.wait_for(|stopped| *stopped).await.is_ok() } => {
                                stopping_since = Some(tokio::time::Instant::now());
                                // The last notifications are queued by the enqueue loop first.
                                tokio::time::sleep(PASS_INTERVAL).await;
                            }
                        }
                    } else {
                        tokio::time::sleep(PASS_INTERVAL).await;
                    }
                }
            });
        }
        match Store::open(&this.store_path) {
            Ok(mut store) => {
                let mut sender_gone = false;
                loop {
                    if let Err(err) = this.enqueue(&mut store, Utc::now()) {
                        tracing::warn!(%err, "queueing alerts");
                    }
                    if sender_gone || *stop.borrow() {
                        break;
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(PASS_INTERVAL) => {}
                        changed = stop.changed() => sender_gone = changed.is_err(),
                    }
                }
            }
            Err(err) => tracing::error!(%err, "alerts cannot open the store"),
        }
        while workers.join_next().await.is_some() {}
    }
}

fn seconds(secs: u64) -> TimeDelta {
    TimeDelta::seconds(i64::try_from(secs).unwrap_or(i64::MAX / 1000))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AlertEvent, Notification};

    fn notification(event: AlertEvent, severity: Severity, title: &str) -> Notification {
        Notification {
            id: 0,
            workflow_id: None,
            time: Utc::now(),
            event,
            severity,
            title: title.to_string(),
            body: String::new(),
        }
    }

    fn dispatcher(dir: &Path, rate_limit: u32) -> (Dispatcher, Store) {
        let mut config = Config::default();
        config.alerts.rate_limit = rate_limit;
        config.alerts.channels = vec![
            toml::from_str("name = \"ok\"\nkind = \"command\"\nargv = [\"true\"]")
                .unwrap_or_else(|err| unreachable!("{err}")),
        ];
        let path = dir.join("store.sqlite");
        let mut store = Store::open(&path).unwrap_or_else(|err| unreachable!("{err}"));
        // History before alerts were configured is not sent.
        store
            .write(|db| {
                db.insert_notification(&notification(
                    AlertEvent::Failure,
                    Severity::Critical,
                    "old",
                ))
            })
            .unwrap_or_else(|err| unreachable!("{err}"));
        let dispatcher = Dispatcher::new(&config, &path)
            .unwrap_or_else(|err| unreachable!("{err}"))
            .unwrap_or_else(|| unreachable!("a channel is configured"));
        (dispatcher, store)
    }

    fn states(store: &Store) -> Vec<(String, DeliveryState)> {
        let mut all = store.db().deliveries(100).unwrap_or_default();
        all.reverse();
        all.into_iter().map(|d| (d.dedupe_key, d.state)).collect()
    }

    #[tokio::test]
    async fn the_same_alert_again_within_the_window_is_dropped_as_a_duplicate() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| unreachable!("{err}"));
        let (dispatcher, mut store) = dispatcher(dir.path(), 30);
        store
            .write(|db| {
                for title in ["a", "a", "b", "a"] {
                    db.insert_notification(&notification(
                        AlertEvent::Stopped,
                        Severity::Critical,
                        title,
                    ))?;
                }
                Ok(())
            })
            .unwrap_or_else(|err| unreachable!("{err}"));
        assert_eq!(
            dispatcher
                .enqueue(&mut store, Utc::now())
                .unwrap_or_default(),
            2
        );
        // Nothing is queued twice.
        assert_eq!(
            dispatcher
                .enqueue(&mut store, Utc::now())
                .unwrap_or_default(),
            0
        );
        let found = states(&store);
        assert_eq!(
            found.iter().map(|(_, state)| *state).collect::<Vec<_>>(),
            vec![
                DeliveryState::Pending,
                DeliveryState::Dropped,
                DeliveryState::Pending,
                DeliveryState::Dropped
            ]
        );
        assert!(found.iter().all(|(key, _)| !key.ends_with("/old")));
        let dropped = store.db().deliveries(100).unwrap_or_default();
        assert!(
            dropped[0]
                .last_error
                .as_deref()
                .unwrap_or_default()
                .starts_with("duplicate of delivery")
        );
    }

    #[tokio::test]
    async fn over_the_rate_limit_warnings_are_dropped_and_critical_alerts_wait() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| unreachable!("{err}"));
        let (dispatcher, mut store) = dispatcher(dir.path(), 2);
        store
            .write(|db| {
                for (index, severity) in [
                    Severity::Warning,
                    Severity::Warning,
                    Severity::Warning,
                    Severity::Critical,
                ]
                .into_iter()
                .enumerate()
                {
                    db.insert_notification(&notification(
                        AlertEvent::CheckpointStall,
                        severity,
                        &format!("stall {index}"),
                    ))?;
                }
                Ok(())
            })
            .unwrap_or_else(|err| unreachable!("{err}"));
        dispatcher
            .enqueue(&mut store, Utc::now())
            .unwrap_or_default();
        let channel = Arc::clone(&dispatcher.channels[0]);
        let report = dispatcher
            .deliver_due(&mut store, &channel, Utc::now())
            .await
            .unwrap_or_else(|err| unreachable!("{err}"));
        assert_eq!(report.delivered, 2);
        assert_eq!(report.dropped, 1);
        let all = store.db().deliveries(100).unwrap_or_default();
        let critical = &all[0];
        assert_eq!(critical.state, DeliveryState::Pending);
        assert!(
            critical.next_try_at > Utc::now() + TimeDelta::minutes(59),
            "{critical:?}"
        );
        assert_eq!(all[1].state, DeliveryState::Dropped);
        assert!(
            all[1]
                .last_error
                .as_deref()
                .unwrap_or_default()
                .contains("rate limit of 2 per 3600 s")
        );
    }

    #[test]
    fn retries_back_off_doubling_up_to_the_cap() {
        let dir = tempfile::tempdir().unwrap_or_else(|err| unreachable!("{err}"));
        let (dispatcher, _store) = dispatcher(dir.path(), 30);
        let waits: Vec<i64> = (1..=9)
            .map(|n| dispatcher.backoff(n).num_seconds())
            .collect();
        assert_eq!(waits, vec![5, 10, 20, 40, 80, 160, 320, 600, 600]);
    }
}
