//! Alerts: the notifications the engine leaves in the store, delivered to the user's channels (JSON
//! webhook, Slack-compatible webhook, SMTP mail, a command) with filters, deduplication, a rate limit
//! and retries, persisted until delivered.

pub mod channel;
pub mod config;
pub mod dispatcher;
pub mod payload;

pub use config::{AlertsConfig, ChannelConfig, ChannelKind, SmtpSecurity};
pub use dispatcher::Dispatcher;
pub use payload::Alert;

use crate::store::StoreError;

/// Why alerts could not be set up or a pass failed.
#[derive(Debug, thiserror::Error)]
pub enum AlertError {
    #[error("alert channel {channel}: {message}")]
    Channel { channel: String, message: String },
    #[error(transparent)]
    Store(#[from] StoreError),
}
