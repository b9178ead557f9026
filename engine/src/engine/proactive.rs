//! Proactive checkpoints: a node of a running job shows a precursor of failure (correctable ECC errors,
//! a GPU at its thermal limit, NVLink or PCIe errors), so the job is asked to save now — a signal its
//! framework handles — and, once it has saved (or requeued itself, as Lightning does), or after a
//! bounded wait, it is requeued off that node. The work since the last scheduled save is kept.

use chrono::{DateTime, TimeDelta, Utc};

use super::journal::Planning;
use super::{Engine, EngineError};
use crate::model::{
    Action, ActionKind, ActionParams, ActionState, Attempt, JobState, Workflow, WorkflowStatus,
};
use crate::telemetry::node_signals::{NodeSignal, SignalKind};

/// Whether a signal announces a failure rather than being one: worth a save, not yet a crash.
pub(super) fn is_precursor(signal: &NodeSignal) -> bool {
    if signal.fatal {
        return false;
    }
    match &signal.kind {
        SignalKind::EccCorrectable
        | SignalKind::Thermal { .. }
        | SignalKind::NvlinkError
        | SignalKind::PcieAer { .. } => true,
        SignalKind::Health { system, status } => {
            system != "kernel" && status.eq_ignore_ascii_case("warning")
        }
        _ => false,
    }
}

impl Engine {
    /// Plans a checkpoint request for each running attempt on `node`, once per attempt.
    pub(super) fn request_checkpoints(
        &mut self,
        node: &str,
        attempts: &[(Workflow, Attempt)],
        precursor: &NodeSignal,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let signal = self.config.ledger.checkpoint_signal.trim().to_string();
        if signal.is_empty() || !self.backend.capabilities().signal {
            return Ok(());
        }
        let backend = std::sync::Arc::clone(&self.backend);
        let policy = self.policy.clone();
        let mut events = Vec::new();
        self.store.write(|db| {
            for (workflow, attempt) in attempts {
                if attempt.state != JobState::Running {
                    continue;
                }
                if !backend.can_signal(&attempt.job_id) {
                    // The node's other consequences (the ledger, a requeue off it) still follow.
                    tracing::info!(job = %attempt.job_id, node, "no checkpoint request: this job takes no signal");
                    continue;
                }
                let asked = db.actions(workflow.id)?.iter().any(|action| {
                    action.kind == ActionKind::CheckpointNow
                        && action.attempt_index == attempt.index
                });
                if asked {
                    continue;
                }
                let newest = db
                    .checkpoints(workflow.id)?
                    .iter()
                    .map(|checkpoint| checkpoint.iteration)
                    .max();
                Planning::new(db, backend.as_ref(), &policy, now, &mut events).plan(
                    workflow,
                    attempt.index,
                    ActionKind::CheckpointNow,
                    ActionParams {
                        job_id: Some(attempt.job_id.clone()),
                        node: Some(node.to_string()),
                        signal: Some(signal.clone()),
                        after_checkpoint: newest,
                        restart_count: Some(attempt.restart_count),
                        reason: Some(precursor.text.chars().take(300).collect()),
                        ..ActionParams::default()
                    },
                    format!(
                        "{node} shows a precursor of failure ({}): ask job {} to save a checkpoint now \
                         (SIG{signal}), then requeue it off {node}",
                        precursor.text.chars().take(160).collect::<String>(),
                        attempt.job_id
                    ),
                    std::slice::from_ref(&precursor.text),
                )?;
            }
            Ok(())
        })?;
        self.pending_events.extend(events);
        self.flush_events();
        Ok(())
    }

    /// The workflows with a checkpoint request that ran: the only ones
    /// [`Engine::follow_checkpoint_request`] can have anything to do for.
    pub(super) fn asked_to_save(
        &self,
    ) -> Result<std::collections::HashSet<crate::model::WorkflowId>, EngineError> {
        Ok(self
            .store
            .db()
            .actions_of_kind(ActionKind::CheckpointNow)?
            .into_iter()
            .filter(|action| action.state == ActionState::Done)
            .map(|action| action.workflow_id)
            .collect())
    }

