//! Journaling: the store writes that record what the engine found and decided, each in one transaction,
//! and the events that follow them. Nothing here decides.

use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::{Engine, EngineError, EngineEvent};
use crate::detect;
use crate::model::{
    Action, ActionState, AlertEvent, Anomaly, AnomalyKind, Attempt, Attribution, Notification,
    Severity, Workflow, WorkflowStatus,
};
use crate::recover::Decision;
use crate::store::{CommandKind, StoreError};

/// A failure as detection found it: what happened and the lines that show it.
pub(super) struct Failure {
    pub kind: AnomalyKind,
    pub summary: String,
    pub evidence: Vec<String>,
}

impl Engine {
    /// Stores the anomaly, the attribution, the intents and the workflow's new status of one decided
    /// failure in one transaction (the intent exists before anything runs), then tells the frontends.
    pub(super) fn journal_failure(
        &mut self,
        mut workflow: Workflow,
        attempt: &Attempt,
        failure: Failure,
        mut attribution: Attribution,
        decision: Decision,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let backend = Arc::clone(&self.backend);
        let mut events = Vec::new();
        let evidence_quote = attribution.evidence.clone();
        self.store.write(|db| {
            let anomaly = Anomaly {
                id: 0,
                workflow_id: workflow.id,
                attempt_index: attempt.index,
                kind: failure.kind,
                time: now,
                summary: failure.summary.clone(),
                evidence: failure.evidence.clone(),
            };
            db.insert_anomaly(&anomaly)?;
            events.push(EngineEvent::AnomalyRaised {
                workflow_id: workflow.id,
                attempt_index: attempt.index,
                kind: failure.kind,
                summary: failure.summary.clone(),
            });
            attribution.id = db.insert_attribution(&attribution)?;
            events.push(EngineEvent::Attributed {
                workflow_id: workflow.id,
                attempt_index: attempt.index,
                category: attribution.category.clone(),
                component: attribution.component,
                culprit: attribution.culprit.clone(),
                confidence: attribution.confidence,
                recoverable: attribution.recoverable,
            });
            if decision.crash_loop {
                db.insert_anomaly(&Anomaly {
                    id: 0,
                    workflow_id: workflow.id,
                    attempt_index: attempt.index,
                    kind: AnomalyKind::CrashLoop,
                    time: now,
                    summary: decision.stop_reason.clone().unwrap_or_default(),
                    evidence: Vec::new(),
                })?;
            }
            for intent in &decision.intents {
                store_intent(
                    db,
                    backend.as_ref(),
                    &workflow,
                    attempt.index,
                    intent,
                    &evidence_quote,
                    now,
                    &mut events,
                )?;
            }
            workflow.failures_since_checkpoint = decision.failures_since_checkpoint;
            set_status(
                db,
                &mut workflow,
                decision.status,
                decision
                    .stop_reason
                    .clone()
                    .or_else(|| decision.waiting_for_capacity.clone()),
                now,
            )?;
            db.mark_attempt_handled(workflow.id, attempt.index)?;
            db.journal(Some(workflow.id), now, &decision.summary, &evidence_quote)?;
            let culprit = attribution
                .culprit
                .node
                .as_deref()
                .map(|node| format!(" on {node}"))
                .unwrap_or_default();
            db.insert_notification(&Notification {
                id: 0,
                workflow_id: Some(workflow.id),
                time: now,
                event: AlertEvent::Failure,
                severity: Severity::Critical,
                title: format!(
                    "{}: {} attributed to {}{culprit}",
                    workflow.name,
                    failure.kind.as_str(),
                    attribution.category
                ),
                body: decision.summary.clone(),
            })?;
            events.push(EngineEvent::WorkflowStatusChanged {
                workflow_id: workflow.id,
                status: decision.status,
                reason: decision.stop_reason.clone(),
            });
            Ok(())
        })?;
        crate::chaos::point("failure_recorded");
        self.pending_events.extend(events);
        self.flush_events();
        Ok(())
    }
}

impl Engine {
    /// Records a finding that needs the user's attention but no recovery; once per attempt and kind.
    pub(super) fn raise_warning(
        &mut self,
        workflow: &Workflow,
        attempt: &Attempt,
        finding: detect::Finding,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let raised = self.store.write(|db| {
            if db.anomaly_raised(workflow.id, attempt.index, finding.kind)? {
                return Ok(false);
            }
            db.insert_anomaly(&Anomaly {
                id: 0,
                workflow_id: workflow.id,
                attempt_index: attempt.index,
                kind: finding.kind,
                time: now,
                summary: finding.summary.clone(),
                evidence: finding.evidence.clone(),
            })?;
            db.journal(
                Some(workflow.id),
                now,
                &format!(
                    "attempt {} {}: {} (no recovery action: the run continues)",
                    attempt.index,
                    finding.kind.as_str(),
                    finding.summary
                ),
                &finding.evidence,
            )?;
            db.insert_notification(&Notification {
                id: 0,
                workflow_id: Some(workflow.id),
                time: now,
                event: AlertEvent::of_warning(finding.kind),
                severity: if finding.kind == AnomalyKind::RecoveryStalled {
                    Severity::Critical
                } else {
                    Severity::Warning
                },
                title: format!(
                    "{}: {}{}",
                    workflow.name,
                    finding.kind.as_str().replace('_', " "),
                    finding
                        .node
                        .as_deref()
                        .map(|node| format!(" on {node}"))
                        .unwrap_or_default()
                ),
                body: finding.summary.clone(),
            })?;
            Ok(true)
        })?;
        if raised {
            self.pending_events.push(EngineEvent::AnomalyRaised {
                workflow_id: workflow.id,
                attempt_index: attempt.index,
                kind: finding.kind,
                summary: finding.summary,
            });
            self.flush_events();
        }
        Ok(())
    }

