//! Recovery actions, proposed or executed.

use rusqlite::{OptionalExtension, Row, params};

use super::columns::{from_json, to_json};
use super::db::{Db, collect};
use super::{StoreError, time_from_text, time_to_text};
use crate::model::{Action, ActionId, ActionKind, ActionState, WorkflowId};

const ACTION_COLUMNS: &str = "id, workflow_id, attempt_index, kind, params, state, permitted, why, \
     command, result, created_at, updated_at";

fn action_from_row(row: &Row<'_>) -> rusqlite::Result<Result<Action, StoreError>> {
    let kind: String = row.get(3)?;
    let params: String = row.get(4)?;
    let state: String = row.get(5)?;
    let created: String = row.get(10)?;
    let updated: String = row.get(11)?;
    let (id, workflow_id, attempt_index, permitted, why, command, result) = (
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(6)?,
        row.get(7)?,
        row.get(8)?,
        row.get(9)?,
    );
    Ok((|| {
        Ok(Action {
            id,
            workflow_id,
            attempt_index,
            kind: ActionKind::parse(&kind)
                .ok_or_else(|| StoreError::Corrupt(format!("action kind {kind:?}")))?,
            params: from_json(&params)?,
            state: ActionState::parse(&state)
                .ok_or_else(|| StoreError::Corrupt(format!("action state {state:?}")))?,
            permitted,
            why,
            command,
            result,
            created_at: time_from_text(&created)?,
            updated_at: time_from_text(&updated)?,
        })
    })())
}

impl Db<'_> {
    pub fn insert_action(&self, action: &Action) -> Result<ActionId, StoreError> {
        self.conn.execute(
            "INSERT INTO actions (workflow_id, attempt_index, kind, params, state, permitted, why, command, \
             result, created_at, updated_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                action.workflow_id,
                action.attempt_index,
                action.kind.as_str(),
                to_json(&action.params)?,
                action.state.as_str(),
                action.permitted,
                action.why,
                action.command,
                action.result,
                time_to_text(action.created_at),
                time_to_text(action.updated_at),
            ],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn update_action(&self, action: &Action) -> Result<(), StoreError> {
        let changed = self.conn.execute(
            "UPDATE actions SET state = ?2, command = ?3, result = ?4, updated_at = ?5, params = ?6 WHERE id = ?1",
            params![
                action.id,
                action.state.as_str(),
                action.command,
                action.result,
                time_to_text(action.updated_at),
                to_json(&action.params)?,
            ],
        )?;
        if changed == 0 {
            return Err(StoreError::NotFound {
                what: "action",
                id: action.id.to_string(),
            });
        }
        Ok(())
    }

    pub fn action(&self, id: ActionId) -> Result<Option<Action>, StoreError> {
        self.conn
            .query_row(
                &format!("SELECT {ACTION_COLUMNS} FROM actions WHERE id = ?1"),
                [id],
                action_from_row,
            )
            .optional()?
            .transpose()
    }

    pub fn actions(&self, workflow_id: WorkflowId) -> Result<Vec<Action>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {ACTION_COLUMNS} FROM actions WHERE workflow_id = ?1 ORDER BY id"
        ))?;
        collect(stmt.query_map([workflow_id], action_from_row)?)
    }

    pub fn actions_in_state(&self, state: ActionState) -> Result<Vec<Action>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {ACTION_COLUMNS} FROM actions WHERE state = ?1 ORDER BY id"
        ))?;
        collect(stmt.query_map([state.as_str()], action_from_row)?)
    }

    /// Every action, oldest first.
    pub fn all_actions(&self) -> Result<Vec<Action>, StoreError> {
        let mut stmt = self
            .conn
            .prepare(&format!("SELECT {ACTION_COLUMNS} FROM actions ORDER BY id"))?;
        collect(stmt.query_map([], action_from_row)?)
    }

    /// The latest `limit` actions that ended (done, failed, rejected), newest first.
    pub fn recent_finished_actions(&self, limit: u32) -> Result<Vec<Action>, StoreError> {
        let mut stmt = self.conn.prepare(&format!(
            "SELECT {ACTION_COLUMNS} FROM actions WHERE state IN ('done', 'failed', 'rejected') \
             ORDER BY updated_at DESC, id DESC LIMIT ?1"
        ))?;
        collect(stmt.query_map([limit], action_from_row)?)
    }
}
