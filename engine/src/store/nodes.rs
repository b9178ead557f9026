//! The node ledger: incidents per node, each node's state, and the exclusions runguard added to jobs.

use chrono::{DateTime, Utc};
use rusqlite::{Row, params};

use super::columns::{json, named, opt_time, time, to_json};
use super::db::{Db, FromRow};
use super::{StoreError, time_to_text};
use crate::model::{
    AddedExclusion, IncidentSource, NodeIncident, NodeRecord, NodeState, WorkflowId,
};

impl FromRow for NodeIncident {
    const COLUMNS: &'static str = "id, node, time, source, kind, weight, fatal, workflow_id, \
         attempt_index, job_id, evidence";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        Ok(Self {
            id: row.get(0)?,
            node: row.get(1)?,
            time: time(row, 2)?,
            source: named(row, 3, "incident source", IncidentSource::parse)?,
            kind: row.get(4)?,
            weight: row.get(5)?,
            fatal: row.get(6)?,
            workflow_id: row.get(7)?,
            attempt_index: row.get(8)?,
            job_id: row.get(9)?,
            evidence: json(row, 10)?,
        })
    }
}

impl FromRow for NodeRecord {
    const COLUMNS: &'static str = "node, state, since, reason, counted_from, quarantines, \
         next_check_at, failed_checks, probation_until, drain_reason, updated_at";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        Ok(Self {
            node: row.get(0)?,
            state: named(row, 1, "node state", NodeState::parse)?,
            since: time(row, 2)?,
            reason: row.get(3)?,
            counted_from: opt_time(row, 4)?,
            quarantines: row.get(5)?,
            next_check_at: opt_time(row, 6)?,
            failed_checks: row.get(7)?,
            probation_until: opt_time(row, 8)?,
            drain_reason: row.get(9)?,
            updated_at: time(row, 10)?,
        })
    }
}

impl FromRow for AddedExclusion {
    const COLUMNS: &'static str = "node, workflow_id, job_id, added_at";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        Ok(Self {
            node: row.get(0)?,
            workflow_id: row.get(1)?,
            job_id: row.get(2)?,
            added_at: time(row, 3)?,
        })
    }
}