    /// The run finished its training: the workflow is done.
    pub(super) fn complete(
        &mut self,
        mut workflow: Workflow,
        attempt: &Attempt,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let reason = format!(
            "job {} completed (attempt {})",
            attempt.job_id, attempt.index
        );
        workflow.succeeded = true;
        self.end_workflow(workflow, attempt, reason, now)
    }

    pub(super) fn stop_cancelled(
        &mut self,
        workflow: &Workflow,
        attempt: &Attempt,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let reason = format!(
            "job {} was cancelled outside runguard ({}); not recovering",
            attempt.job_id, attempt.state_raw
        );
        self.end_workflow(workflow.clone(), attempt, reason, now)
    }

    /// Completes a workflow for `reason` (its run finished, or recovery ends), journaled once.
    pub(super) fn end_workflow(
        &mut self,
        mut workflow: Workflow,
        attempt: &Attempt,
        reason: String,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let mut events = Vec::new();
        self.store.write(|db| {
            db.mark_attempt_handled(workflow.id, attempt.index)?;
            db.journal(Some(workflow.id), now, &reason, &[])?;
            complete_workflow(db, &mut workflow, reason, now, &mut events)
        })?;
        self.pending_events.extend(events);
        self.flush_events();
        Ok(())
    }
}

/// Applies one approve/reject to a stored action; returns the outcome text for the command table.
/// The engine runs it for queued commands; the CLI runs it directly when no engine holds the store.
pub fn apply_command(
    db: &crate::store::Db<'_>,
    kind: CommandKind,
    action_id: crate::model::ActionId,
    now: DateTime<Utc>,
    events: &mut Vec<EngineEvent>,
) -> Result<String, StoreError> {
    let Some(mut action) = db.action(action_id)? else {
        return Ok(format!("no action {action_id}"));
    };
    if action.state != ActionState::Proposed {
        return Ok(format!(
            "action {action_id} is {}, not proposed; nothing to do",
            action.state.as_str()
        ));
    }
    action.state = match kind {
        CommandKind::Approve => ActionState::Approved,
        CommandKind::Reject => ActionState::Rejected,
        CommandKind::ReleaseNode => return Ok("not a command about an action".to_string()),
    };
    action.updated_at = now;
    db.update_action(&action)?;
    let outcome = format!("action {action_id} {}", action.state.as_str());
    db.journal(
        Some(action.workflow_id),
        now,
        &format!(
            "{outcome} by the user: {} ({})",
            action.kind.as_str(),
            action.why
        ),
        &[],
    )?;
    events.push(EngineEvent::ActionFinished {
        action_id,
        workflow_id: action.workflow_id,
        kind: action.kind,
        state: action.state,
        result: outcome.clone(),
    });
    // Rejecting the recovery itself ends the workflow's recovery.
    if action.state == ActionState::Rejected
        && action.kind.restarts_the_run()
        && let Some(mut workflow) = db.workflow(action.workflow_id)?
        && workflow.status == WorkflowStatus::Recovering
    {
        let reason = format!("recovery rejected by the user (action {action_id})");
        complete_workflow(db, &mut workflow, reason, now, events)?;
    }
    Ok(outcome)
}

/// Changes a workflow's status and leaves a notification when it really changed.
pub(crate) fn set_status(
    db: &crate::store::Db<'_>,
    workflow: &mut Workflow,
    status: WorkflowStatus,
    reason: Option<String>,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let previous = workflow.status;
    let changed = previous != status;
    workflow.status = status;
    if reason.is_some() || changed {
        workflow.status_reason = reason;
    }
    workflow.updated_at = now;
    db.update_workflow(workflow)?;
    if changed {
        let (event, severity, title) = match status {
            WorkflowStatus::Completed if workflow.succeeded => (
                AlertEvent::Completed,
                Severity::Info,
                format!("{}: completed", workflow.name),
            ),
            WorkflowStatus::Completed => (
                AlertEvent::Stopped,
                Severity::Critical,
                format!("{}: recovery stopped", workflow.name),
            ),
            WorkflowStatus::Recovering => (
                AlertEvent::Recovering,
                Severity::Warning,
                format!("{}: recovering", workflow.name),
            ),
            WorkflowStatus::Enabled if previous == WorkflowStatus::Recovering => (
                AlertEvent::Recovered,
                Severity::Info,
                format!("{}: recovered", workflow.name),
            ),
            WorkflowStatus::Enabled => (
                AlertEvent::Notice,
                Severity::Info,
                format!("{}: watching", workflow.name),
            ),
            WorkflowStatus::Pending => (
                AlertEvent::Notice,
                Severity::Info,
                format!("{}: enrolling", workflow.name),
            ),
            WorkflowStatus::CredentialError => (
                AlertEvent::CredentialError,
                Severity::Critical,
                format!("{}: credential error", workflow.name),
            ),
        };
        db.insert_notification(&Notification {
            id: 0,
            workflow_id: Some(workflow.id),
            time: now,
            event,
            severity,
            title,
            body: workflow.status_reason.clone().unwrap_or_default(),
        })?;
    }
    Ok(())
}

