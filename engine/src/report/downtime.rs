//! Where a workflow's time went: each failure's way back to training split into named gaps, the work
//! the next attempt had to do again, and the workflow's goodput. Pure functions of a
//! [`WorkflowHistory`] and a clock reading, shared by the recovery report and the cockpit's timeline,
//! so neither does arithmetic of its own and it is tested on hand-built data.

use chrono::{DateTime, TimeDelta, Utc};
use serde::Serialize;

use super::WorkflowHistory;
use crate::model::{Action, ActionState, Anomaly, Attempt, Checkpoint, JobState};

/// One part of the time between a failure and the next attempt's first progress, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GapKind {
    /// From the failure to the anomaly the engine raised on it.
    Detection,
    /// From the anomaly to the recovery action being planned (attribution and policy).
    Analysis,
    /// From the action being planned to its execution finishing; a wait for approval falls here.
    Requeue,
    /// From the requeue to the next attempt starting: the scheduler's queue.
    Pending,
    /// From the next attempt's start to its first reported throughput (see [`recoveries`]).
    CheckpointLoad,
}

impl GapKind {
    /// The gaps in the order they happen.
    pub const ALL: [GapKind; 5] = [
        GapKind::Detection,
        GapKind::Analysis,
        GapKind::Requeue,
        GapKind::Pending,
        GapKind::CheckpointLoad,
    ];

    /// The name shown in the timeline and the report.
    pub fn name(self) -> &'static str {
        match self {
            GapKind::Detection => "detection",
            GapKind::Analysis => "analysis",
            GapKind::Requeue => "requeue",
            GapKind::Pending => "pending",
            GapKind::CheckpointLoad => "checkpoint load",
        }
    }
}

/// A measured gap.
#[derive(Debug, Clone, PartialEq)]
pub struct Gap {
    pub kind: GapKind,
    /// Where the previous gap ended (or the failure, for the first one).
    pub start: DateTime<Utc>,
    /// The boundary that closes this gap; never before `start`.
    pub end: DateTime<Utc>,
    /// The gap has not ended yet: `end` is the clock reading.
    pub ongoing: bool,
}

impl Gap {
    /// How long the gap lasted (so far, when it is ongoing).
    pub fn duration(&self) -> TimeDelta {
        self.end - self.start
    }
}

/// One failed attempt and the way back to training after it.
#[derive(Debug, Clone, PartialEq)]
pub struct Recovery {
    /// Index of the attempt that failed.
    pub failed_attempt: u32,
    /// The attempt that followed, once there is one.
    pub next_attempt: Option<u32>,
    /// When the failed attempt stopped making progress (see [`recoveries`]).
    pub failed_at: DateTime<Utc>,
    /// The gaps that could be measured, in order; a gap whose ends are not both known is left out.
    pub gaps: Vec<Gap>,
    /// Iteration of the checkpoint the next attempt resumes from; `None`: from the beginning.
    pub resumed_from: Option<u64>,
    /// Iterations the failed attempt did after that checkpoint: they are computed again.
    pub lost_iterations: u64,
    /// Running time of the failed attempt after that checkpoint was saved, which produced nothing kept.
    pub lost_time: TimeDelta,
}

impl Recovery {
    /// The gap of one kind, when it was measured.
    pub fn gap(&self, kind: GapKind) -> Option<&Gap> {
        self.gaps.iter().find(|gap| gap.kind == kind)
    }

    /// The measured gaps added up.
    pub fn total(&self) -> TimeDelta {
        self.gaps
            .iter()
            .map(Gap::duration)
            .fold(TimeDelta::zero(), |sum, d| sum + d)
    }
}

/// The workflow's goodput and what it is made of.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Goodput {
    /// Running time of all attempts (start to end, or to now for one still running).
    pub running: TimeDelta,
    /// Running time lost to failures: the sum of [`Recovery::lost_time`].
    pub lost: TimeDelta,
    /// `running - lost`.
    pub useful: TimeDelta,
    /// From the first attempt's start to the end of the workflow, or to now while it is active.
    pub wall: TimeDelta,
}

