//! Acting: running approved actions against the backend, each checked against the job's current state
//! first so that an action the previous engine ran but did not record is never run twice.

use chrono::{DateTime, Utc};

use super::observe::attempt_tag;
use super::{Engine, EngineError, EngineEvent, complete_workflow, with_timeout};
use crate::backend::{BackendError, Hold, JobSnapshot};
use crate::model::{
    Action, ActionKind, ActionState, AlertEvent, JobState, Notification, Severity, WorkflowStatus,
};

/// How the execution of one action ended.
pub(super) enum Execution {
    /// It ran now.
    Ran(String),
    /// The job shows it already happened (the previous engine ran it, or the scheduler did).
    AlreadyDone(String),
    /// It no longer applies.
    Superseded(String),
    /// The scheduler could not be reached: try again next tick.
    Retry(String),
    /// The job is between two states and cannot take the action yet (the scheduler answered): try
    /// again next tick, without taking it for an outage.
    NotYet(String),
    /// It cannot be done.
    Failed(String),
}

impl Engine {
    pub(super) async fn execute_approved(&mut self) -> Result<(), EngineError> {
        let mut approved = self.store.db().actions_in_state(ActionState::Approved)?;
        // Pending jobs are kept off quarantined nodes before anything restarts: a requeue frees nodes
        // the scheduler may hand them at once.
        approved.sort_by_key(|action| action.kind != ActionKind::UpdateExclusions);
        for mut action in approved {
            // The scheduler stopped answering during this pass: the rest waits for it.
            if self.outage.is_some() {
                break;
            }
            let now = self.clock.now();
            action.state = ActionState::Executing;
            action.updated_at = now;
            self.store.write(|db| db.update_action(&action))?;
            crate::chaos::point("action_executing");

            let execution = self.execute(&action).await;
            if matches!(execution, Execution::Ran(_)) {
                crate::chaos::point("action_ran");
            }
            let now = self.clock.now();
            self.record_execution(action, execution, now)?;
        }
        Ok(())
    }

    /// The job runguard submitted with `tag`, if the scheduler lists one. (`&mut`: the engine is not
    /// `Sync`, and a shared borrow held across the call would keep its future from being `Send`.)
    pub(super) async fn submitted_with(
        &mut self,
        tag: &str,
    ) -> Result<Option<String>, BackendError> {
        let jobs = with_timeout(self.backend.list_jobs()).await?;
        Ok(jobs
            .into_iter()
            .find(|job| job.tag.as_deref() == Some(tag))
            .map(|job| job.job_id))
    }

    /// A requeue whose job was ended but is kept on dead nodes until the scheduler declares them down
    /// (minutes on a default Slurm): the run goes on as a new job from the same batch script, off those
    /// nodes, rather than waiting — when the backend can submit and the job has a script.
    async fn resubmit_off_dead_nodes(&mut self, action: &Action, stuck: &[String]) -> Execution {
        let params = &action.params;
        let job_id = params.job_id.clone().unwrap_or_default();
        let waiting = format!(
            "job {job_id} was ended but the scheduler keeps it on {} until it declares {} down",
            stuck.join(","),
            if stuck.len() == 1 {
                "that node"
            } else {
                "those nodes"
            }
        );
        let spec = match self.store.db().workflow(action.workflow_id) {
            Ok(Some(workflow)) => workflow.spec,
            Ok(None) => return Execution::Superseded("the workflow is gone".to_string()),
            Err(err) => return Execution::Retry(err.to_string()),
        };
        if !self.backend.capabilities().resubmit || spec.command.is_none() {
            return Execution::Retry(format!("{waiting}; it is requeued once it has left them"));
        }
        let tag = attempt_tag(action.workflow_id, action.attempt_index + 1);
        match with_timeout(self.backend.resubmit(&spec, &params.exclude_nodes, &tag)).await {
            Ok(outcome) => Execution::Ran(format!(
                "{waiting}: {}{}",
                outcome.detail,
                outcome
                    .new_job_id
                    .map(|id| format!(" (the run goes on as job {id})"))
                    .unwrap_or_default()
            )),
            Err(err) => retry_or_fail(err),
        }
    }

