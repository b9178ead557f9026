//! Commands other processes leave for the engine (approve, reject), which it polls.

use chrono::{DateTime, Utc};
use rusqlite::{OptionalExtension, Row, params};

use super::columns::named;
use super::db::{Db, FromRow};
use super::{StoreError, time_to_text};
use crate::model::ActionId;

/// What another process asks the engine to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommandKind {
    Approve,
    Reject,
    /// Let a quarantined node back (the command's `node`).
    ReleaseNode,
}

impl CommandKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Approve => "approve",
            Self::Reject => "reject",
            Self::ReleaseNode => "release_node",
        }
    }

    fn parse(name: &str) -> Option<Self> {
        match name {
            "approve" => Some(Self::Approve),
            "reject" => Some(Self::Reject),
            "release_node" => Some(Self::ReleaseNode),
            _ => None,
        }
    }
}

/// A queued command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Command {
    pub id: i64,
    pub kind: CommandKind,
    pub action_id: ActionId,
    /// The node a node command is about.
    pub node: Option<String>,
}

impl FromRow for Command {
    const COLUMNS: &'static str = "id, kind, action_id, node";

    fn from_row(row: &Row<'_>) -> Result<Self, StoreError> {
        Ok(Self {
            id: row.get(0)?,
            kind: named(row, 1, "command kind", CommandKind::parse)?,
            action_id: row.get(2)?,
            node: row.get(3)?,
        })
    }
}

impl Db<'_> {
    pub fn push_command(
        &self,
        kind: CommandKind,
        action_id: ActionId,
        time: DateTime<Utc>,
    ) -> Result<i64, StoreError> {
        self.execute(
            "INSERT INTO commands (time, kind, action_id) VALUES (?1, ?2, ?3)",
            params![time_to_text(time), kind.as_str(), action_id],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    /// Queues a command about a node for the running engine.
    pub fn push_node_command(
        &self,
        kind: CommandKind,
        node: &str,
        time: DateTime<Utc>,
    ) -> Result<i64, StoreError> {
        self.execute(
            "INSERT INTO commands (time, kind, action_id, node) VALUES (?1, ?2, 0, ?3)",
            params![time_to_text(time), kind.as_str(), node],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn pending_commands(&self) -> Result<Vec<Command>, StoreError> {
        self.select("FROM commands WHERE done = 0 ORDER BY id", [])
    }

    /// The outcome of a command once the engine applied it.
    pub fn command_outcome(&self, id: i64) -> Result<Option<String>, StoreError> {
        let outcome: Option<Option<String>> = self
            .query_row(
                "SELECT outcome FROM commands WHERE id = ?1 AND done = 1",
                [id],
                |row| row.get(0),
            )
            .optional()?;
        Ok(outcome.flatten())
    }

    pub fn finish_command(&self, id: i64, outcome: &str) -> Result<(), StoreError> {
        self.execute(
            "UPDATE commands SET done = 1, outcome = ?2 WHERE id = ?1",
            params![id, outcome],
        )?;
        Ok(())
    }
}
