//! Observation: the scheduler's view of each job (its logs are read in `logs.rs`). Nothing here
//! acts on the cluster.

use std::collections::HashSet;

use chrono::{DateTime, TimeDelta, Utc};

use super::pace::Load;
use super::{Engine, EngineError, EngineEvent, set_status, with_timeout};
use crate::backend::{BackendError, JobSnapshot};
use crate::model::{Attempt, BackendKind, JobState, Workflow, WorkflowId, WorkflowStatus};
use crate::store::{Db, StoreError};
use crate::telemetry::discover::LogPattern;
use crate::telemetry::tail::{Continuation, continuation};

/// The tag runguard gives a job it submits, so a restarted engine finds it again.
pub(crate) fn attempt_tag(workflow_id: WorkflowId, attempt_index: u32) -> String {
    format!("runguard:workflow={workflow_id}:attempt={attempt_index}")
}

fn parse_tag(tag: &str) -> Option<(WorkflowId, u32)> {
    let rest = tag.strip_prefix("runguard:workflow=")?;
    let (workflow, attempt) = rest.split_once(":attempt=")?;
    Some((workflow.parse().ok()?, attempt.parse().ok()?))
}

fn attempt_from(
    snapshot: &JobSnapshot,
    workflow_id: WorkflowId,
    index: u32,
    now: DateTime<Utc>,
) -> Attempt {
    Attempt {
        workflow_id,
        index,
        job_id: snapshot.job_id.clone(),
        restart_count: snapshot.restart_count,
        nodes: snapshot.nodes.clone(),
        gpus: snapshot.gpus,
        state: snapshot.state,
        state_raw: snapshot.state_raw.clone(),
        reason: snapshot.reason.clone(),
        submit_time: snapshot.submit_time,
        start_time: snapshot.start_time,
        end_time: snapshot.end_time,
        exit_code: snapshot.exit_code,
        excluded_nodes: snapshot.excluded_nodes.clone(),
        log_path: snapshot.log_path.clone(),
        last_log_time: None,
        last_iteration: None,
        last_progress_time: None,
        updated_at: now,
    }
}

/// Copies what the scheduler says into an attempt; true when its state or reason changed.
fn refresh(
    attempt: &mut Attempt,
    snapshot: &JobSnapshot,
    own_dir: Option<&std::path::Path>,
    now: DateTime<Utc>,
) -> bool {
    let changed = attempt.state != snapshot.state
        || attempt.state_raw != snapshot.state_raw
        || attempt.reason != snapshot.reason
        || attempt.nodes != snapshot.nodes;
    attempt.nodes.clone_from(&snapshot.nodes);
    attempt.gpus = snapshot.gpus;
    attempt.state = snapshot.state;
    attempt.state_raw.clone_from(&snapshot.state_raw);
    attempt.reason.clone_from(&snapshot.reason);
    attempt.submit_time = snapshot.submit_time.or(attempt.submit_time);
    attempt.start_time = snapshot.start_time.or(attempt.start_time);
    attempt.end_time = snapshot.end_time.or(attempt.end_time);
    attempt.exit_code = snapshot.exit_code.or(attempt.exit_code);
    attempt.excluded_nodes.clone_from(&snapshot.excluded_nodes);
    // A file of the attempt's own, found by the configured pattern in `own_dir`, is not replaced by
    // the scheduler's output path at the next listing.
    let own = attempt
        .log_path
        .as_ref()
        .is_some_and(|path| own_dir.is_some_and(|dir| path.starts_with(dir)));
    if snapshot.log_path.is_some() && !own {
        attempt.log_path.clone_from(&snapshot.log_path);
    }
    if changed {
        attempt.updated_at = now;
    }
    changed
}

fn state_event(attempt: &Attempt) -> EngineEvent {
    EngineEvent::AttemptStateChanged {
        workflow_id: attempt.workflow_id,
        attempt_index: attempt.index,
        job_id: attempt.job_id.clone(),
        state: attempt.state,
        state_raw: attempt.state_raw.clone(),
        reason: attempt.reason.clone(),
        nodes: attempt.nodes.clone(),
    }
}