    /// Submits the workflow's job again as the next attempt, with the action's changes (none for a
    /// plain resubmission); once only, found by the attempt's tag after a crash.
    async fn resubmit_changed(&mut self, action: &Action) -> Execution {
        let params = &action.params;
        let tag = attempt_tag(action.workflow_id, action.attempt_index + 1);
        match self.submitted_with(&tag).await {
            Ok(Some(id)) => {
                return Execution::AlreadyDone(format!("already resubmitted as job {id}"));
            }
            Ok(None) => {}
            Err(err) => return retry_or_fail(err),
        }
        let spec = match self.store.db().workflow(action.workflow_id) {
            Ok(Some(workflow)) => workflow.spec,
            Ok(None) => return Execution::Superseded("the workflow is gone".to_string()),
            Err(err) => return Execution::Retry(err.to_string()),
        };
        match with_timeout(self.backend.resubmit_changed(
            &spec,
            &params.exclude_nodes,
            &tag,
            &params.changes,
        ))
        .await
        {
            Ok(outcome) => Execution::Ran(match outcome.new_job_id {
                Some(id) => format!("{} (new job {id})", outcome.detail),
                None => outcome.detail,
            }),
            Err(err) => retry_or_fail(err),
        }
    }

    async fn execute(&mut self, action: &Action) -> Execution {
        let params = &action.params;
        let job_id = params.job_id.clone().unwrap_or_default();
        match action.kind {
            ActionKind::Submit => self.execute_submit(action).await,
            ActionKind::Requeue => {
                let job = match with_timeout(self.backend.job(&job_id)).await {
                    Ok(Some(job)) => job,
                    // A re-creation cut short between the delete and the create (the API server or
                    // the engine went away): the backend finishes it from the spec it saved.
                    Ok(None) if self.backend.capabilities().recreate => {
                        return match with_timeout(
                            self.backend.requeue(&job_id, &params.exclude_nodes),
                        )
                        .await
                        {
                            Ok(outcome) => Execution::Ran(format!(
                                "{} (finishing a re-creation cut short)",
                                outcome.detail
                            )),
                            Err(err) => retry_or_fail(err),
                        };
                    }
                    Ok(None) => {
                        return Execution::Failed(format!(
                            "job {job_id} is no longer known to the scheduler"
                        ));
                    }
                    Err(err) => return retry_or_fail(err),
                };
                if job.state == JobState::Unknown {
                    return not_understood(&job);
                }
                // Ended and left on a dead node by an earlier try, which ran it again as a new job.
                if matches!(job.state, JobState::Cancelled | JobState::Completing) {
                    let tag = attempt_tag(action.workflow_id, action.attempt_index + 1);
                    match self.submitted_with(&tag).await {
                        Ok(Some(id)) => {
                            return Execution::AlreadyDone(format!(
                                "job {job_id} was already run again as job {id}"
                            ));
                        }
                        Ok(None) => {}
                        Err(err) => return retry_or_fail(err),
                    }
                }
                let planned = params.restart_count.unwrap_or(0);
                // Requeued and held by an earlier try that did not get as far as the release (the job
                // was slow to leave its nodes, or the engine stopped), or queued again by someone
                // else (a job that requeues itself on a checkpoint signal, as Lightning does) without
                // the exclusion, or released without being started: finish the requeue — exclusion
                // set, started now, not at BeginTime.
                let unexcluded = params
                    .exclude_nodes
                    .iter()
                    .any(|node| !job.excluded_nodes.contains(node));
                // Released by an earlier try that did not get to start it now: it waits out Slurm's
                // BeginTime delay after a requeue, minutes of lost training for nothing.
                let waits_on_begin_time = job.reason.as_deref() == Some("BeginTime");
                if job.restart_count > planned
                    && job.state == JobState::Pending
                    && (job.hold == Some(Hold::Requeue)
                        || (job.hold.is_none() && (unexcluded || waits_on_begin_time)))
                {
                    // The backend's requeue of a pending job sets the exclusion again and releases it.
                    return match with_timeout(self.backend.requeue(&job_id, &params.exclude_nodes))
                        .await
                    {
                        Ok(outcome) => Execution::Ran(format!(
                            "requeued job {job_id} (held by an earlier try): {}",
                            outcome.detail
                        )),
                        Err(err) => retry_or_fail(err),
                    };
                }
                // The scheduler requeued it by itself and has started it again meanwhile: only a run on
                // a suspected node is worth ending.
                if params.scheduler_requeued
                    && job.restart_count == planned
                    && job.state == JobState::Running
                    && !job
                        .nodes
                        .iter()
                        .any(|node| params.exclude_nodes.contains(node))
                {
                    return Execution::Superseded(format!(
                        "the scheduler restarted job {job_id} by itself on {}, none of them suspected",
                        job.nodes.join(",")
                    ));
                }
                // Queued again by itself a moment ago and still leaving its nodes: it cannot take the
                // exclusion until it is pending, and taking it as done would let it start again on
                // the node it is being moved off, after its BeginTime wait.
                if job.restart_count > planned
                    && matches!(job.state, JobState::Requeued | JobState::Completing)
                    && unexcluded
                {
                    return Execution::NotYet(format!(
                        "job {job_id} was queued again by itself and is still leaving its nodes; \
                         the exclusion of {} is set once it is pending",
                        params.exclude_nodes.join(",")
                    ));
                }
                if job.restart_count > planned {
                    return Execution::AlreadyDone(format!(
                        "job {job_id} was already requeued (restart count {} > {planned})",
                        job.restart_count
                    ));
                }
                if job.state == JobState::Completed {
                    return Execution::Superseded(format!("job {job_id} completed by itself"));
                }
                // A later run of the job than the one decided on (the scheduler started it again)
                // is ended on purpose here: its end needs no decision of its own.
                let ended_on_purpose = if job.state != JobState::Running {
                    None
                } else {
                    self.store
                        .db()
                        .attempt_by_job(self.backend.name(), &job_id)
                        .ok()
                        .flatten()
                        .filter(|run| run.index > action.attempt_index)
                };
                match with_timeout(self.backend.requeue(&job_id, &params.exclude_nodes)).await {
                    Err(BackendError::StuckOnNodes { nodes, .. }) => {
                        self.resubmit_off_dead_nodes(action, &nodes).await
                    }
                    Ok(outcome) => {
                        if let Some(run) = ended_on_purpose
                            && let Err(err) = self
                                .store
                                .write(|db| db.mark_attempt_handled(run.workflow_id, run.index))
                        {
                            return Execution::Ran(format!(
                                "{} (attempt {} could not be marked as ended on purpose: {err})",
                                outcome.detail, run.index
                            ));
                        }
                        Execution::Ran(outcome.detail)
                    }
                    Err(err) => retry_or_fail(err),
                }
            }
            // A resubmission carries changes only when it applies the catalog's fix (below).
            ActionKind::Resubmit => self.resubmit_changed(action).await,
            ActionKind::Cancel => {
                match with_timeout(self.backend.job(&job_id)).await {
                    Ok(Some(job)) if job.state == JobState::Unknown => {
                        return not_understood(&job);
                    }
                    Ok(Some(job)) if job.state.is_terminal() => {
                        return Execution::AlreadyDone(format!(
                            "job {job_id} already ended ({})",
                            job.state_raw
                        ));
                    }
                    Ok(None) => return Execution::AlreadyDone(format!("job {job_id} is gone")),
                    Ok(Some(_)) => {}
                    Err(err) => return retry_or_fail(err),
                }
                match with_timeout(self.backend.cancel(&job_id)).await {
                    Ok(outcome) => Execution::Ran(outcome.detail),
                    Err(err) => retry_or_fail(err),
                }
            }
            ActionKind::Hold | ActionKind::Release => {
                match with_timeout(self.backend.job(&job_id)).await {
                    Ok(Some(job)) if job.state == JobState::Unknown => {
                        return not_understood(&job);
                    }
                    Ok(Some(job)) if job.state != JobState::Pending => {
                        return Execution::Superseded(format!(
                            "job {job_id} is {} now, not pending",
                            job.state_raw
                        ));
                    }
                    Ok(None) => return Execution::Superseded(format!("job {job_id} is gone")),
                    Ok(Some(_)) => {}
                    Err(err) => return retry_or_fail(err),
                }
                let result = if action.kind == ActionKind::Hold {
                    with_timeout(self.backend.hold(&job_id)).await
                } else {
                    with_timeout(self.backend.release(&job_id)).await
                };
                match result {
                    Ok(outcome) => Execution::Ran(outcome.detail),
                    Err(err) => retry_or_fail(err),
                }
            }
            ActionKind::Recreate if !self.backend.capabilities().recreate => {
                // A batch job is changed by submitting it again, the fix in its command line.
                self.resubmit_changed(action).await
            }
            ActionKind::Recreate => {
                let planned = params.restart_count.unwrap_or(0);
                match with_timeout(self.backend.job(&job_id)).await {
                    Ok(Some(job)) if job.restart_count > planned => {
                        return Execution::AlreadyDone(format!(
                            "{job_id} was already re-created (restart {})",
                            job.restart_count
                        ));
                    }
                    Ok(_) => {}
                    Err(err) => return retry_or_fail(err),
                }
                match with_timeout(self.backend.recreate(
                    &job_id,
                    &params.exclude_nodes,
                    &params.changes,
                ))
                .await
                {
                    Ok(outcome) => Execution::Ran(outcome.detail),
                    Err(err) => retry_or_fail(err),
                }
            }
            ActionKind::DrainNode => {
                let node = params.node.clone().unwrap_or_default();
                let reason = params
                    .reason
                    .clone()
                    .unwrap_or_else(|| "runguard".to_string());
                match with_timeout(self.backend.drain_node(&node, &reason)).await {
                    Ok(outcome) => Execution::Ran(outcome.detail),
                    Err(err) => retry_or_fail(err),
                }
            }
            ActionKind::ResumeNode => {
                let node = params.node.clone().unwrap_or_default();
                let reason = params.reason.clone().unwrap_or_default();
                match with_timeout(self.backend.resume_node(&node, &reason)).await {
                    Ok(outcome) => Execution::Ran(outcome.detail),
                    Err(err) => retry_or_fail(err),
                }
            }
            ActionKind::UpdateExclusions => self.update_exclusions(action).await,
            ActionKind::CheckpointNow => {
                let planned = params.restart_count.unwrap_or(0);
                match with_timeout(self.backend.job(&job_id)).await {
                    Ok(Some(job)) if job.state == JobState::Unknown => return not_understood(&job),
                    Ok(Some(job))
                        if job.state != JobState::Running || job.restart_count != planned =>
                    {
                        return Execution::Superseded(format!(
                            "job {job_id} is {} now (restart {}), not the run that was to save",
                            job.state_raw, job.restart_count
                        ));
                    }
                    Ok(Some(_)) => {}
                    Ok(None) => return Execution::Superseded(format!("job {job_id} is gone")),
                    Err(err) => return retry_or_fail(err),
                }
                let signal = params.signal.clone().unwrap_or_else(|| "USR1".to_string());
                match with_timeout(self.backend.signal_job(&job_id, &signal)).await {
                    Ok(outcome) => Execution::Ran(outcome.detail),
                    Err(err) => retry_or_fail(err),
                }
            }
        }
    }

