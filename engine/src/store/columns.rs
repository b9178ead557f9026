//! Values as the store keeps them in columns: JSON text, RFC 3339 times, the names of enum values.

use chrono::{DateTime, Utc};
use rusqlite::Row;
use serde::{Serialize, de::DeserializeOwned};

use super::{StoreError, time_from_text};

pub(super) fn to_json<T: Serialize>(value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|err| StoreError::Corrupt(err.to_string()))
}

pub(super) fn from_json<T: DeserializeOwned>(text: &str) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|err| StoreError::Corrupt(format!("{err}: {text:.200}")))
}

/// A column of JSON text.
pub(super) fn json<T: DeserializeOwned>(row: &Row<'_>, index: usize) -> Result<T, StoreError> {
    let text: String = row.get(index)?;
    from_json(&text)
}

/// A column of time text.
pub(super) fn time(row: &Row<'_>, index: usize) -> Result<DateTime<Utc>, StoreError> {
    let text: String = row.get(index)?;
    time_from_text(&text)
}

/// A column of time text that may be NULL.
pub(super) fn opt_time(row: &Row<'_>, index: usize) -> Result<Option<DateTime<Utc>>, StoreError> {
    let text: Option<String> = row.get(index)?;
    text.as_deref().map(time_from_text).transpose()
}

/// A column holding the name of an enum value, read by `parse`; `what` names it in the error.
pub(super) fn named<T>(
    row: &Row<'_>,
    index: usize,
    what: &str,
    parse: impl FnOnce(&str) -> Option<T>,
) -> Result<T, StoreError> {
    let name: String = row.get(index)?;
    parse(&name).ok_or_else(|| StoreError::Corrupt(format!("{what} {name:?}")))
}
