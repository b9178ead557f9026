//! Jobs watched by reference.

use chrono::{DateTime, Utc};
use rusqlite::params;

use super::db::Db;
use super::{StoreError, time_to_text};

impl Db<'_> {
    /// Adds a job to watch; false when it was watched already.
    pub fn add_watched(
        &self,
        backend: &str,
        job_ref: &str,
        time: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let added = self.execute(
            "INSERT OR IGNORE INTO watched_jobs (backend, job_ref, added_at) VALUES (?1, ?2, ?3)",
            params![backend, job_ref, time_to_text(time)],
        )?;
        Ok(added > 0)
    }

    /// Stops watching a job by reference; false when it was not watched.
    pub fn remove_watched(&self, backend: &str, job_ref: &str) -> Result<bool, StoreError> {
        let removed = self.execute(
            "DELETE FROM watched_jobs WHERE backend = ?1 AND job_ref = ?2",
            params![backend, job_ref],
        )?;
        Ok(removed > 0)
    }

    /// The jobs watched by reference on `backend`, oldest first.
    pub fn watched_jobs(&self, backend: &str) -> Result<Vec<String>, StoreError> {
        self.select_rows(
            "SELECT job_ref FROM watched_jobs WHERE backend = ?1 ORDER BY added_at, job_ref",
            [backend],
            |row| Ok(row.get(0)?),
        )
    }
}
