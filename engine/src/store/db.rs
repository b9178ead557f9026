//! The query handle over a connection or transaction.

use rusqlite::Connection;

use super::StoreError;

/// Queries over a connection; inside [`super::Store::write`] they all share one transaction.
pub struct Db<'c> {
    pub(super) conn: &'c Connection,
}

impl<'c> Db<'c> {
    pub(super) fn new(conn: &'c Connection) -> Self {
        Self { conn }
    }
}

/// Collects rows through a fallible mapper that may fail on SQL or on content.
pub(super) fn collect<T>(
    rows: impl Iterator<Item = rusqlite::Result<Result<T, StoreError>>>,
) -> Result<Vec<T>, StoreError> {
    let mut out = Vec::new();
    for row in rows {
        out.push(row??);
    }
    Ok(out)
}
