//! Approving and rejecting a proposed action: by key, the focused one; by `:approve ID` or
//! `:reject ID`, any that waits. The engine applies the decision; the cockpit only sends it.

use chrono::{DateTime, Utc};

use super::{App, Effect};
use crate::tui::snapshot::Snapshot;
use runguard_engine::model::ActionId;

impl App {
    /// `a` or `x`: the focused approval ([`App::focused_approval`]).
    pub(super) fn decide_focused(
        &mut self,
        approve: bool,
        snapshot: &Snapshot,
        now: DateTime<Utc>,
    ) -> Effect {
        let Some(approval) = self.focused_approval(snapshot, now) else {
            self.message = Some("no proposed action here".to_string());
            return Effect::None;
        };
        let id = approval.action.id;
        self.message = Some(if approve {
            format!("approving action {id}…")
        } else {
            format!("rejecting action {id}…")
        });
        decision(approve, id)
    }

    /// `:approve ID` or `:reject ID`, the action named if it waits for approval.
    pub(super) fn decide_by_id(
        &mut self,
        approve: bool,
        id: Option<&str>,
        snapshot: &Snapshot,
    ) -> Effect {
        let Some(id) = id.and_then(|id| id.parse::<ActionId>().ok()) else {
            let name = if approve { "approve" } else { "reject" };
            self.message = Some(format!("usage: :{name} ACTION_ID"));
            return Effect::None;
        };
        if !snapshot.approvals.iter().any(|a| a.action.id == id) {
            self.message = Some(format!("action {id} is not waiting for approval"));
            return Effect::None;
        }
        decision(approve, id)
    }
}

fn decision(approve: bool, id: ActionId) -> Effect {
    if approve {
        Effect::Approve(id)
    } else {
        Effect::Reject(id)
    }
}