impl Goodput {
    /// `useful / wall`, 0.0 ..= 1.0.
    pub fn ratio(&self) -> f64 {
        let wall = self.wall.num_milliseconds();
        if wall <= 0 {
            return 0.0;
        }
        (self.useful.num_milliseconds() as f64 / wall as f64).clamp(0.0, 1.0)
    }
}

/// The attempt ended (or was put back in the queue) without finishing the run.
fn failed(attempt: &Attempt) -> bool {
    attempt.state.is_failure() || attempt.state == JobState::Requeued
}

/// When the attempt stopped running: its end, now while it runs, or its last update when the
/// scheduler never reported an end. `None` when it never started.
pub fn running_end(attempt: &Attempt, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let start = attempt.start_time?;
    let end = match attempt.end_time {
        Some(end) => end,
        None if failed(attempt) || attempt.state == JobState::Completed => attempt.updated_at,
        None => now,
    };
    Some(end.max(start))
}

/// When the attempt entered the queue: its submission, but not before an earlier attempt stopped
/// running, since a Slurm requeue keeps the job's first submit time.
pub fn queued_at(
    history: &WorkflowHistory,
    attempt: &Attempt,
    now: DateTime<Utc>,
) -> Option<DateTime<Utc>> {
    let submitted = attempt.submit_time?;
    let earlier_end = history
        .attempts
        .iter()
        .filter(|a| a.index < attempt.index)
        .filter_map(|a| running_end(a, now))
        .max();
    Some(earlier_end.map_or(submitted, |end| submitted.max(end)))
}

/// The action that restarted the run after `attempt`: the one that was done, else the latest one.
fn restart_action(history: &WorkflowHistory, attempt: u32) -> Option<&Action> {
    let restarts = || {
        history
            .actions
            .iter()
            .filter(move |a| a.attempt_index == attempt && a.kind.restarts_the_run())
    };
    restarts()
        .find(|a| a.state == ActionState::Done)
        .or_else(|| restarts().next_back())
}

/// The anomaly the recovery answered: the latest one of the attempt raised before the action was
/// planned (an earlier straggler warning is not what the requeue was for), else the latest one.
fn answered_anomaly<'d>(
    history: &'d WorkflowHistory,
    attempt: u32,
    action: Option<&Action>,
) -> Option<&'d Anomaly> {
    let of_attempt = || {
        history
            .anomalies
            .iter()
            .filter(move |a| a.attempt_index == attempt)
    };
    action
        .and_then(|action| {
            of_attempt()
                .filter(|a| a.time <= action.created_at)
                .max_by_key(|a| a.time)
        })
        .or_else(|| of_attempt().max_by_key(|a| a.time))
}

/// When the attempt stopped making progress. A crash is seen after the job ended, so the end is the
/// failure; a hang is seen while the job still runs (it ends when it is requeued), so the failure is
/// the last time the iteration count moved, or the anomaly itself when that is unknown.
fn failure_time(attempt: &Attempt, anomaly: Option<&Anomaly>) -> DateTime<Utc> {
    let anomaly_time = anomaly.map(|a| a.time);
    match (attempt.end_time, anomaly_time) {
        (Some(end), Some(seen)) if end <= seen => end,
        (Some(end), None) => end,
        (_, Some(seen)) => attempt
            .last_progress_time
            .or(attempt.last_log_time)
            .map_or(seen, |progress| progress.min(seen)),
        (None, None) => attempt
            .last_progress_time
            .or(attempt.last_log_time)
            .unwrap_or(attempt.updated_at),
    }
}

/// The checkpoint a restart after a failure at `failed_at` loads: the last one saved by this attempt
/// or an earlier one before the failure.
fn resume_checkpoint(
    checkpoints: &[Checkpoint],
    attempt: u32,
    failed_at: DateTime<Utc>,
) -> Option<&Checkpoint> {
    checkpoints
        .iter()
        .filter(|c| c.attempt_index <= attempt && c.time <= failed_at)
        .max_by_key(|c| (c.time, c.iteration))
}

