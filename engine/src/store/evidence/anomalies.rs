//! Anomalies the detectors raised.

use rusqlite::{Row, params};

use crate::model::{Anomaly, AnomalyKind, WorkflowId};
use crate::store::columns::{from_json, to_json};
use crate::store::db::{Db, collect};
use crate::store::{StoreError, time_from_text, time_to_text};

fn anomaly_from_row(row: &Row<'_>) -> rusqlite::Result<Result<Anomaly, StoreError>> {
    let kind: String = row.get(3)?;
    let time: String = row.get(4)?;
    let evidence: String = row.get(6)?;
    let (id, workflow_id, attempt_index, summary) =
        (row.get(0)?, row.get(1)?, row.get(2)?, row.get(5)?);
    Ok((|| {
        Ok(Anomaly {
            id,
            workflow_id,
            attempt_index,
            kind: AnomalyKind::parse(&kind)
                .ok_or_else(|| StoreError::Corrupt(format!("anomaly kind {kind:?}")))?,
            time: time_from_text(&time)?,
            summary,
            evidence: from_json(&evidence)?,
        })
    })())
}

impl Db<'_> {
    pub fn insert_anomaly(&self, anomaly: &Anomaly) -> Result<i64, StoreError> {
        self.conn.execute(
            "INSERT INTO anomalies (workflow_id, attempt_index, kind, time, summary, evidence) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                anomaly.workflow_id,
                anomaly.attempt_index,
                anomaly.kind.as_str(),
                time_to_text(anomaly.time),
                anomaly.summary,
                to_json(&anomaly.evidence)?,
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn anomalies(&self, workflow_id: WorkflowId) -> Result<Vec<Anomaly>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, workflow_id, attempt_index, kind, time, summary, evidence FROM anomalies \
             WHERE workflow_id = ?1 ORDER BY id",
        )?;
        collect(stmt.query_map([workflow_id], anomaly_from_row)?)
    }

    /// Every anomaly, oldest first.
    pub fn all_anomalies(&self) -> Result<Vec<Anomaly>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, workflow_id, attempt_index, kind, time, summary, evidence FROM anomalies ORDER BY id",
        )?;
        collect(stmt.query_map([], anomaly_from_row)?)
    }

    /// Whether an anomaly of `kind` was already raised on this attempt (detectors raise each once).
    pub fn anomaly_raised(
        &self,
        workflow_id: WorkflowId,
        attempt_index: u32,
        kind: AnomalyKind,
    ) -> Result<bool, StoreError> {
        let count: i64 = self.conn.query_row(
            "SELECT COUNT(*) FROM anomalies WHERE workflow_id = ?1 AND attempt_index = ?2 AND kind = ?3",
            params![workflow_id, attempt_index, kind.as_str()],
            |row| row.get(0),
        )?;
        Ok(count > 0)
    }
}
