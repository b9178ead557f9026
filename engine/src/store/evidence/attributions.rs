//! Attributions: where a failure sits, and why.

use chrono::{DateTime, Utc};
use rusqlite::{Row, params};

use crate::model::{Attribution, Component, WorkflowId};
use crate::store::columns::{from_json, to_json};
use crate::store::db::{Db, collect};
use crate::store::{StoreError, time_from_text, time_to_text};

fn attribution_from_row(row: &Row<'_>) -> rusqlite::Result<Result<Attribution, StoreError>> {
    let component: String = row.get(4)?;
    let culprit: String = row.get(5)?;
    let evidence: String = row.get(10)?;
    let time: String = row.get(11)?;
    let remedies: String = row.get(12)?;
    let (id, workflow_id, attempt_index, category, confidence, recoverable, signature, explanation) = (
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
        row.get(9)?,
    );
    Ok((|| {
        Ok(Attribution {
            id,
            workflow_id,
            attempt_index,
            category,
            component: Component::parse(&component)
                .ok_or_else(|| StoreError::Corrupt(format!("component {component:?}")))?,
            culprit: from_json(&culprit)?,
            confidence,
            recoverable,
            signature,
            explanation,
            evidence: from_json(&evidence)?,
            time: time_from_text(&time)?,
            remedies: from_json(&remedies)?,
        })
    })())
}

impl Db<'_> {
    pub fn insert_attribution(&self, attribution: &Attribution) -> Result<i64, StoreError> {
        self.conn.execute(
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
        let mut stmt = self.conn.prepare(
            "SELECT id, workflow_id, attempt_index, category, component, culprit, confidence, recoverable, \
             signature, explanation, evidence, time, remedies FROM attributions WHERE workflow_id = ?1 ORDER BY id",
        )?;
        collect(stmt.query_map([workflow_id], attribution_from_row)?)
    }

    /// Attributions of every workflow made at or after `since`.
    pub fn attributions_since(&self, since: DateTime<Utc>) -> Result<Vec<Attribution>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, workflow_id, attempt_index, category, component, culprit, confidence, recoverable, \
             signature, explanation, evidence, time, remedies FROM attributions WHERE time >= ?1 ORDER BY id",
        )?;
        collect(stmt.query_map([time_to_text(since)], attribution_from_row)?)
    }

    /// Every attribution, oldest first.
    pub fn all_attributions(&self) -> Result<Vec<Attribution>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT id, workflow_id, attempt_index, category, component, culprit, confidence, recoverable, \
             signature, explanation, evidence, time, remedies FROM attributions ORDER BY id",
        )?;
        collect(stmt.query_map([], attribution_from_row)?)
    }
}