/// Every failure of the workflow and the way back from it, oldest first.
///
/// The failure is the attempt's end when the anomaly was raised after it (a crash), else the last time
/// its iteration count moved (a hang, raised while the job still ran). The gaps chain from there
/// through the anomaly's time, the restart action's `created_at` and, once it is done, its
/// `updated_at`, to the next attempt's start and its first progress. Pending starts at the action's
/// completion or, when no action restarted the run (the scheduler requeued it by itself), at the next
/// attempt's submission as [`queued_at`] gives it. The end of checkpoint load is
/// approximated by the next attempt's first throughput sample: the store keeps no checkpoint-load
/// record, and the first sample comes at most one logging interval after training resumed, so this
/// gap includes those first iterations. While the workflow is active, the first gap that has not
/// ended runs to `now` and is marked ongoing.
pub fn recoveries(history: &WorkflowHistory, now: DateTime<Utc>) -> Vec<Recovery> {
    let mut attempts: Vec<&Attempt> = history.attempts.iter().collect();
    attempts.sort_by_key(|a| a.index);
    let active = history.workflow.status.is_active();
    let mut out = Vec::new();
    for (at, attempt) in attempts.iter().enumerate() {
        if !failed(attempt) {
            continue;
        }
        let next = attempts.get(at + 1).copied();
        let action = restart_action(history, attempt.index);
        let anomaly = answered_anomaly(history, attempt.index, action);
        let failed_at = failure_time(attempt, anomaly);
        let action_done = action
            .filter(|a| matches!(a.state, ActionState::Done | ActionState::Failed))
            .map(|a| a.updated_at);
        let first_progress = next.and_then(|next| {
            let start = next.start_time?;
            history
                .throughput
                .iter()
                .filter(|s| s.attempt_index == next.index && s.time >= start)
                .map(|s| s.time)
                .min()
        });
        // Each gap ends at its boundary; the pending gap alone has a start of its own to fall back on.
        let boundaries = [
            (GapKind::Detection, anomaly.map(|a| a.time), None),
            (GapKind::Analysis, action.map(|a| a.created_at), None),
            (GapKind::Requeue, action_done, None),
            (
                GapKind::Pending,
                next.and_then(|n| n.start_time),
                next.and_then(|n| queued_at(history, n, now)),
            ),
            (GapKind::CheckpointLoad, first_progress, None),
        ];
        // A recovery still under way has one gap running now; a finished or abandoned one has none,
        // nor has one whose next attempt ended before it reported progress (its own recovery follows).
        let in_progress = active
            && first_progress.is_none()
            && next.is_none_or(|n| !n.state.is_terminal() && n.state != JobState::Requeued);
        let mut gaps = Vec::new();
        let mut cursor = Some(failed_at);
        // The latest boundary passed, so a fallback start never reaches back into an earlier gap.
        let mut latest = failed_at;
        for (kind, end, fallback_start) in boundaries {
            let fallback_start = fallback_start.map(|start| start.max(latest));
            if let Some(end) = end {
                latest = latest.max(end);
            }
            let Some(start) = cursor.or(fallback_start) else {
                cursor = end;
                continue;
            };
            match end {
                Some(end) => {
                    let end = end.max(start);
                    gaps.push(Gap {
                        kind,
                        start,
                        end,
                        ongoing: false,
                    });
                    cursor = Some(end);
                }
                None if in_progress => {
                    gaps.push(Gap {
                        kind,
                        start,
                        end: now.max(start),
                        ongoing: true,
                    });
                    break;
                }
                None => cursor = None,
            }
        }
        let resumed = resume_checkpoint(&history.checkpoints, attempt.index, failed_at);
        let resumed_from = resumed.map(|c| c.iteration);
        let lost_iterations = attempt
            .last_iteration
            .map_or(0, |last| last.saturating_sub(resumed_from.unwrap_or(0)));
        let lost_time = match (attempt.start_time, running_end(attempt, now)) {
            (Some(start), Some(end)) => {
                let from = resumed.map_or(start, |c| c.time.max(start));
                (end - from).max(TimeDelta::zero())
            }
            _ => TimeDelta::zero(),
        };
        out.push(Recovery {
            failed_attempt: attempt.index,
            next_attempt: next.map(|n| n.index),
            failed_at,
            gaps,
            resumed_from,
            lost_iterations,
            lost_time,
        });
    }
    out
}

