//! Anomalies the detectors raised.

use rusqlite::{Row, params};

use crate::model::{Anomaly, AnomalyKind, WorkflowId};
use crate::store::columns::{json, named, time, to_json};
use crate::store::db::{Db, FromRow};
use crate::store::{StoreError, time_to_text};

impl FromRow for Anomaly {
    const COLUMNS: &'static str = "id, workflow_id, attempt_index, kind, time, summary, evidence";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        Ok(Self {
            id: row.get(0)?,
            workflow_id: row.get(1)?,
            attempt_index: row.get(2)?,
            kind: named(row, 3, "anomaly kind", AnomalyKind::parse)?,
            time: time(row, 4)?,
            summary: row.get(5)?,
            evidence: json(row, 6)?,
        })
    }
}

impl Db<'_> {
    pub fn insert_anomaly(&self, anomaly: &Anomaly) -> Result<i64, StoreError> {
        self.execute(
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
        self.select(
            "FROM anomalies WHERE workflow_id = ?1 ORDER BY id",
            [workflow_id],
        )
    }

    /// Every anomaly, oldest first.
    pub fn all_anomalies(&self) -> Result<Vec<Anomaly>, StoreError> {
        self.select("FROM anomalies ORDER BY id", [])
    }

    /// Whether an anomaly of `kind` was already raised on this attempt (detectors raise each once).
    pub fn anomaly_raised(
        &self,
        workflow_id: WorkflowId,
        attempt_index: u32,
        kind: AnomalyKind,
    ) -> Result<bool, StoreError> {
        let count: i64 = self.query_row(
            "SELECT COUNT(*) FROM anomalies WHERE workflow_id = ?1 AND attempt_index = ?2 AND kind = ?3",
            params![workflow_id, attempt_index, kind.as_str()],
            |row| row.get(0),
        )?;
        Ok(count > 0)
    }
}
