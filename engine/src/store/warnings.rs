//! Warning counters: skipped inputs, counted so they are visible without flooding the log.

use chrono::{DateTime, Utc};
use rusqlite::params;

use super::db::Db;
use super::{StoreError, time_to_text};

impl Db<'_> {
    /// Counts a skipped input (a bad line, an unreadable answer) so it is visible without flooding the log.
    pub fn count_warning(
        &self,
        kind: &str,
        message: &str,
        time: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO warnings (kind, count, last_message, last_time) VALUES (?1, 1, ?2, ?3) \
             ON CONFLICT (kind) DO UPDATE SET count = count + 1, last_message = ?2, last_time = ?3",
            params![kind, message, time_to_text(time)],
        )?;
        Ok(())
    }

    /// Add `count` to a warning counter in one go.
    pub fn add_warnings(
        &self,
        kind: &str,
        count: u64,
        message: &str,
        time: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        if count == 0 {
            return Ok(());
        }
        self.execute(
            "INSERT INTO warnings (kind, count, last_message, last_time) VALUES (?1, ?4, ?2, ?3) \
             ON CONFLICT (kind) DO UPDATE SET count = count + ?4, last_message = ?2, last_time = ?3",
            params![kind, message, time_to_text(time), count as i64],
        )?;
        Ok(())
    }

    /// Warning counters: (kind, count, last message).
    pub fn warnings(&self) -> Result<Vec<(String, u64, String)>, StoreError> {
        self.select_rows(
            "SELECT kind, count, last_message FROM warnings ORDER BY kind",
            [],
            |row| {
                let count: i64 = row.get(1)?;
                Ok((row.get(0)?, count.max(0) as u64, row.get(2)?))
            },
        )
    }
}