/// A recovery is done once the latest attempt runs. (Completion waits for the detection step, after the
/// logs were read, so the last lines of a finished job are not lost.)
fn follow_attempt(
    db: &Db<'_>,
    workflow: &mut Workflow,
    attempt: &Attempt,
    now: DateTime<Utc>,
    events: &mut Vec<EngineEvent>,
) -> Result<(), StoreError> {
    let latest = db.attempts(workflow.id)?.last().map(|a| a.index) == Some(attempt.index);
    if latest
        && workflow.status == WorkflowStatus::Completed
        && !workflow.succeeded
        && !attempt.state.is_terminal()
        && attempt.index > 0
    {
        // runguard had stopped (declined, crash loop, limit) and a person started the job again
        // (a requeue under its id): their new run is watched and recovered like any other.
        let before = workflow
            .status_reason
            .clone()
            .unwrap_or_else(|| "stopped".to_string());
        let reason = format!(
            "job {} was started again (attempt {}) after runguard had stopped ({before}): watching it again",
            attempt.job_id, attempt.index
        );
        enable(db, workflow, reason, "resumed by someone else", now, events)?;
        return Ok(());
    }
    if !latest || !workflow.status.is_active() {
        return Ok(());
    }
    if attempt.state == JobState::Running
        && workflow.status == WorkflowStatus::Pending
        && attempt.log_path.is_none()
    {
        // Nothing to read: watched through the scheduler alone, and it says so.
        let reason = format!(
            "checked: job {} runs on {}; runguard knows no log of it, so only the scheduler's \
             states are watched (set telemetry.log_dir and log_pattern, or give the job an output path)",
            attempt.job_id,
            attempt.nodes.join(",")
        );
        enable(db, workflow, reason, "watching", now, events)?;
    }
    if attempt.state == JobState::Running
        && workflow.status == WorkflowStatus::Recovering
        && !db.attempt_handled(workflow.id, attempt.index)?
    {
        let reason = format!(
            "attempt {} running on {}",
            attempt.index,
            attempt.nodes.join(",")
        );
        enable(db, workflow, reason, "recovered", now, events)?;
    }
    Ok(())
}

/// Moves a workflow to `enabled` with `reason`, journaled as `what: reason`, and says so.
fn enable(
    db: &Db<'_>,
    workflow: &mut Workflow,
    reason: String,
    what: &str,
    now: DateTime<Utc>,
    events: &mut Vec<EngineEvent>,
) -> Result<(), StoreError> {
    set_status(
        db,
        workflow,
        WorkflowStatus::Enabled,
        Some(reason.clone()),
        now,
    )?;
    db.journal(Some(workflow.id), now, &format!("{what}: {reason}"), &[])?;
    events.push(EngineEvent::WorkflowStatusChanged {
        workflow_id: workflow.id,
        status: WorkflowStatus::Enabled,
        reason: Some(reason),
    });
    Ok(())
}

/// The attempt's log by the configured pattern, when the scheduler did not name it.
fn discover_log(
    search: &Option<(std::path::PathBuf, LogPattern)>,
    attempt: &Attempt,
    name: &str,
    user: &str,
) -> Option<std::path::PathBuf> {
    let (dir, pattern) = search.as_ref()?;
    // A margin for clock skew between the scheduler and the file system.
    let since = attempt
        .start_time
        .map(|start| std::time::SystemTime::from(start - TimeDelta::seconds(60)));
    pattern.find(dir, name, &attempt.job_id, user, since)
}

