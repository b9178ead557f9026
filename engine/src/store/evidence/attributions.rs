//! Attributions: where a failure sits, and why.

use chrono::{DateTime, Utc};
use rusqlite::{Row, params};

use crate::model::{Attribution, Component, WorkflowId};
use crate::store::columns::{json, named, time, to_json};
use crate::store::db::{Db, FromRow};
use crate::store::{StoreError, time_to_text};

impl FromRow for Attribution {
    const COLUMNS: &'static str = "id, workflow_id, attempt_index, category, component, culprit, \
         confidence, recoverable, signature, explanation, evidence, time, remedies";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        Ok(Self {
            id: row.get(0)?,
            workflow_id: row.get(1)?,
            attempt_index: row.get(2)?,
            category: row.get(3)?,
            component: named(row, 4, "component", Component::parse)?,
            culprit: json(row, 5)?,
            confidence: row.get(6)?,
            recoverable: row.get(7)?,
            signature: row.get(8)?,
            explanation: row.get(9)?,
            evidence: json(row, 10)?,
            time: time(row, 11)?,
            remedies: json(row, 12)?,
        })
    }
}

impl Db<'_> {
    pub fn insert_attribution(&self, attribution: &Attribution) -> Result<i64, StoreError> {
        self.execute(
            "INSERT INTO attributions (workflow_id, attempt_index, category, component, culprit, confidence, \
             recoverable, signature, explanation, evidence, time, remedies) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            params![
                attribution.workflow_id,
                attribution.attempt_index,
                attribution.category,
                attribution.component.as_str(),
                to_json(&attribution.culprit)?,
                attribution.confidence,
                attribution.recoverable,
                attribution.signature,
                attribution.explanation,
                to_json(&attribution.evidence)?,
                time_to_text(attribution.time),
                to_json(&attribution.remedies)?,
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn attributions(&self, workflow_id: WorkflowId) -> Result<Vec<Attribution>, StoreError> {
        self.select(
            "FROM attributions WHERE workflow_id = ?1 ORDER BY id",
            [workflow_id],
        )
    }

    /// Attributions of every workflow made at or after `since`.
    pub fn attributions_since(&self, since: DateTime<Utc>) -> Result<Vec<Attribution>, StoreError> {
        self.select(
            "FROM attributions WHERE time >= ?1 ORDER BY id",
            [time_to_text(since)],
        )
    }

    /// Every attribution, oldest first.
    pub fn all_attributions(&self) -> Result<Vec<Attribution>, StoreError> {
        self.select("FROM attributions ORDER BY id", [])
    }
}
