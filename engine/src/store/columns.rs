//! Values as the store keeps them in columns: JSON text, RFC 3339 times.

use chrono::{DateTime, Utc};
use serde::{Serialize, de::DeserializeOwned};

use super::{StoreError, time_from_text};

pub(super) fn to_json<T: Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|err| StoreError::Corrupt(err.to_string()))
}

pub(super) fn from_json<T: DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|err| StoreError::Corrupt(format!("{err}: {text:.200}")))
}

pub(super) fn opt_time(text: Option<String>) -> Result<Option<DateTime<Utc>>, StoreError> {
    text.as_deref().map(time_from_text).transpose()
}