impl Engine {
    pub(super) async fn observe_jobs(&mut self, now: DateTime<Utc>) -> Result<(), EngineError> {
        // `runguard watch` adds jobs from another process at any time.
        let watched = self.store.db().watched_jobs(self.backend.name())?;
        self.backend.set_watched(&watched);
        let asked = std::time::Instant::now();
        let listing = with_timeout(self.backend.list_jobs()).await;
        // A listing from the backend's own memory loads no controller, however long it takes.
        let took = if self.backend.lists_from_cache() {
            std::time::Duration::ZERO
        } else {
            asked.elapsed()
        };
        let load = self.pace.listed(now, took);
        self.report_load(load, now)?;
        let snapshots = match listing {
            Ok(snapshots) => {
                self.scheduler_answered(now)?;
                snapshots
            }
            Err(err) if err.is_transient() => {
                return self.scheduler_failed(format!("listing jobs: {err}"), now);
            }
            Err(BackendError::Credentials(message)) => {
                return self.credentials_refused(message, now);
            }
            Err(err) => {
                return self.warn("backend_unavailable", format!("listing jobs: {err}"), now);
            }
        };
        for snapshot in &snapshots {
            self.observe_job(snapshot, now)?;
        }
        self.check_nodes(now).await?;
        // Attempts still in flight that the listing no longer shows: ask for them one by one.
        let listed: HashSet<&str> = snapshots.iter().map(|s| s.job_id.as_str()).collect();
        let backend = self.backend.kind();
        let workflows = self.store.db().workflows()?;
        for workflow in workflows {
            if !workflow.status.is_active() || workflow.backend != backend {
                continue;
            }
            let Some(attempt) = self.store.db().attempts(workflow.id)?.pop() else {
                continue;
            };
            if attempt.state.is_terminal() || listed.contains(attempt.job_id.as_str()) {
                continue;
            }
            match with_timeout(self.backend.job(&attempt.job_id)).await {
                Ok(Some(snapshot)) => self.observe_job(&snapshot, now)?,
                Ok(None) => {
                    let mut gone = attempt.clone();
                    gone.state = JobState::Vanished;
                    gone.state_raw = "VANISHED".to_string();
                    gone.end_time = Some(now);
                    gone.updated_at = now;
                    self.store.write(|db| db.save_attempt(&gone))?;
                    self.pending_events.push(state_event(&gone));
                    self.flush_events();
                }
                Err(err) => {
                    self.warn(
                        "backend_unavailable",
                        format!("reading job {}: {err}", attempt.job_id),
                        now,
                    )?;
                }
            }
        }
        crate::capacity::sampler::sample(&mut self.store, self.backend.as_ref(), &snapshots, now)
            .await?;
        Ok(())
    }

    /// A slow controller is asked less often, and the user is told once per slow spell.
    fn report_load(&mut self, load: Load, now: DateTime<Utc>) -> Result<(), EngineError> {
        match load {
            Load::Steady => Ok(()),
            Load::Slow(gap) => self.warn(
                "scheduler_slow",
                format!(
                    "the scheduler answered slowly; it is asked every {} s until it is fast again",
                    gap.as_secs()
                ),
                now,
            ),
            Load::Recovered => {
                tracing::info!("the scheduler answers promptly again");
                Ok(())
            }
        }
    }

    fn observe_job(
        &mut self,
        snapshot: &JobSnapshot,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        // A state the backend could not read is never recorded or acted on: the attempt keeps the
        // last state that was understood until the scheduler says something readable again.
        if snapshot.state == JobState::Unknown {
            return self.warn(
                "not_understood",
                format!(
                    "job {}: the scheduler's state {:?} is not understood; nothing is decided on it",
                    snapshot.job_id, snapshot.state_raw
                ),
                now,
            );
        }
        let backend = self.backend.kind();
        let existing = self
            .store
            .db()
            .attempt_by_job(backend.as_str(), &snapshot.job_id)?;
        let tagged = snapshot.tag.as_deref().and_then(parse_tag);
        let log_search = self.config.telemetry.log_dir.clone().and_then(|dir| {
            LogPattern::new(&self.config.telemetry.log_pattern)
                .ok()
                .map(|pattern| (dir, pattern))
        });
        let mut events = Vec::new();
        self.store.write(|db| {
            let attempt = match existing {
                Some(mut attempt) if snapshot.restart_count > attempt.restart_count => {
                    // Requeued under the same job id: the previous attempt is over, a new one begins.
                    if !attempt.state.is_terminal() {
                        attempt.state = JobState::Requeued;
                        attempt.state_raw = "REQUEUED".to_string();
                        attempt.end_time = Some(now);
                        attempt.updated_at = now;
                        db.save_attempt(&attempt)?;
                        events.push(state_event(&attempt));
                    }
                    let next = attempt_from(snapshot, attempt.workflow_id, attempt.index + 1, now);
                    db.save_attempt(&next)?;
                    share_log(db, &attempt, &next, now)?;
                    db.journal(
                        Some(next.workflow_id),
                        now,
                        &format!(
                            "attempt {} of job {} began (restart {})",
                            next.index, next.job_id, next.restart_count
                        ),
                        &[],
                    )?;
                    events.push(EngineEvent::AttemptStarted {
                        workflow_id: next.workflow_id,
                        attempt_index: next.index,
                        job_id: next.job_id.clone(),
                    });
                    next
                }
                Some(mut attempt) => {
                    let before = attempt.clone();
                    let own_dir = log_search.as_ref().map(|(dir, _)| dir.as_path());
                    if refresh(&mut attempt, snapshot, own_dir, now) {
                        events.push(state_event(&attempt));
                    }
                    if attempt.log_path != before.log_path {
                        // Another file: read from its start.
                        db.set_log_offset(attempt.workflow_id, attempt.index, 0, None)?;
                    }
                    // Most listings change nothing: a write per job per tick is what a thousand
                    // watched jobs would cost.
                    if attempt != before {
                        db.save_attempt(&attempt)?;
                    }
                    attempt
                }
                None => {
                    let resubmitted = match tagged {
                        Some((workflow_id, index)) => {
                            db.workflow(workflow_id)?.map(|_| (workflow_id, index))
                        }
                        None => None,
                    };
                    let (workflow_id, index) = match resubmitted {
                        Some(found) => found,
                        None => (enrol(db, backend, snapshot, now, &mut events)?, 0),
                    };
                    let attempt = attempt_from(snapshot, workflow_id, index, now);
                    db.save_attempt(&attempt)?;
                    events.push(EngineEvent::AttemptStarted {
                        workflow_id,
                        attempt_index: index,
                        job_id: attempt.job_id.clone(),
                    });
                    attempt
                }
            };
            let mut attempt = attempt;
            if let Some(found) = own_log(db, &log_search, &attempt, snapshot)? {
                attempt.log_path = Some(found);
                db.save_attempt(&attempt)?;
                // A file of its own: read from its start, whatever was read of the output path.
                db.set_log_offset(attempt.workflow_id, attempt.index, 0, None)?;
            }
            if let Some(mut workflow) = db.workflow(attempt.workflow_id)? {
                follow_attempt(db, &mut workflow, &attempt, now, &mut events)?;
            }
            Ok(())
        })?;
        self.pending_events.extend(events);
        self.flush_events();
        Ok(())
    }
}

