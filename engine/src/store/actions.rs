//! Recovery actions, proposed or executed.

use rusqlite::{Row, params};

use super::columns::{json, named, time, to_json};
use super::db::{Db, FromRow};
use super::{StoreError, time_to_text};
use crate::model::{Action, ActionId, ActionKind, ActionState, WorkflowId};

impl FromRow for Action {
    const COLUMNS: &'static str = "id, workflow_id, attempt_index, kind, params, state, permitted, \
         why, command, result, created_at, updated_at";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        Ok(Self {
            id: row.get(0)?,
            workflow_id: row.get(1)?,
            attempt_index: row.get(2)?,
            kind: named(row, 3, "action kind", ActionKind::parse)?,
            params: json(row, 4)?,
            state: named(row, 5, "action state", ActionState::parse)?,
            permitted: row.get(6)?,
            why: row.get(7)?,
            command: row.get(8)?,
            result: row.get(9)?,
            created_at: time(row, 10)?,
            updated_at: time(row, 11)?,
        })
    }
}

impl Db<'_> {
    pub fn insert_action(&self, action: &Action) -> Result<ActionId, StoreError> {
        self.execute(
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
        let changed = self.execute(
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
        self.select_one("FROM actions WHERE id = ?1", [id])
    }

    pub fn actions(&self, workflow_id: WorkflowId) -> Result<Vec<Action>, StoreError> {
        self.select(
            "FROM actions WHERE workflow_id = ?1 ORDER BY id",
            [workflow_id],
        )
    }

    pub fn actions_in_state(&self, state: ActionState) -> Result<Vec<Action>, StoreError> {
        self.select(
            "FROM actions WHERE state = ?1 ORDER BY id",
            [state.as_str()],
        )
    }

    /// Every action of `kind`, oldest first.
    pub fn actions_of_kind(&self, kind: ActionKind) -> Result<Vec<Action>, StoreError> {
        self.select("FROM actions WHERE kind = ?1 ORDER BY id", [kind.as_str()])
    }

    /// Every action, oldest first.
    pub fn all_actions(&self) -> Result<Vec<Action>, StoreError> {
        self.select("FROM actions ORDER BY id", [])
    }

    /// The latest `limit` actions that ended (done, failed, rejected), newest first.
    pub fn recent_finished_actions(&self, limit: u32) -> Result<Vec<Action>, StoreError> {
        self.select(
            "FROM actions WHERE state IN ('done', 'failed', 'rejected') \
             ORDER BY updated_at DESC, id DESC LIMIT ?1",
            [limit],
        )
    }
}