/// The workflow's goodput: useful training time over wall time.
///
/// Useful time is the running time of every attempt (start to end, or to `now` for one that still
/// runs) minus each failed attempt's [`Recovery::lost_time`]: the running time after the checkpoint the
/// next attempt resumes from, whose iterations are computed again. Wall time runs from the first
/// attempt's start to `now` while the workflow is active, else to the last attempt's end. Time spent
/// loading a checkpoint counts as running (the timeline shows it as a gap of its own). `None` before
/// any attempt started.
pub fn goodput(history: &WorkflowHistory, now: DateTime<Utc>) -> Option<Goodput> {
    let first_start = history.attempts.iter().filter_map(|a| a.start_time).min()?;
    let wall_end = if history.workflow.status.is_active() {
        now
    } else {
        history
            .attempts
            .iter()
            .filter_map(|a| running_end(a, now))
            .max()
            .unwrap_or(now)
    };
    let running = history
        .attempts
        .iter()
        .filter_map(|a| Some((a.start_time?, running_end(a, now)?)))
        .map(|(start, end)| (end.min(wall_end) - start).max(TimeDelta::zero()))
        .fold(TimeDelta::zero(), |sum, d| sum + d);
    let lost = recoveries(history, now)
        .iter()
        .map(|r| r.lost_time)
        .fold(TimeDelta::zero(), |sum, d| sum + d)
        .min(running);
    Some(Goodput {
        running,
        lost,
        useful: running - lost,
        wall: (wall_end - first_start).max(TimeDelta::zero()),
    })
}