/// A file of the attempt's own found by the configured pattern (`telemetry.log_dir`), when it has none
/// yet or only the scheduler's output path: one file per attempt (AJR's `{name}_{jobid}_{datetime}.log`)
/// is what a requeued job writes to, whatever Slurm names. Looked for once the attempt runs (a pending
/// requeued job may still report its previous run's start time), never a file an earlier attempt read.
fn own_log(
    db: &Db<'_>,
    search: &Option<(std::path::PathBuf, LogPattern)>,
    attempt: &Attempt,
    snapshot: &JobSnapshot,
) -> Result<Option<std::path::PathBuf>, StoreError> {
    if search.is_none()
        || attempt.state == JobState::Pending
        || (attempt.log_path.is_some() && attempt.log_path != snapshot.log_path)
    {
        return Ok(None);
    }
    let Some(found) = discover_log(search, attempt, &snapshot.spec.name, &snapshot.user) else {
        return Ok(None);
    };
    if attempt.log_path.as_ref() == Some(&found) {
        return Ok(None);
    }
    let taken = db
        .attempts(attempt.workflow_id)?
        .iter()
        .any(|earlier| earlier.index < attempt.index && earlier.log_path.as_ref() == Some(&found));
    Ok((!taken).then_some(found))
}

/// A job requeued under its id writes its new run to the output file of the previous one: each line
/// belongs to exactly one attempt. Appended to, the new attempt starts where the file ends now and the
/// previous one reads no further; truncated or replaced, the new attempt reads it from the start and
/// the previous one keeps what it had read.
fn share_log(
    db: &Db<'_>,
    previous: &Attempt,
    next: &Attempt,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let (Some(path), Some(next_path)) = (&previous.log_path, &next.log_path) else {
        return Ok(());
    };
    if path != next_path {
        return Ok(());
    }
    let (offset, identity) = db.log_offset(previous.workflow_id, previous.index)?;
    let tail = db.log_tail(previous.workflow_id, previous.index)?;
    let split = match continuation(path, offset, identity.as_deref(), &tail) {
        Ok(split) => split,
        Err(err) => {
            // Unreadable now: the new attempt starts where the previous one stopped reading, so no
            // line is read twice; what the previous run wrote after that is left to the new one.
            tracing::warn!(path = %path.display(), %err, "splitting a shared log between attempts");
            Continuation {
                start: offset,
                previous_end: offset,
                restarted: false,
                identity,
            }
        }
    };
    db.set_log_end(previous.workflow_id, previous.index, split.previous_end)?;
    db.set_log_offset(
        next.workflow_id,
        next.index,
        split.start,
        split.identity.as_deref(),
    )?;
    db.journal(
        Some(next.workflow_id),
        now,
        &if split.restarted {
            format!(
                "attempt {} writes {} from its start (truncated or replaced); attempt {} keeps the {} bytes it read",
                next.index,
                path.display(),
                previous.index,
                split.previous_end
            )
        } else {
            format!(
                "attempt {} appends to {} from byte {}; attempt {} ends there",
                next.index,
                path.display(),
                split.start,
                previous.index
            )
        },
        &[],
    )?;
    Ok(())
}

