//! Persistent state: an SQLite file (WAL mode, versioned migrations). The only module that writes SQL.
//!
//! One engine writes at a time (see [`lock::EngineLock`]); other processes may read concurrently and
//! leave commands (approve, reject) in a table the engine polls.
//!
//! Each entity's reads and writes are in the file named after it (`workflows`, `attempts`, `actions`,
//! `evidence/*`, `commands`, ...), each an `impl Db` block; rows become values through `db::FromRow`.

mod actions;
mod alerts;
mod attempts;
mod capacity;
mod columns;
mod commands;
mod db;
mod evidence;
pub mod lock;
mod narratives;
mod nodes;
mod notifications;
mod offsets;
mod phases;
mod schema;
mod warnings;
mod watched;
mod workflows;

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use rusqlite::{Connection, OpenFlags, TransactionBehavior};

pub use crate::model::EvidenceLine;
pub use alerts::{Delivery, DeliveryState};
pub use commands::{Command, CommandKind};
pub use db::Db;
pub use evidence::CheckpointCount;
pub use offsets::LogPosition;
pub use workflows::WorkflowSummary;

/// A store that could not be opened, read or written.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("cannot create the store directory {path}: {source}")]
    CreateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("store {path}: {source}")]
    Open {
        path: PathBuf,
        source: rusqlite::Error,
    },
    #[error(
        "store {path} has schema version {found}, newer than this runguard understands ({known}); upgrade runguard"
    )]
    TooNew {
        path: PathBuf,
        found: i64,
        known: i64,
    },
    #[error("store query failed: {0}")]
    Sql(#[from] rusqlite::Error),
    #[error("store holds a value this version cannot read: {0}")]
    Corrupt(String),
    #[error("no such {what}: {id}")]
    NotFound { what: &'static str, id: String },
}

/// What [`Store::change_mark`] returns: SQLite's count of commits by other connections, and this
/// connection's own count of changed rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChangeMark {
    others: i64,
    own: u64,
}

/// The store: one SQLite connection.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl Store {
    /// Opens (creating if needed) the store file and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Self, StoreError> {
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| StoreError::CreateDir {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        })?;
        Self::prepare(conn, path)
    }

    /// A private in-memory store, for tests and dry runs.
    pub fn open_in_memory() -> Result<Self, StoreError> {
        let conn = Connection::open_in_memory()?;
        Self::prepare(conn, Path::new(":memory:"))
    }

    fn prepare(conn: Connection, path: &Path) -> Result<Self, StoreError> {
        let open_error = |source| StoreError::Open {
            path: path.to_path_buf(),
            source,
        };
        // A reader waits for the writer instead of failing with SQLITE_BUSY.
        conn.busy_timeout(Duration::from_secs(10))
            .map_err(open_error)?;
        // Switching a new file to WAL needs it alone, and SQLite does not wait for that: another process
        // opening the same new store at the same moment (the CLI reading while the engine starts) gets
        // SQLITE_BUSY at once. Try again for a while.
        let mut tries = 0;
        loop {
            match conn.pragma_update(None, "journal_mode", "WAL") {
                Ok(()) => break,
                Err(err) if is_busy(&err) && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(err) => return Err(open_error(err)),
            }
        }
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(open_error)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(open_error)?;
        // Room for every statement a pass or a workflow's history runs (see `Db::select_rows`).
        conn.set_prepared_statement_cache_capacity(128);
        let mut store = Self {
            conn,
            path: path.to_path_buf(),
        };
        store.migrate()?;
        Ok(store)
    }

    fn migrate(&mut self) -> Result<(), StoreError> {
        let known = schema::MIGRATIONS.len() as i64;
        // Immediate: the write lock is taken (waiting for it) before the version is read, so two
        // processes opening a new store cannot both start migrating it.
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)?;
        let found: i64 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
        if found > known {
            return Err(StoreError::TooNew {
                path: self.path.clone(),
                found,
                known,
            });
        }
        for (index, migration) in schema::MIGRATIONS.iter().enumerate().skip(found as usize) {
            tx.execute_batch(migration)?;
            tx.pragma_update(None, "user_version", index as i64 + 1)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Where the store lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A mark that differs after any committed change to the store, by this connection or another
    /// (process or not): a reader that reads again once a second skips the read while it is equal.
    pub fn change_mark(&self) -> Result<ChangeMark, StoreError> {
        let others: i64 = self
            .conn
            .query_row("PRAGMA data_version", [], |row| row.get(0))?;
        Ok(ChangeMark {
            others,
            own: self.conn.total_changes(),
        })
    }

    /// Reads (and single-statement writes, which SQLite commits on their own).
    pub fn db(&self) -> Db<'_> {
        Db::new(&self.conn)
    }

    /// Runs `change` in one transaction: all of it is stored, or none of it.
    pub fn write<T>(
        &mut self,
        change: impl FnOnce(&Db<'_>) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        // Immediate, so that a change that reads before it writes waits for another writer (the CLI
        // queueing a command) instead of failing when it comes to write. The statements are prepared
        // once: the engine writes once for each log it reads, every pass.
        let db = Db::new(&self.conn);
        db.execute("BEGIN IMMEDIATE", [])?;
        let open = Open(&db);
        let value = change(&db)?;
        crate::chaos::point("store_commit");
        db.execute("COMMIT", [])?;
        std::mem::forget(open);
        Ok(value)
    }
}

/// A write transaction not committed: rolled back when dropped (the change failed, or panicked), so
/// that nothing of it stays and the connection can begin the next.
struct Open<'a, 'c>(&'a Db<'c>);

impl Drop for Open<'_, '_> {
    fn drop(&mut self) {
        // A failed rollback (the transaction already ended by SQLite) leaves nothing to undo.
        let _ = self.0.execute("ROLLBACK", []);
    }
}

fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Times are stored as RFC 3339 text so the file stays readable with the `sqlite3` shell.
pub(crate) fn time_to_text(time: DateTime<Utc>) -> String {
    time.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

pub(crate) fn time_from_text(text: &str) -> Result<DateTime<Utc>, StoreError> {
    DateTime::parse_from_rfc3339(text)
        .map(|time| time.with_timezone(&Utc))
        .map_err(|err| StoreError::Corrupt(format!("time {text:?}: {err}")))
}

#[cfg(test)]
pub(crate) mod tests;