/// The span the timeline shows: from the first submission (or start) to the last end, or to `now`
/// while the workflow is active. `None` when no attempt has a time yet.
pub fn timeline_bounds(
    history: &WorkflowHistory,
    now: DateTime<Utc>,
) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let from = history
        .attempts
        .iter()
        .filter_map(|a| a.submit_time.or(a.start_time))
        .min()?;
    let to = if history.workflow.status.is_active() {
        now
    } else {
        history
            .attempts
            .iter()
            .filter_map(|a| running_end(a, now).or(a.end_time))
            .max()
            .unwrap_or(now)
    };
    Some((from, to.max(from)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{AnomalyKind, WorkflowStatus};
    use crate::report::fixtures::*;

    fn seconds(recovery: &Recovery, kind: GapKind) -> Option<i64> {
        recovery.gap(kind).map(|g| g.duration().num_seconds())
    }

    #[test]
    fn a_crash_splits_into_detection_analysis_requeue_pending_and_checkpoint_load() {
        let history = recovered_once();
        let recoveries = recoveries(&history, t(5000));
        assert_eq!(recoveries.len(), 1);
        let r = &recoveries[0];
        assert_eq!((r.failed_attempt, r.next_attempt), (0, Some(1)));
        assert_eq!(r.failed_at, t(1000));
        assert_eq!(seconds(r, GapKind::Detection), Some(10));
        assert_eq!(seconds(r, GapKind::Analysis), Some(2));
        assert_eq!(seconds(r, GapKind::Requeue), Some(8));
        assert_eq!(seconds(r, GapKind::Pending), Some(80));
        assert_eq!(seconds(r, GapKind::CheckpointLoad), Some(30));
        assert_eq!(r.total().num_seconds(), 130);
        assert!(r.gaps.iter().all(|g| !g.ongoing));
    }

    #[test]
    fn lost_work_is_the_iterations_and_running_time_after_the_resumed_checkpoint() {
        let r = &recoveries(&recovered_once(), t(5000))[0];
        assert_eq!(r.resumed_from, Some(300));
        assert_eq!(r.lost_iterations, 50);
        assert_eq!(r.lost_time.num_seconds(), 100);
    }

    #[test]
    fn without_a_checkpoint_the_whole_attempt_is_recomputed() {
        let mut history = recovered_once();
        history.checkpoints.clear();
        let r = &recoveries(&history, t(5000))[0];
        assert_eq!(r.resumed_from, None);
        assert_eq!(r.lost_iterations, 350);
        assert_eq!(r.lost_time.num_seconds(), 900);
    }

    #[test]
    fn goodput_is_running_time_minus_recomputed_time_over_wall_time_from_first_start() {
        let g = goodput(&recovered_once(), t(5000)).unwrap();
        // Running 900 + 900 s, 100 s of it recomputed, wall 100..2000.
        assert_eq!(g.running.num_seconds(), 1800);
        assert_eq!(g.lost.num_seconds(), 100);
        assert_eq!(g.useful.num_seconds(), 1700);
        assert_eq!(g.wall.num_seconds(), 1900);
        assert!((g.ratio() - 1700.0 / 1900.0).abs() < 1e-9);
    }

    #[test]
    fn an_active_workflow_counts_its_running_attempt_and_wall_time_to_now() {
        let mut history = history(
            WorkflowStatus::Enabled,
            vec![attempt(0, JobState::Running, [Some(0), Some(100), None])],
        );
        history.attempts[0].updated_at = t(150);
        let g = goodput(&history, t(400)).unwrap();
        assert_eq!((g.running.num_seconds(), g.wall.num_seconds()), (300, 300));
        assert!((g.ratio() - 1.0).abs() < 1e-9);
        assert!(recoveries(&history, t(400)).is_empty());
    }

    #[test]
    fn no_goodput_before_anything_started() {
        let history = history(
            WorkflowStatus::Pending,
            vec![attempt(0, JobState::Pending, [Some(0), None, None])],
        );
        assert_eq!(goodput(&history, t(60)), None);
        assert_eq!(timeline_bounds(&history, t(60)), Some((t(0), t(60))));
    }

    #[test]
    fn a_recovery_waiting_for_approval_has_its_requeue_gap_running_now() {
        let mut history = recovered_once();
        history.workflow.status = WorkflowStatus::Recovering;
        history.attempts.truncate(1);
        history.actions = vec![requeue(0, ActionState::Proposed, 1012, 1012)];
        let r = &recoveries(&history, t(1100))[0];
        assert_eq!(r.next_attempt, None);
        assert_eq!(seconds(r, GapKind::Analysis), Some(2));
        let requeue = r.gap(GapKind::Requeue).unwrap();
        assert!(requeue.ongoing);
        assert_eq!(requeue.duration().num_seconds(), 88);
        assert_eq!(r.gap(GapKind::Pending), None);
    }

    #[test]
    fn a_hang_fails_when_progress_stopped_not_when_the_requeue_ended_it() {
        let mut history = recovered_once();
        let hung = &mut history.attempts[0];
        hung.state = JobState::Requeued;
        hung.last_progress_time = Some(t(700));
        hung.end_time = Some(t(1015));
        history.anomalies = vec![anomaly(0, AnomalyKind::Hang, 1010)];
        let r = &recoveries(&history, t(5000))[0];
        assert_eq!(r.failed_at, t(700));
        assert_eq!(seconds(r, GapKind::Detection), Some(310));
        // The checkpoint of 300 at 900 came after progress stopped: the restart resumes from 100.
        assert_eq!(r.resumed_from, Some(100));
    }

    #[test]
    fn a_scheduler_requeue_without_an_action_measures_pending_from_the_submission() {
        let mut history = recovered_once();
        history.actions.clear();
        let r = &recoveries(&history, t(5000))[0];
        assert_eq!(seconds(r, GapKind::Detection), Some(10));
        assert_eq!(r.gap(GapKind::Analysis), None);
        assert_eq!(r.gap(GapKind::Requeue), None);
        assert_eq!(seconds(r, GapKind::Pending), Some(80));
        assert_eq!(seconds(r, GapKind::CheckpointLoad), Some(30));
    }

    #[test]
    fn a_requeue_that_keeps_the_first_submit_time_is_queued_only_after_the_failure() {
        let mut history = recovered_once();
        history.actions.clear();
        history.attempts[1].submit_time = Some(t(0));
        assert_eq!(
            queued_at(&history, &history.attempts[1], t(5000)),
            Some(t(1000))
        );
        let r = &recoveries(&history, t(5000))[0];
        // Detection ends at 1010; pending does not reach back over it.
        assert_eq!(seconds(r, GapKind::Pending), Some(90));
    }

    #[test]
    fn the_answered_anomaly_is_the_last_one_before_the_action_was_planned() {
        let mut history = recovered_once();
        // A throughput warning after the requeue was planned is not what it answered.
        history
            .anomalies
            .push(anomaly(0, AnomalyKind::ThroughputDrop, 1015));
        let r = &recoveries(&history, t(5000))[0];
        assert_eq!(r.gap(GapKind::Detection).map(|g| g.end), Some(t(1010)));
    }
}