    /// Adds `params.node` to a pending job's exclusions (or takes it away, when the planned list
    /// leaves it out), over the job's exclusions as they are now: what the user set meanwhile stays.
    async fn update_exclusions(&mut self, action: &Action) -> Execution {
        let params = &action.params;
        let job_id = params.job_id.clone().unwrap_or_default();
        let Some(node) = params.node.clone() else {
            return Execution::Failed("no node to add or take away".to_string());
        };
        let adding = params.exclude_nodes.contains(&node);
        let job = match with_timeout(self.backend.job(&job_id)).await {
            Ok(Some(job)) if job.state == JobState::Unknown => return not_understood(&job),
            Ok(Some(job)) if job.state != JobState::Pending => {
                return Execution::Superseded(format!(
                    "job {job_id} is {} now, not pending",
                    job.state_raw
                ));
            }
            Ok(Some(job)) => job,
            // A workload re-created to change its exclusions (Kubernetes), cut short between the
            // delete and the create: the backend finishes it from the spec it saved, or says the
            // workload is gone (its owner deleted it).
            Ok(None) if self.backend.capabilities().recreate => {
                return match with_timeout(
                    self.backend.set_exclusions(&job_id, &params.exclude_nodes),
                )
                .await
                {
                    Ok(outcome) => Execution::Ran(format!(
                        "{} (finishing a re-creation cut short)",
                        outcome.detail
                    )),
                    Err(BackendError::NoSuchJob(_)) => {
                        Execution::Superseded(format!("job {job_id} is gone"))
                    }
                    Err(err) => retry_or_fail(err),
                };
            }
            Ok(None) => return Execution::Superseded(format!("job {job_id} is gone")),
            Err(err) => return retry_or_fail(err),
        };
        if job.excluded_nodes.contains(&node) == adding {
            return Execution::AlreadyDone(format!(
                "job {job_id} {} {node}",
                if adding {
                    "already excludes"
                } else {
                    "no longer excludes"
                }
            ));
        }
        let mut exclude: Vec<String> = job
            .excluded_nodes
            .iter()
            .filter(|n| **n != node)
            .cloned()
            .collect();
        if adding {
            exclude.push(node);
        }
        match with_timeout(self.backend.set_exclusions(&job_id, &exclude)).await {
            Ok(outcome) => Execution::Ran(outcome.detail),
            Err(err) => retry_or_fail(err),
        }
    }