/// Ends a workflow's recovery (or its run) with a reason, and says so on the event channel.
pub(crate) fn complete_workflow(
    db: &crate::store::Db<'_>,
    workflow: &mut Workflow,
    reason: String,
    now: DateTime<Utc>,
    events: &mut Vec<EngineEvent>,
) -> Result<(), StoreError> {
    set_status(
        db,
        workflow,
        WorkflowStatus::Completed,
        Some(reason.clone()),
        now,
    )?;
    events.push(EngineEvent::WorkflowStatusChanged {
        workflow_id: workflow.id,
        status: WorkflowStatus::Completed,
        reason: Some(reason),
    });
    Ok(())
}

/// Stores one intent as an action (approved when the whitelist and `--auto` let it run, else proposed
/// with a notification asking for approval), with its journal line and event.
#[allow(clippy::too_many_arguments)]
pub(super) fn store_intent(
    db: &crate::store::Db<'_>,
    backend: &dyn crate::backend::Backend,
    workflow: &Workflow,
    attempt_index: u32,
    intent: &crate::recover::Intent,
    evidence_quote: &[String],
    now: DateTime<Utc>,
    events: &mut Vec<EngineEvent>,
) -> Result<(), StoreError> {
    let command = backend.command_for(intent.kind, &intent.params);
    let state = if intent.auto_approved {
        ActionState::Approved
    } else {
        ActionState::Proposed
    };
    let mut action = Action {
        id: 0,
        workflow_id: workflow.id,
        attempt_index,
        kind: intent.kind,
        params: intent.params.clone(),
        state,
        permitted: intent.permitted,
        why: intent.why.clone(),
        command: Some(command.clone()),
        result: None,
        created_at: now,
        updated_at: now,
    };
    action.id = db.insert_action(&action)?;
    let verdict = match (intent.permitted, intent.auto_approved) {
        (_, true) => "approved by the whitelist",
        (true, false) => "proposed: the engine runs without --auto",
        (false, _) => "proposed: not in the whitelist; waiting for approval",
    };
    db.journal(
        Some(workflow.id),
        now,
        &format!(
            "action {} {}: {} ({verdict}); command: {command}",
            action.id,
            intent.kind.as_str(),
            intent.why
        ),
        evidence_quote,
    )?;
    if state == ActionState::Proposed {
        db.insert_notification(&Notification {
            id: 0,
            workflow_id: Some(workflow.id),
            time: now,
            event: AlertEvent::ApprovalNeeded,
            severity: Severity::Warning,
            title: format!("{}: action {} waits for approval", workflow.name, action.id),
            body: format!(
                "{}\nwould run: {command}\napprove with `runguard approve {}`",
                intent.why, action.id
            ),
        })?;
    }
    events.push(EngineEvent::ActionPlanned {
        action_id: action.id,
        workflow_id: workflow.id,
        kind: intent.kind,
        state,
        permitted: intent.permitted,
        why: intent.why.clone(),
        command,
    });
    Ok(())
}

/// Plans actions inside one store transaction: the policy says whether each is permitted, the
/// backend what command it runs, and [`store_intent`] records it.
pub(super) struct Planning<'a, 'c> {
    pub db: &'a crate::store::Db<'c>,
    pub backend: &'a dyn crate::backend::Backend,
    pub policy: &'a crate::recover::Policy,
    pub now: DateTime<Utc>,
    pub events: &'a mut Vec<EngineEvent>,
}

impl<'a, 'c> Planning<'a, 'c> {
    pub fn new(
        db: &'a crate::store::Db<'c>,
        backend: &'a dyn crate::backend::Backend,
        policy: &'a crate::recover::Policy,
        now: DateTime<Utc>,
        events: &'a mut Vec<EngineEvent>,
    ) -> Self {
        Self {
            db,
            backend,
            policy,
            now,
            events,
        }
    }

    /// Stores an action of `kind` for `workflow`'s attempt `attempt_index`, with why and its evidence.
    pub fn plan(
        &mut self,
        workflow: &Workflow,
        attempt_index: u32,
        kind: crate::model::ActionKind,
        params: crate::model::ActionParams,
        why: String,
        evidence: &[String],
    ) -> Result<(), StoreError> {
        let intent = self.policy.intent(workflow, kind, params, why);
        store_intent(
            self.db,
            self.backend,
            workflow,
            attempt_index,
            &intent,
            evidence,
            self.now,
            self.events,
        )
    }
}