/// What a workflow's check says of runguard's right to act on the job: a job of another user may be
/// changed only by an operator or an administrator of the scheduler, so its actions may be refused
/// (and are then recorded as what runguard would have done).
fn access_note(job_user: &str, runner: Option<&str>) -> Option<String> {
    let runner = runner.filter(|runner| !runner.is_empty() && *runner != "root")?;
    (!job_user.is_empty() && job_user != runner).then(|| {
        format!(
            "; the job is {job_user}'s and runguard runs as {runner}: the scheduler refuses its \
             actions unless {runner} is an operator or administrator there"
        )
    })
}

/// A job seen for the first time becomes a workflow.
fn enrol(
    db: &Db<'_>,
    backend: BackendKind,
    snapshot: &JobSnapshot,
    now: DateTime<Utc>,
    events: &mut Vec<EngineEvent>,
) -> Result<WorkflowId, StoreError> {
    let mut workflow = Workflow::enrolled(
        snapshot.name.clone(),
        backend,
        snapshot.spec.clone(),
        snapshot.limits.clone(),
        now,
    );
    // Enabled once runguard has seen the job run and read its log.
    workflow.status = WorkflowStatus::Pending;
    workflow.status_reason = Some(format!(
        "checking: job {} is listed; its log is read once it runs",
        snapshot.job_id
    ));
    let id = db.insert_workflow(&workflow)?;
    db.journal(
        Some(id),
        now,
        &format!(
            "enrolled job {} ({}) on {backend}: max requeues {}",
            snapshot.job_id,
            snapshot.name,
            snapshot
                .limits
                .max_requeue_times
                .map_or("system default".to_string(), |n| n.to_string())
        ),
        &[],
    )?;
    events.push(EngineEvent::WorkflowEnrolled {
        workflow_id: id,
        name: snapshot.name.clone(),
        job_id: snapshot.job_id.clone(),
    });
    Ok(id)
}

impl Engine {
    /// A pending workflow whose job runs and whose log was read is enabled: watched in full.
    pub(super) fn checked(
        &mut self,
        workflow_id: crate::model::WorkflowId,
        attempt: &crate::model::Attempt,
        path: &std::path::Path,
        now: DateTime<Utc>,
    ) -> Result<(), EngineError> {
        let mut events = Vec::new();
        self.store.write(|db| {
            let Some(mut workflow) = db.workflow(workflow_id)? else {
                return Ok(());
            };
            if workflow.status != WorkflowStatus::Pending {
                return Ok(());
            }
            let on = if attempt.nodes.is_empty() {
                String::new()
            } else {
                format!(" on {}", attempt.nodes.join(","))
            };
            let runner = std::env::var("USER")
                .or_else(|_| std::env::var("LOGNAME"))
                .ok();
            let reason = format!(
                "checked: job {} runs{on} and its log {} is read{}",
                attempt.job_id,
                path.display(),
                access_note(&workflow.spec.user, runner.as_deref()).unwrap_or_default()
            );
            enable(db, &mut workflow, reason, "watching", now, &mut events)
        })?;
        self.pending_events.extend(events);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::access_note;

    #[test]
    fn a_job_of_another_user_is_noted_as_possibly_refused_unless_runguard_is_root() {
        assert_eq!(access_note("alice", Some("alice")), None);
        assert_eq!(access_note("alice", Some("root")), None);
        assert_eq!(access_note("alice", None), None);
        assert_eq!(access_note("", Some("bob")), None);
        let note = access_note("alice", Some("bob")).unwrap_or_default();
        assert!(
            note.contains("the job is alice's and runguard runs as bob"),
            "{note}"
        );
    }
}
