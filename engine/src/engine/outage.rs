//! A scheduler that does not answer (controller down, command timing out): the engine backs off, marks
//! the workflows it cannot see, runs no action until the scheduler answers again, and says when it does.

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

use super::{Engine, EngineError, EngineEvent, set_status};
use crate::model::WorkflowStatus;

/// The current outage of the scheduler.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Outage {
    pub since: DateTime<Utc>,
    /// Consecutive failed calls.
    pub failures: u32,
    /// No call before this time.
    pub next_try: DateTime<Utc>,
    pub last_error: String,
    /// Workflows whose journal already tells of this outage.
    pub journaled: std::collections::HashSet<crate::model::WorkflowId>,
}

/// The wait after `failures` consecutive failures: the poll interval, doubled each time, at most `max`.
pub(super) fn backoff(poll: Duration, failures: u32, max: Duration) -> Duration {
    let doublings = failures.saturating_sub(1).min(20);
    poll.saturating_mul(1u32 << doublings).min(max).max(poll)
}

/// How a workflow's mark for the outage that began at `since` starts.
fn mark_prefix(since: DateTime<Utc>) -> String {
    format!(
        "scheduler unreachable since {}",
        since.format("%Y-%m-%d %H:%M:%S UTC")
    )
}

/// The workflow's mark while the scheduler is unreachable.
fn mark(since: DateTime<Utc>, error: &str) -> String {
    format!(
        "{}: {error}; no action runs until it answers",
        mark_prefix(since)
    )
}

impl Engine {
    /// Whether the engine waits out an outage now (no scheduler call, no action).
    pub(super) fn backing_off(&self, now: DateTime<Utc>) -> bool {
        self.outage
            .as_ref()
            .is_some_and(|outage| now < outage.next_try)
    }

    /// Records a failed scheduler call: the first one marks the active workflows of this backend.
    pub(super) fn scheduler_failed(
        &mut self,
        error: String,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let poll = Duration::from_secs_f64(self.config.engine.poll_interval_secs);
        let max = Duration::from_secs(self.config.engine.max_backoff_secs);
        let failures = self.outage.as_ref().map_or(0, |o| o.failures) + 1;
        let wait = backoff(poll, failures, max);
        let next_try = now + TimeDelta::from_std(wait).unwrap_or(TimeDelta::MAX);
        let since = self.outage.as_ref().map_or(now, |o| o.since);
        let mut journaled = self.outage.take().map(|o| o.journaled).unwrap_or_default();
        self.warn("backend_unavailable", error.clone(), now)?;
        self.pending_events.push(EngineEvent::SchedulerUnreachable {
            since,
            failures,
            retry_in_secs: wait.as_secs_f64(),
            error: error.clone(),
        });
        // Every failed call (re)marks the active workflows: a status set meanwhile (a recovery decided
        // from the logs) gets the mark back, since its action waits for the scheduler too.
        let backend = self.backend.kind();
        let reason = mark(since, &error);
        self.store.write(|db| {
            for mut workflow in db.workflows()? {
                // A refusal of the credentials keeps its own words.
                if !workflow.status.is_active()
                    || workflow.backend != backend
                    || workflow.status == WorkflowStatus::CredentialError
                {
                    continue;
                }
                if journaled.insert(workflow.id) {
                    db.journal(Some(workflow.id), now, &reason, &[])?;
                }
                if workflow.status_reason.as_deref() != Some(reason.as_str()) {
                    workflow.status_reason = Some(reason.clone());
                    workflow.updated_at = now;
                    db.update_workflow(&workflow)?;
                }
            }
            Ok(())
        })?;
        self.outage = Some(Outage {
            since,
            failures,
            next_try,
            last_error: error,
            journaled,
        });
        self.flush_events();
        Ok(())
    }

    /// The scheduler refused runguard's credentials: every active workflow of this backend moves to
    /// `credential_error` with the scheduler's message, and nothing runs until it accepts them again.
    pub(super) fn credentials_refused(
        &mut self,
        message: String,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        self.scheduler_failed(format!("credentials refused: {message}"), now)?;
        self.credentials_in_doubt = true;
        let reason = format!("the scheduler refused runguard's credentials: {message}");
        self.move_workflows(
            |status| status.is_active() && status != WorkflowStatus::CredentialError,
            WorkflowStatus::CredentialError,
            &reason,
            now,
        )?;
        self.flush_events();
        Ok(())
    }

    /// Workflows left in `credential_error` by a refusal (in this run or an earlier one) are watched
    /// again once the scheduler answers. Checked once per refusal, not on every listing.
    fn credentials_accepted(&mut self, now: DateTime<Utc>) -> Result<(), EngineError> {
        if !std::mem::take(&mut self.credentials_in_doubt) {
            return Ok(());
        }
        self.move_workflows(
            |status| status == WorkflowStatus::CredentialError,
            WorkflowStatus::Enabled,
            "credentials accepted again",
            now,
        )
    }

    /// Moves this backend's workflows whose status `pick` selects to `status`, journaling why.
    fn move_workflows(
        &mut self,
        pick: impl Fn(WorkflowStatus) -> bool,
        status: WorkflowStatus,
        reason: &str,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let backend = self.backend.kind();
        let mut events = Vec::new();
        self.store.write(|db| {
            for mut workflow in db.workflows()? {
                if workflow.backend != backend || !pick(workflow.status) {
                    continue;
                }
                db.journal(Some(workflow.id), now, reason, &[])?;
                set_status(db, &mut workflow, status, Some(reason.to_string()), now)?;
                events.push(EngineEvent::WorkflowStatusChanged {
                    workflow_id: workflow.id,
                    status,
                    reason: Some(reason.to_string()),
                });
            }
            Ok(())
        })?;
        self.pending_events.extend(events);
        Ok(())
    }

    /// The scheduler answered: an outage ends, and the workflows' marks are taken off.
    pub(super) fn scheduler_answered(&mut self, now: DateTime<Utc>) -> Result<(), EngineError> {
        self.credentials_accepted(now)?;
        let Some(outage) = self.outage.take() else {
            return Ok(());
        };
        let down = (now - outage.since).num_seconds().max(0);
        let note = format!(
            "scheduler reachable again after {down} s and {} failed calls",
            outage.failures
        );
        let backend = self.backend.kind();
        let prefix = mark_prefix(outage.since);
        self.store.write(|db| {
            for mut workflow in db.workflows()? {
                if workflow.backend != backend {
                    continue;
                }
                // Only the mark of this outage is replaced: a status changed meanwhile keeps its reason.
                let ours = workflow
                    .status_reason
                    .as_deref()
                    .is_some_and(|reason| reason.starts_with(prefix.as_str()));
                if !ours {
                    continue;
                }
                db.journal(Some(workflow.id), now, &note, &[])?;
                workflow.status_reason = Some(note.clone());
                workflow.updated_at = now;
                db.update_workflow(&workflow)?;
            }
            Ok(())
        })?;
        tracing::info!(down_secs = down, "scheduler reachable again");
        self.pending_events
            .push(EngineEvent::SchedulerReachable { down_secs: down });
        self.flush_events();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_from_the_poll_interval_up_to_the_maximum() {
        let poll = Duration::from_secs(5);
        let max = Duration::from_secs(300);
        let waits: Vec<u64> = (1..=9)
            .map(|failures| backoff(poll, failures, max).as_secs())
            .collect();
        assert_eq!(waits, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(backoff(poll, u32::MAX, max), max);
    }
}