impl Db<'_> {
    /// Records an incident; false when the same incident (node, kind, job, attempt, time) is there.
    pub fn insert_node_incident(&self, incident: &NodeIncident) -> Result<bool, StoreError> {
        let exists: bool = self.query_row(
            "SELECT EXISTS(SELECT 1 FROM node_incidents WHERE node = ?1 AND kind = ?2 AND time = ?3 \
             AND job_id IS ?4 AND attempt_index IS ?5 AND workflow_id IS ?6)",
            params![
                incident.node,
                incident.kind,
                time_to_text(incident.time),
                incident.job_id,
                incident.attempt_index,
                incident.workflow_id,
            ],
            |row| row.get(0),
        )?;
        if exists {
            return Ok(false);
        }
        self.execute(
            "INSERT INTO node_incidents (node, time, source, kind, weight, fatal, workflow_id, \
             attempt_index, job_id, evidence) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                incident.node,
                time_to_text(incident.time),
                incident.source.as_str(),
                incident.kind,
                incident.weight,
                incident.fatal,
                incident.workflow_id,
                incident.attempt_index,
                incident.job_id,
                to_json(&incident.evidence)?,
            ],
        )?;
        Ok(true)
    }

    /// A node's incidents, oldest first.
    pub fn node_incidents(&self, node: &str) -> Result<Vec<NodeIncident>, StoreError> {
        self.select(
            "FROM node_incidents WHERE node = ?1 ORDER BY time, id",
            [node],
        )
    }

    /// The latest incident of `kind` on `node`.
    pub fn last_node_incident(
        &self,
        node: &str,
        kind: &str,
    ) -> Result<Option<NodeIncident>, StoreError> {
        self.select_one(
            "FROM node_incidents WHERE node = ?1 AND kind = ?2 ORDER BY time DESC, id DESC LIMIT 1",
            [node, kind],
        )
    }

    /// Every incident since `time`, oldest first.
    pub fn node_incidents_since(
        &self,
        time: DateTime<Utc>,
    ) -> Result<Vec<NodeIncident>, StoreError> {
        self.select(
            "FROM node_incidents WHERE time >= ?1 ORDER BY time, id",
            [time_to_text(time)],
        )
    }

    /// Every node the ledger knows, by name.
    pub fn node_records(&self) -> Result<Vec<NodeRecord>, StoreError> {
        self.select("FROM nodes ORDER BY node", [])
    }

    pub fn node_record(&self, node: &str) -> Result<Option<NodeRecord>, StoreError> {
        self.select_one("FROM nodes WHERE node = ?1", [node])
    }

    /// The nodes kept out of every restart now.
    pub fn quarantined_nodes(&self) -> Result<Vec<String>, StoreError> {
        self.select_rows(
            "SELECT node FROM nodes WHERE state = 'quarantined' ORDER BY node",
            [],
            |row| Ok(row.get(0)?),
        )
    }

    pub fn upsert_node_record(&self, record: &NodeRecord) -> Result<(), StoreError> {
        self.execute(
            "INSERT INTO nodes (node, state, since, reason, counted_from, quarantines, next_check_at, \
             failed_checks, probation_until, drain_reason, updated_at) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) \
             ON CONFLICT(node) DO UPDATE SET state = ?2, since = ?3, reason = ?4, counted_from = ?5, \
             quarantines = ?6, next_check_at = ?7, failed_checks = ?8, probation_until = ?9, \
             drain_reason = ?10, updated_at = ?11",
            params![
                record.node,
                record.state.as_str(),
                time_to_text(record.since),
                record.reason,
                record.counted_from.map(time_to_text),
                record.quarantines,
                record.next_check_at.map(time_to_text),
                record.failed_checks,
                record.probation_until.map(time_to_text),
                record.drain_reason,
                time_to_text(record.updated_at),
            ],
        )?;
        Ok(())
    }

    /// Remembers that runguard added `node` to a pending job's exclusions.
    pub fn add_exclusion(&self, exclusion: &AddedExclusion) -> Result<(), StoreError> {
        self.execute(
            "INSERT OR IGNORE INTO node_exclusions (node, workflow_id, job_id, added_at) \
             VALUES (?1, ?2, ?3, ?4)",
            params![
                exclusion.node,
                exclusion.workflow_id,
                exclusion.job_id,
                time_to_text(exclusion.added_at),
            ],
        )?;
        Ok(())
    }

    /// The nodes runguard added to some job's exclusions.
    pub fn nodes_with_exclusions(&self) -> Result<Vec<String>, StoreError> {
        self.select_rows(
            "SELECT DISTINCT node FROM node_exclusions ORDER BY node",
            [],
            |row| Ok(row.get(0)?),
        )
    }

    /// The exclusions runguard added for `node`.
    pub fn exclusions_of_node(&self, node: &str) -> Result<Vec<AddedExclusion>, StoreError> {
        self.select(
            "FROM node_exclusions WHERE node = ?1 ORDER BY added_at, job_id",
            [node],
        )
    }

    /// The exclusions runguard added to the jobs of a workflow.
    pub fn exclusions_of_workflow(
        &self,
        workflow_id: WorkflowId,
    ) -> Result<Vec<AddedExclusion>, StoreError> {
        self.select(
            "FROM node_exclusions WHERE workflow_id = ?1 ORDER BY added_at, node",
            [workflow_id],
        )
    }

    pub fn remove_exclusion(&self, node: &str, job_id: &str) -> Result<(), StoreError> {
        self.execute(
            "DELETE FROM node_exclusions WHERE node = ?1 AND job_id = ?2",
            params![node, job_id],
        )?;
        Ok(())
    }
}