    fn record_execution(
        &mut self,
        mut action: Action,
        execution: Execution,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let (state, result) = match execution {
            Execution::Ran(detail) => (ActionState::Done, detail),
            Execution::AlreadyDone(detail) => (
                ActionState::Done,
                format!("found done on re-check: {detail}"),
            ),
            Execution::Superseded(detail) => (ActionState::Superseded, detail),
            Execution::Retry(detail) => (ActionState::Approved, detail),
            Execution::Failed(detail) => (ActionState::Failed, detail),
            Execution::NotYet(detail) => {
                action.state = ActionState::Approved;
                action.result = Some(detail);
                action.updated_at = now;
                self.store.write(|db| db.update_action(&action))?;
                return Ok(());
            }
        };
        if state == ActionState::Approved {
            action.state = state;
            action.updated_at = now;
            self.store.write(|db| db.update_action(&action))?;
            self.scheduler_failed(
                format!("action {} ({}): {result}", action.id, action.kind.as_str()),
                now,
            )?;
            return self.warn(
                "action_retry",
                format!(
                    "action {} ({}) will be retried: {result}",
                    action.id,
                    action.kind.as_str()
                ),
                now,
            );
        }
        action.state = state;
        action.result = Some(result.clone());
        action.updated_at = now;
        let mut events = vec![EngineEvent::ActionFinished {
            action_id: action.id,
            workflow_id: action.workflow_id,
            kind: action.kind,
            state,
            result: result.clone(),
        }];
        self.store.write(|db| {
            db.update_action(&action)?;
            if state == ActionState::Done {
                Engine::ledger_after_action(db, &action, now)?;
            }
            db.journal(
                Some(action.workflow_id),
                now,
                &format!(
                    "action {} {} {}: {result}",
                    action.id,
                    action.kind.as_str(),
                    state.as_str()
                ),
                &[],
            )?;
            let Some(mut workflow) = db.workflow(action.workflow_id)? else {
                return Ok(());
            };
            if action.kind.restarts_the_run() {
                match state {
                    ActionState::Done => {
                        workflow.requeues_used += 1;
                        workflow.updated_at = now;
                        db.update_workflow(&workflow)?;
                    }
                    ActionState::Failed if workflow.status == WorkflowStatus::Recovering => {
                        let reason = format!("recovery failed: {result}");
                        complete_workflow(db, &mut workflow, reason, now, &mut events)?;
                    }
                    _ => {}
                }
            }
            if state == ActionState::Failed {
                db.insert_notification(&Notification {
                    id: 0,
                    workflow_id: Some(workflow.id),
                    time: now,
                    event: AlertEvent::RecoveryFailed,
                    severity: Severity::Critical,
                    title: format!(
                        "{}: action {} ({}) failed",
                        workflow.name,
                        action.id,
                        action.kind.as_str()
                    ),
                    body: result.clone(),
                })?;
            }
            Ok(())
        })?;
        self.pending_events.extend(events);
        self.flush_events();
        Ok(())
    }
}

/// A job whose state the backend could not read is not acted on: the action waits, approved, for a
/// state that is understood.
fn not_understood(job: &JobSnapshot) -> Execution {
    Execution::Retry(format!(
        "job {} is in a state runguard does not understand ({}); not acting on it",
        job.job_id, job.state_raw
    ))
}

/// A transient error is tried again; a refusal says what would have run; anything else failed.
pub(super) fn retry_or_fail(err: BackendError) -> Execution {
    if err.is_transient() {
        return Execution::Retry(err.to_string());
    }
    match err.refusal() {
        Some((command, message)) => Execution::Failed(format!(
            "would have done `{command}` but the scheduler refused: {message}"
        )),
        None => Execution::Failed(err.to_string()),
    }
}
