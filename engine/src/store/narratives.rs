//! The narratives a language model wrote for failures, one per workflow and anomaly.

use rusqlite::{Row, params};

use super::columns::time;
use super::db::{Db, FromRow};
use super::{StoreError, time_to_text};
use crate::model::{Narrative, WorkflowId};

impl FromRow for Narrative {
    const COLUMNS: &'static str = "workflow_id, anomaly_id, source, text, created_at";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        Ok(Self {
            workflow_id: row.get(0)?,
            anomaly_id: row.get(1)?,
            source: row.get(2)?,
            text: row.get(3)?,
            created_at: time(row, 4)?,
        })
    }
}

impl Db<'_> {
    /// Keeps a narrative, replacing an earlier one of the same failure.
    pub fn save_narrative(&self, narrative: &Narrative) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO narratives (workflow_id, anomaly_id, source, text, created_at) \
             VALUES (?1, ?2, ?3, ?4, ?5) \
             ON CONFLICT (workflow_id, anomaly_id) DO UPDATE SET source = ?3, text = ?4, created_at = ?5",
            params![
                narrative.workflow_id,
                narrative.anomaly_id,
                narrative.source,
                narrative.text,
                time_to_text(narrative.created_at),
            ],
        )?;
        Ok(())
    }

    /// The narratives of a workflow's failures, by anomaly.
    pub fn narratives(&self, workflow_id: WorkflowId) -> Result<Vec<Narrative>, StoreError> {
        self.select(
            "FROM narratives WHERE workflow_id = ?1 ORDER BY anomaly_id",
            [workflow_id],
        )
    }
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};

    use crate::model::Narrative;
    use crate::store::Store;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .unwrap()
            .with_timezone(&Utc)
    }

    fn store_with_a_workflow() -> (Store, i64) {
        let mut store = Store::open_in_memory().unwrap();
        let id = store
            .write(|db| db.insert_workflow(&crate::store::tests::workflow()))
            .unwrap();
        (store, id)
    }

    #[test]
    fn a_narrative_is_kept_per_failure_and_a_newer_one_replaces_it() {
        let (mut store, id) = store_with_a_workflow();
        let first = Narrative {
            workflow_id: id,
            anomaly_id: 7,
            source: "model-a at http://127.0.0.1:8000".into(),
            text: "node-07 lost its link".into(),
            created_at: at("2026-01-05T09:00:00Z"),
        };
        let other = Narrative {
            anomaly_id: 3,
            text: "an earlier failure".into(),
            ..first.clone()
        };
        store.write(|db| db.save_narrative(&first)).unwrap();
        store.write(|db| db.save_narrative(&other)).unwrap();
        let newer = Narrative {
            text: "node-07's InfiniBand port went down".into(),
            created_at: at("2026-01-05T10:00:00Z"),
            ..first.clone()
        };
        store.write(|db| db.save_narrative(&newer)).unwrap();
        assert_eq!(store.db().narratives(id).unwrap(), vec![other, newer]);
        assert!(store.db().narratives(id + 1).unwrap().is_empty());
    }
}
