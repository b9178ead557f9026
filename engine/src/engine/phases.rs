//! Multiphase workflows in the engine's pass: each phase's run is an enrolled workflow like any other
//! (recovered from its own checkpoints, its failure count reset by each new one); here the next phase
//! is submitted once the one before it succeeded, and a phase that failed for good stops the rest.

use std::borrow::Cow;

use chrono::{DateTime, Utc};

use super::act::{Execution, retry_or_fail};
use super::{Engine, EngineError, with_timeout};
use crate::backend::NodeCapacity;
use crate::model::{
    Action, ActionKind, ActionState, Multiphase, MultiphaseState, Phase, Workflow, WorkflowId,
    WorkflowStatus,
};
use crate::phases::{RunOutcome, Step, advance, record};
use crate::recover::Policy;
use crate::store::{Db, StoreError};

impl Engine {
    /// Brings every running multiphase workflow up to date: phases whose run ended are marked, the
    /// next phase's submission is recorded (approved when the whitelist and `--auto` allow it, else
    /// proposed), and phases after one that failed for good are skipped.
    pub(super) fn advance_phases(&mut self, now: DateTime<Utc>) -> Result<(), EngineError> {
        let running: Vec<Multiphase> = self
            .store
            .db()
            .multiphases()?
            .into_iter()
            .filter(|multiphase| {
                multiphase.state == MultiphaseState::Running
                    && multiphase.backend == self.backend.kind()
            })
            .collect();
        for multiphase in running {
            let backend = std::sync::Arc::clone(&self.backend);
            let policy = &self.policy;
            self.store.write(|db| {
                let phases = db.phases(multiphase.id)?;
                let mut outcomes = Vec::with_capacity(phases.len());
                for phase in &phases {
                    outcomes.push(run_outcome(db, phase)?);
                }
                let steps = advance(&phases, |phase| {
                    outcomes.get(phase.index as usize).cloned().flatten()
                });
                for step in steps {
                    apply(
                        db,
                        backend.as_ref(),
                        policy,
                        &multiphase,
                        &phases,
                        step,
                        now,
                    )?;
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Runs an approved submission of a phase; one the previous engine made without recording it is
    /// found by its tag, not made again.
    pub(super) async fn execute_submit(&mut self, action: &Action) -> Execution {
        let found = {
            let db = self.store.db();
            db.phase_of_workflow(action.workflow_id).and_then(|phase| {
                let Some(phase) = phase else {
                    return Ok(None);
                };
                Ok(db
                    .multiphase(phase.multiphase_id)?
                    .map(|multiphase| (multiphase, phase)))
            })
        };
        let (multiphase, phase) = match found {
            Ok(Some(found)) => found,
            Ok(None) => {
                return Execution::Superseded(
                    "its workflow is no longer a phase of a multiphase workflow".to_string(),
                );
            }
            Err(err) => return Execution::Retry(err.to_string()),
        };
        let job = record::new_job(&multiphase, &phase, action.workflow_id);
        match self.submitted_with(&job.tag).await {
            Ok(Some(id)) => {
                return match self.record_submitted(action.workflow_id, &id) {
                    Ok(()) => Execution::AlreadyDone(format!(
                        "phase {} was already submitted as job {id}",
                        phase.spec.name
                    )),
                    Err(err) => Execution::Retry(err.to_string()),
                };
            }
            Ok(None) => {}
            Err(err) => return retry_or_fail(err),
        }
        if let Err(message) = record::make_checkpoint_dir(&job) {
            return Execution::Failed(message);
        }
        match with_timeout(self.backend.submit(&job)).await {
            Ok(outcome) => {
                if let Some(id) = &outcome.new_job_id
                    && let Err(err) = self.record_submitted(action.workflow_id, id)
                {
                    return Execution::Retry(err.to_string());
                }
                Execution::Ran(outcome.detail)
            }
            Err(err) => retry_or_fail(err),
        }
    }

    fn record_submitted(
        &mut self,
        workflow_id: WorkflowId,
        job_id: &str,
    ) -> Result<(), StoreError> {
        let now = self.clock.now();
        self.store
            .write(|db| record::submitted(db, workflow_id, job_id, now))
    }

    /// The policy for `workflow`'s recovery: a phase's own failure limit replaces the crash-loop
    /// threshold.
    pub(super) fn policy_for(&self, workflow: &Workflow) -> Result<Cow<'_, Policy>, EngineError> {
        let phase = self.store.db().phase_of_workflow(workflow.id)?;
        Ok(match phase.and_then(|phase| phase.spec.max_failures) {
            // `max_failures` restarts without a new checkpoint: the one after them stops the phase.
            Some(restarts) => {
                let mut policy = self.policy.clone();
                policy.crash_loop_threshold = restarts.saturating_add(1);
                Cow::Owned(policy)
            }
            None => Cow::Borrowed(&self.policy),
        })
    }

    /// `capacity` with a phase's own minimum node count, which its restarts may go down to.
    pub(super) fn with_phase_minimum(
        &self,
        workflow_id: WorkflowId,
        capacity: Option<NodeCapacity>,
    ) -> Result<Option<NodeCapacity>, EngineError> {
        let minimum = self
            .store
            .db()
            .phase_of_workflow(workflow_id)?
            .and_then(|phase| phase.spec.min_nodes);
        Ok(match (capacity, minimum) {
            (Some(mut capacity), Some(minimum)) => {
                capacity.min_nodes = Some(minimum);
                Some(capacity)
            }
            (capacity, _) => capacity,
        })
    }
}

/// What became of a phase's run, read from its workflow and its submit action.
fn run_outcome(db: &Db<'_>, phase: &Phase) -> Result<Option<RunOutcome>, StoreError> {
    let Some(workflow_id) = phase.workflow_id else {
        return Ok(None);
    };
    let Some(workflow) = db.workflow(workflow_id)? else {
        return Ok(Some(RunOutcome::SubmissionFailed(
            "the run of the phase was forgotten by the store".to_string(),
        )));
    };
    let submission = db
        .actions(workflow_id)?
        .into_iter()
        .rev()
        .find(|action| action.kind == ActionKind::Submit);
    let job_id = db
        .attempts(workflow_id)?
        .last()
        .map(|attempt| attempt.job_id.clone())
        .or_else(|| phase.job_id.clone());
    if let Some(action) = &submission {
        match action.state {
            ActionState::Proposed | ActionState::Approved | ActionState::Executing => {
                return Ok(Some(RunOutcome::SubmissionPending));
            }
            ActionState::Rejected => {
                return Ok(Some(RunOutcome::SubmissionFailed(format!(
                    "its submission (action {}) was rejected",
                    action.id
                ))));
            }
            ActionState::Failed | ActionState::Superseded => {
                return Ok(Some(RunOutcome::SubmissionFailed(
                    action
                        .result
                        .clone()
                        .unwrap_or_else(|| action.state.as_str().to_string()),
                )));
            }
            ActionState::Done => {}
        }
    }
    Ok(Some(match workflow.status {
        WorkflowStatus::Completed if workflow.succeeded => RunOutcome::Succeeded { job_id },
        WorkflowStatus::Completed => RunOutcome::Failed {
            job_id,
            reason: workflow
                .status_reason
                .unwrap_or_else(|| "recovery stopped".to_string()),
        },
        _ => RunOutcome::Running { job_id },
    }))
}

/// Applies one step of [`advance`] in the store.
fn apply(
    db: &Db<'_>,
    backend: &dyn crate::backend::Backend,
    policy: &Policy,
    multiphase: &Multiphase,
    phases: &[Phase],
    step: Step,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    match step {
        Step::Submit { index } => {
            let Some(mut phase) = phases.iter().find(|phase| phase.index == index).cloned() else {
                return Ok(());
            };
            let permitted = policy.permits(ActionKind::Submit);
            let state = if permitted && !policy.propose_only {
                ActionState::Approved
            } else {
                ActionState::Proposed
            };
            let previous = index
                .checked_sub(1)
                .and_then(|earlier| phases.get(earlier as usize))
                .map_or_else(String::new, |earlier| {
                    format!(" after phase {} succeeded", earlier.spec.name)
                });
            let why = format!(
                "start phase {} of {}{previous}",
                phase.spec.name, multiphase.name
            );
            let prepared = record::prepare(
                db,
                |job| backend.submit_command(job),
                multiphase,
                &mut phase,
                state,
                permitted,
                why.clone(),
                now,
            )?;
            if state == ActionState::Proposed {
                db.insert_notification(&crate::model::Notification {
                    id: 0,
                    workflow_id: Some(prepared.action.workflow_id),
                    time: now,
                    event: crate::model::AlertEvent::ApprovalNeeded,
                    severity: crate::model::Severity::Warning,
                    title: format!(
                        "{}: action {} waits for approval",
                        multiphase.name, prepared.action.id
                    ),
                    body: format!(
                        "{why}\nwould run: {}\napprove with `runguard approve {}`",
                        prepared.action.command.clone().unwrap_or_default(),
                        prepared.action.id
                    ),
                })?;
            }
        }
        Step::Set {
            index,
            state,
            job_id,
            reason,
        } => {
            let Some(mut phase) = phases.iter().find(|phase| phase.index == index).cloned() else {
                return Ok(());
            };
            phase.state = state;
            if job_id.is_some() {
                phase.job_id = job_id;
            }
            phase.reason = reason;
            phase.updated_at = now;
            db.update_phase(&phase)?;
            db.journal(
                phase.workflow_id,
                now,
                &format!(
                    "phase {} of {}: {}{}",
                    phase.spec.name,
                    multiphase.name,
                    state.as_str(),
                    phase
                        .reason
                        .as_deref()
                        .map(|reason| format!(" ({reason})"))
                        .unwrap_or_default()
                ),
                &[],
            )?;
        }
        Step::Finish { state, reason } => {
            let mut finished = multiphase.clone();
            finished.state = state;
            finished.reason = reason;
            finished.updated_at = now;
            db.update_multiphase(&finished)?;
            db.journal(
                None,
                now,
                &format!(
                    "multiphase workflow {} ({}): {}{}",
                    finished.id,
                    finished.name,
                    state.as_str(),
                    finished
                        .reason
                        .as_deref()
                        .map(|reason| format!(": {reason}"))
                        .unwrap_or_default()
                ),
                &[],
            )?;
        }
    }
    Ok(())
}
