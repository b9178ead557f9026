//! The rules that warn without stopping the run: throughput drop, checkpoint stall, stuck pending, a
//! job blocked on a failed upstream job, and the recovery watchdog.

use chrono::{DateTime, Utc};

use super::{Engine, EngineError};
use crate::detect;
use crate::model::{ActionState, AnomalyKind, Attempt, JobState, Workflow};

impl Engine {
    /// The rules that warn without stopping the run: throughput drop, checkpoint stall, stuck pending.
    pub(super) fn watch_health(
        &mut self,
        workflow: &Workflow,
        attempt: &Attempt,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let config = &self.config.detect;
        let mut findings = Vec::new();
        if attempt.state == JobState::Running {
            let head = config.throughput_warmup_samples + config.throughput_baseline_samples;
            let (first, last) = self.store.db().throughput_window(
                workflow.id,
                attempt.index,
                head,
                config.throughput_drop_samples,
            )?;
            findings.extend(detect::throughput_drop(&first, &last, config));
            let checkpoints = self.store.db().checkpoints(workflow.id)?;
            findings.extend(detect::checkpoint_stall(attempt, &checkpoints, now, config));
        }
        if attempt.state == JobState::Pending {
            // A requeued job keeps the submit time of its first run: its wait in the queue starts
            // when its previous attempt ended, not at the original submission.
            let mut queued = attempt.clone();
            if attempt.index > 0 {
                let previous_end = self
                    .store
                    .db()
                    .attempts(workflow.id)?
                    .iter()
                    .filter(|earlier| earlier.index < attempt.index)
                    .filter_map(|earlier| earlier.end_time)
                    .max();
                queued.submit_time = queued.submit_time.max(previous_end);
            }
            findings.extend(detect::stuck_pending(&queued, now, config));
        }
        findings.extend(self.blocked_upstream(workflow, attempt)?);
        for finding in findings {
            self.raise_warning(workflow, attempt, finding, now)?;
        }
        Ok(())
    }

    /// The recovery watchdog: a workflow still recovering long after its failure needs a person.
    pub(super) fn watch_recovery(
        &mut self,
        workflow: &Workflow,
        attempt: &Attempt,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let limit = self.config.recovery.watchdog_secs;
        if limit == 0 {
            return Ok(());
        }
        let failure = self
            .store
            .db()
            .anomalies(workflow.id)?
            .into_iter()
            .rev()
            .find(|anomaly| {
                matches!(
                    anomaly.kind,
                    AnomalyKind::Crash | AnomalyKind::Hang | AnomalyKind::CrashLoop
                )
            });
        let Some(failure) = failure else {
            return Ok(());
        };
        let waited = now - failure.time;
        if waited.num_seconds() < i64::try_from(limit).unwrap_or(i64::MAX) {
            return Ok(());
        }
        let actions = self.store.db().actions(workflow.id)?;
        let waiting_for_approval: Vec<String> = actions
            .iter()
            .filter(|action| {
                action.attempt_index == failure.attempt_index
                    && action.state == ActionState::Proposed
                    && action.kind.restarts_the_run()
            })
            .map(|action| format!("action {} ({})", action.id, action.kind.as_str()))
            .collect();
        let stuck_at = if !waiting_for_approval.is_empty() {
            format!("{} waits for approval", waiting_for_approval.join(", "))
        } else if attempt.index > failure.attempt_index {
            format!(
                "attempt {} (job {}) is {}{}",
                attempt.index,
                attempt.job_id,
                attempt.state_raw.to_lowercase(),
                attempt
                    .reason
                    .as_deref()
                    .map(|reason| format!(" ({reason})"))
                    .unwrap_or_default()
            )
        } else {
            "no new attempt has started".to_string()
        };
        let finding = detect::Finding {
            kind: AnomalyKind::RecoveryStalled,
            summary: format!(
                "recovering for {} min since the {} of attempt {} and the run is not back: {stuck_at}",
                waited.num_minutes(),
                failure.kind.as_str(),
                failure.attempt_index
            ),
            evidence: vec![failure.summary.clone()],
            node: None,
        };
        self.raise_warning(workflow, attempt, finding, now)
    }

    /// A pending job whose upstream dependency failed waits forever: the upstream failure is the cause,
    /// escalated with the upstream job's own attribution.
    pub(super) fn blocked_upstream(
        &self,
        workflow: &Workflow,
        attempt: &Attempt,
    ) -> Result<Option<detect::Finding>, EngineError> {
        let waiting_on_dependency = attempt.state == JobState::Pending
            && attempt
                .reason
                .as_deref()
                .is_some_and(|reason| reason.contains("Dependency"));
        let Some(upstream_job) = workflow.spec.dependency.as_deref() else {
            return Ok(None);
        };
        if !waiting_on_dependency {
            return Ok(None);
        }
        let db = self.store.db();
        let Some(upstream) = db.attempt_by_job(workflow.backend.as_str(), upstream_job)? else {
            return Ok(None);
        };
        if !upstream.state.is_failure() {
            return Ok(None);
        }
        let cause = db
            .attributions(upstream.workflow_id)?
            .into_iter()
            .rev()
            .find(|a| a.attempt_index == upstream.index);
        let what = cause
            .as_ref()
            .map(|a| {
                format!(
                    "{}{}",
                    a.category,
                    a.culprit
                        .node
                        .as_deref()
                        .map(|n| format!(" on {n}"))
                        .unwrap_or_default()
                )
            })
            .unwrap_or_else(|| upstream.state_raw.clone());
        Ok(Some(detect::Finding {
            kind: AnomalyKind::StuckPending,
            summary: format!(
                "job {} waits on job {upstream_job}, which failed ({what}); it will not start until that \
                 is fixed (scheduler reason {})",
                attempt.job_id,
                attempt.reason.as_deref().unwrap_or("-")
            ),
            evidence: cause.map(|a| a.evidence).unwrap_or_default(),
            node: None,
        }))
    }
}