    /// After a checkpoint request ran: once the job has saved, requeued itself, or the wait is over,
    /// plan its requeue off the node. True when a requeue was planned (the workflow is decided).
    pub(super) fn follow_checkpoint_request(
        &mut self,
        workflow: &Workflow,
        attempt: &Attempt,
        now: DateTime<Utc>,
    ) -> Result<bool, EngineError> {
        let actions = self.store.db().actions(workflow.id)?;
        let Some(request) = pending_request(&actions) else {
            return Ok(false);
        };
        let Some(node) = request.params.node.clone() else {
            return Ok(false);
        };
        let asked_at = request.updated_at;
        let saved = self
            .store
            .db()
            .checkpoints(workflow.id)?
            .iter()
            .any(|checkpoint| {
                checkpoint.attempt_index >= request.attempt_index
                    && request
                        .params
                        .after_checkpoint
                        .is_none_or(|newest| checkpoint.iteration > newest)
            });
        let requeued_itself = attempt.index > request.attempt_index
            || (attempt.state == JobState::Pending && attempt.restart_count > 0);
        let waited = now - asked_at
            >= TimeDelta::seconds(self.config.ledger.checkpoint_wait_secs.min(86_400) as i64);
        if !(saved || requeued_itself || waited) {
            return Ok(false);
        }
        if attempt.state.is_terminal() && !requeued_itself {
            // It ended by itself meanwhile: the usual decision takes it from here.
            return Ok(false);
        }
        let mut exclude = attempt.excluded_nodes.clone();
        for excluded in std::iter::once(&node).chain(self.policy.quarantined.iter()) {
            if !exclude.contains(excluded) {
                exclude.push(excluded.clone());
            }
        }
        let how = if saved {
            "it saved a checkpoint"
        } else if requeued_itself {
            "it requeued itself"
        } else {
            "no checkpoint came within the wait; from the last one"
        };
        let policy = self.policy.clone();
        let backend = std::sync::Arc::clone(&self.backend);
        let mut events = Vec::new();
        let mut workflow = workflow.clone();
        self.store.write(|db| {
            Planning::new(db, backend.as_ref(), &policy, now, &mut events).plan(
                &workflow,
                attempt.index,
                ActionKind::Requeue,
                ActionParams {
                    job_id: Some(attempt.job_id.clone()),
                    exclude_nodes: exclude.clone(),
                    restart_count: Some(attempt.restart_count),
                    reason: Some(format!("precursor of failure on {node}")),
                    ..ActionParams::default()
                },
                format!(
                    "precursor of failure on {node}: {how}; requeue job {} excluding {}",
                    attempt.job_id,
                    exclude.join(",")
                ),
                &[],
            )?;
            // The runs ended on purpose need no decision: those the job ended itself on its signal,
            // and the one still running, which the requeue ends. A run already queued again is the
            // one that goes on, decided when it ends.
            for index in request.attempt_index..attempt.index {
                db.mark_attempt_handled(workflow.id, index)?;
            }
            if attempt.state == JobState::Running {
                db.mark_attempt_handled(workflow.id, attempt.index)?;
            }
            super::set_status(
                db,
                &mut workflow,
                WorkflowStatus::Recovering,
                Some(format!("moving off {node} after a precursor of failure")),
                now,
            )
        })?;
        self.pending_events.extend(events);
        self.flush_events();
        Ok(true)
    }
}

/// The latest checkpoint request that ran and has no requeue planned after it.
fn pending_request(actions: &[Action]) -> Option<&Action> {
    let request = actions
        .iter()
        .rev()
        .find(|action| action.kind == ActionKind::CheckpointNow)?;
    if request.state != ActionState::Done {
        return None;
    }
    let followed = actions.iter().any(|action| {
        action.id > request.id && matches!(action.kind, ActionKind::Requeue | ActionKind::Resubmit)
    });
    (!followed).then_some(request)
}
