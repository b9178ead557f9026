//! The recovery report of one workflow: for every failure, what failed and when, the evidence lines,
//! the attribution, the actions taken, the actions runguard would have taken but was not permitted to
//! (or that nobody approved), and the downtime split with the work lost.
//!
//! It is built from the store alone, so `runguard report`, the cockpit and a reader days later all see
//! the same report. An optional narrative written by a language model ([`narrative`]) may be appended
//! to a failure; it is labelled as such and never feeds a decision.

pub mod advisor;
pub mod downtime;
#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;
mod history;
pub mod narrative;
pub mod phases;
pub mod render;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::model::{
    ActionId, ActionKind, ActionState, AnomalyKind, BackendKind, Component, Culprit, WorkflowId,
    WorkflowStatus,
};
use crate::recover::Policy;
use crate::redact::Redactor;
use crate::store::{Db, StoreError};
use downtime::{GapKind, Recovery};
pub use history::WorkflowHistory;

/// The heading of a narrative, in every format: whoever reads it must know a language model wrote it.
pub const NARRATIVE_LABEL: &str = "Narrative (written by a language model from the evidence above; runguard did not use it for any decision)";

/// The report of one workflow.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// The clock reading the report was made at (ongoing gaps run to it).
    pub generated_at: DateTime<Utc>,
    pub workflow: WorkflowHeader,
    /// Crashes, hangs and crash loops, oldest first.
    pub failures: Vec<FailureReport>,
    /// Anomalies that did not stop the run (throughput drops, stragglers, ...), oldest first.
    pub warnings: Vec<WarningReport>,
    /// The multiphase workflow this run is a phase of, with every phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phases: Option<phases::PhasesReport>,
}

/// Who the workflow is and where it stands.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WorkflowHeader {
    pub id: WorkflowId,
    pub name: String,
    pub backend: String,
    /// The scheduler job ids of its attempts, in order, each once.
    pub job_ids: Vec<String>,
    pub status: WorkflowStatus,
    /// Why it is in its status (why recovery stopped, say), when something needs saying.
    pub reason: Option<String>,
    pub succeeded: bool,
    pub requeues_used: u32,
    /// min(system, job) requeues.
    pub requeue_limit: u32,
    /// `None` before any attempt started.
    pub goodput: Option<GoodputReport>,
    /// The checkpoint interval advisor's figures, once a save's cost and a failure rate are known.
    pub checkpoint_advice: Option<advisor::Advice>,
}

/// Useful training time over wall time (see [`downtime::goodput`]), in whole seconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct GoodputReport {
    /// 0.0 ..= 1.0
    pub ratio: f64,
    pub useful_seconds: i64,
    pub running_seconds: i64,
    /// Running time whose work was computed again after a failure.
    pub lost_seconds: i64,
    pub wall_seconds: i64,
}

/// One failure: a crash or a hang of an attempt (or a crash loop seen on its own).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureReport {
    /// The anomaly the failure was raised as; narratives are kept under it.
    pub anomaly_id: i64,
    /// When the engine raised it.
    pub time: DateTime<Utc>,
    pub attempt: u32,
    pub job_id: Option<String>,
    /// The attempt's nodes.
    pub nodes: Vec<String>,
    /// The attempt's state in the scheduler's words (`FAILED`, `NODE_FAIL`).
    pub state: Option<String>,
    pub exit_code: Option<i32>,
    pub kind: AnomalyKind,
    pub summary: String,
    /// The log lines the failure was raised with (the last error block of a crash).
    pub evidence: Vec<String>,
    pub attribution: Option<AttributionReport>,
    /// Why recovery stopped at this failure, when the crash-loop rule stopped it.
    pub crash_loop: Option<String>,
    /// Actions runguard ran (or went to run) for this failure, with their outcome.
    pub actions_taken: Vec<ActionReport>,
    /// Actions runguard would have taken but was not permitted to, or that nobody approved.
    pub actions_not_taken: Vec<ActionReport>,
    /// The way back to training after the failure; `None` when the attempt is not (yet) over.
    pub downtime: Option<DowntimeReport>,
    /// A language model's account, when one was written or asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub narrative: Option<NarrativeStatus>,
}

/// Why the failure happened, as attribution concluded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AttributionReport {
    /// A category of the failure taxonomy (`nccl_timeout`, `xid_79`, ...).
    pub category: String,
    pub component: Component,
    pub culprit: Culprit,
    /// 0.0 ..= 1.0
    pub confidence: f64,
    /// The catalog signature that matched, if any.
    pub signature: Option<String>,
    pub explanation: String,
    /// Whether a requeue can help.
    pub recoverable: bool,
    /// The lines the attribution rests on.
    pub evidence: Vec<String>,
    /// The catalog's recommended steps, `kind: description`.
    pub recommended: Vec<String>,
}

/// One action of a failure's recovery.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionReport {
    pub id: ActionId,
    pub kind: ActionKind,
    pub state: ActionState,
    /// Whether the whitelist allows it without approval.
    pub permitted: bool,
    pub why: String,
    /// The exact command it runs or ran.
    pub command: Option<String>,
    /// What happened when it ran.
    pub result: Option<String>,
    pub planned_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    /// For an action not taken: why not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_taken_because: Option<String>,
}

/// The time from a failure to training again, split into gaps, and the work done again.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DowntimeReport {
    /// When the failed attempt stopped making progress.
    pub failed_at: DateTime<Utc>,
    /// The attempt that followed, once there is one.
    pub next_attempt: Option<u32>,
    /// The gaps that could be measured, in order (detection, analysis, requeue, pending, checkpoint
    /// load); one whose ends are not both known is left out.
    pub gaps: Vec<GapReport>,
    pub total_seconds: i64,
    /// Iteration of the checkpoint the next attempt resumes from; `None`: from the beginning.
    pub resumed_from: Option<u64>,
    /// Iterations done after that checkpoint, computed again.
    pub lost_iterations: u64,
    /// Running time after that checkpoint, which produced nothing kept.
    pub lost_seconds: i64,
}

/// One measured gap.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct GapReport {
    pub kind: GapKind,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
    pub seconds: i64,
    /// Still running: `end` is the report's time.
    pub ongoing: bool,
}

impl DowntimeReport {
    /// The measured gap of one kind.
    pub fn gap(&self, kind: GapKind) -> Option<&GapReport> {
        self.gaps.iter().find(|gap| gap.kind == kind)
    }
}

/// A warning: an anomaly that did not end the attempt.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WarningReport {
    pub anomaly_id: i64,
    pub time: DateTime<Utc>,
    pub attempt: u32,
    pub kind: AnomalyKind,
    pub summary: String,
}

/// A failure's narrative: written (and kept), or why there is none this time.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum NarrativeStatus {
    Written {
        /// [`NARRATIVE_LABEL`], so that a JSON reader cannot mistake it for runguard's own finding.
        label: &'static str,
        /// Which model wrote it, and where.
        source: String,
        text: String,
        created_at: DateTime<Utc>,
    },
    /// The endpoint was asked and gave nothing usable; the reason is redacted.
    Unavailable { reason: String },
}

impl Report {
    /// The report as JSON with every string value passed through `redactor`: evidence lines are the
    /// job's own output and may hold credentials.
    pub fn to_redacted_json(
        &self,
        redactor: &Redactor,
    ) -> Result<serde_json::Value, serde_json::Error> {
        let mut value = serde_json::to_value(self)?;
        redact_strings(&mut value, redactor);
        Ok(value)
    }
}

fn redact_strings(value: &mut serde_json::Value, redactor: &Redactor) {
    match value {
        serde_json::Value::String(text) => *text = redactor.redact(text),
        serde_json::Value::Array(items) => {
            for item in items {
                redact_strings(item, redactor);
            }
        }
        serde_json::Value::Object(fields) => {
            for (_, field) in fields.iter_mut() {
                redact_strings(field, redactor);
            }
        }
        serde_json::Value::Null | serde_json::Value::Bool(_) | serde_json::Value::Number(_) => {}
    }
}

/// The anomaly kinds that are failures: the attempt stopped making progress.
fn is_failure(kind: AnomalyKind) -> bool {
    matches!(
        kind,
        AnomalyKind::Crash | AnomalyKind::Hang | AnomalyKind::CrashLoop
    )
}

impl Report {
    /// The report of a workflow's history at `now`.
    ///
    /// Each crash or hang is one failure. A crash loop is raised beside the crash that completed it, on
    /// the same attempt: it is folded into that failure as the reason recovery stopped, and stands as a
    /// failure of its own only when its attempt has no crash or hang. A failure's attribution is the
    /// one of its attempt made closest in time to it, its actions those planned for its attempt.
    pub fn from_history(history: &WorkflowHistory, now: DateTime<Utc>) -> Self {
        let recoveries = downtime::recoveries(history, now);
        let mut anomalies: Vec<_> = history.anomalies.iter().collect();
        anomalies.sort_by_key(|anomaly| (anomaly.time, anomaly.id));
        let mut failures = Vec::new();
        let mut warnings = Vec::new();
        for anomaly in &anomalies {
            if !is_failure(anomaly.kind) {
                warnings.push(WarningReport {
                    anomaly_id: anomaly.id,
                    time: anomaly.time,
                    attempt: anomaly.attempt_index,
                    kind: anomaly.kind,
                    summary: anomaly.summary.clone(),
                });
                continue;
            }
            let stopped_a_failure = anomaly.kind == AnomalyKind::CrashLoop
                && anomalies.iter().any(|other| {
                    other.attempt_index == anomaly.attempt_index
                        && matches!(other.kind, AnomalyKind::Crash | AnomalyKind::Hang)
                });
            if stopped_a_failure {
                continue;
            }
            let crash_loop = anomalies
                .iter()
                .find(|other| {
                    other.kind == AnomalyKind::CrashLoop
                        && other.attempt_index == anomaly.attempt_index
                })
                .map(|other| other.summary.clone());
            failures.push(failure(
                history,
                anomaly,
                crash_loop,
                recoveries
                    .iter()
                    .find(|r| r.failed_attempt == anomaly.attempt_index),
            ));
        }
        let workflow = &history.workflow;
        let mut job_ids: Vec<String> = Vec::new();
        let mut attempts: Vec<_> = history.attempts.iter().collect();
        attempts.sort_by_key(|attempt| attempt.index);
        for attempt in attempts {
            if !job_ids.contains(&attempt.job_id) {
                job_ids.push(attempt.job_id.clone());
            }
        }
        Report {
            generated_at: now,
            workflow: WorkflowHeader {
                id: workflow.id,
                name: workflow.name.clone(),
                backend: workflow.backend.to_string(),
                job_ids,
                status: workflow.status,
                reason: workflow.status_reason.clone(),
                succeeded: workflow.succeeded,
                requeues_used: workflow.requeues_used,
                requeue_limit: history.requeue_limit,
                goodput: downtime::goodput(history, now).map(|g| GoodputReport {
                    ratio: g.ratio(),
                    useful_seconds: g.useful.num_seconds(),
                    running_seconds: g.running.num_seconds(),
                    lost_seconds: g.lost.num_seconds(),
                    wall_seconds: g.wall.num_seconds(),
                }),
                checkpoint_advice: advisor::of_history(history, now),
            },
            failures,
            warnings,
            phases: None,
        }
    }
}

fn failure(
    history: &WorkflowHistory,
    anomaly: &crate::model::Anomaly,
    crash_loop: Option<String>,
    recovery: Option<&Recovery>,
) -> FailureReport {
    let attempt = history
        .attempts
        .iter()
        .find(|attempt| attempt.index == anomaly.attempt_index);
    let attribution = history
        .attributions
        .iter()
        .filter(|a| a.attempt_index == anomaly.attempt_index)
        .min_by_key(|a| (a.time - anomaly.time).abs())
        .map(|a| AttributionReport {
            category: a.category.clone(),
            component: a.component,
            culprit: a.culprit.clone(),
            confidence: a.confidence,
            signature: a.signature.clone(),
            explanation: a.explanation.clone(),
            recoverable: a.recoverable,
            evidence: a.evidence.clone(),
            recommended: a
                .remedies
                .iter()
                .map(|remedy| format!("{}: {}", remedy.kind, remedy.description))
                .collect(),
        });
    let active = history.workflow.status.is_active();
    let (mut actions_taken, mut actions_not_taken) = (Vec::new(), Vec::new());
    for action in history
        .actions
        .iter()
        .filter(|action| action.attempt_index == anomaly.attempt_index)
    {
        let not_taken_because = not_taken_because(action, active);
        let report = ActionReport {
            id: action.id,
            kind: action.kind,
            state: action.state,
            permitted: action.permitted,
            why: action.why.clone(),
            command: action.command.clone(),
            result: action.result.clone(),
            planned_at: action.created_at,
            updated_at: action.updated_at,
            not_taken_because: not_taken_because.clone(),
        };
        if not_taken_because.is_some() {
            actions_not_taken.push(report);
        } else {
            actions_taken.push(report);
        }
    }
    let narrative = history
        .narratives
        .iter()
        .find(|narrative| narrative.anomaly_id == anomaly.id)
        .map(|narrative| NarrativeStatus::Written {
            label: NARRATIVE_LABEL,
            source: narrative.source.clone(),
            text: narrative.text.clone(),
            created_at: narrative.created_at,
        });
    FailureReport {
        anomaly_id: anomaly.id,
        time: anomaly.time,
        attempt: anomaly.attempt_index,
        job_id: attempt.map(|a| a.job_id.clone()),
        nodes: attempt.map(|a| a.nodes.clone()).unwrap_or_default(),
        state: attempt.map(|a| a.state_raw.clone()),
        exit_code: attempt.and_then(|a| a.exit_code),
        kind: anomaly.kind,
        summary: anomaly.summary.clone(),
        evidence: anomaly.evidence.clone(),
        attribution,
        crash_loop,
        actions_taken,
        actions_not_taken,
        downtime: recovery.map(downtime_report),
        narrative,
    }
}

/// Why an action was not taken; `None` for one runguard ran, runs, or went to run and found moot.
fn not_taken_because(action: &crate::model::Action, active: bool) -> Option<String> {
    let whitelist = if action.permitted {
        None
    } else {
        Some("not in the recovery whitelist")
    };
    let decision = match action.state {
        ActionState::Proposed if active => {
            format!("waiting for approval (`runguard approve {}`)", action.id)
        }
        ActionState::Proposed => "never approved".to_string(),
        ActionState::Rejected => "rejected by a user".to_string(),
        ActionState::Approved
        | ActionState::Executing
        | ActionState::Done
        | ActionState::Failed
        | ActionState::Superseded => return None,
    };
    Some(match whitelist {
        Some(whitelist) => format!("{whitelist}; {decision}"),
        None if action.state == ActionState::Proposed => {
            format!("the engine runs without --auto; {decision}")
        }
        None => decision,
    })
}

fn downtime_report(recovery: &Recovery) -> DowntimeReport {
    DowntimeReport {
        failed_at: recovery.failed_at,
        next_attempt: recovery.next_attempt,
        gaps: recovery
            .gaps
            .iter()
            .map(|gap| GapReport {
                kind: gap.kind,
                start: gap.start,
                end: gap.end,
                seconds: gap.duration().num_seconds(),
                ongoing: gap.ongoing,
            })
            .collect(),
        total_seconds: recovery.total().num_seconds(),
        resumed_from: recovery.resumed_from,
        lost_iterations: recovery.lost_iterations,
        lost_seconds: recovery.lost_time.num_seconds(),
    }
}

/// The report of the workflow `id`, read from the store; `None` when there is no such workflow.
///
/// It is made at `now`, or at the latest time the history records when that is later: the simulated
/// cluster's clock runs ahead of the wall clock, and a report made before what it reports would show
/// negative gaps.
pub fn build(
    db: &Db<'_>,
    policy: &Policy,
    id: WorkflowId,
    now: DateTime<Utc>,
) -> Result<Option<Report>, StoreError> {
    let Some(history) = WorkflowHistory::load(db, policy, id)? else {
        return Ok(None);
    };
    let now = history
        .latest_record()
        .map_or(now, |latest| latest.max(now));
    let mut report = Report::from_history(&history, now);
    report.phases = phases::of_workflow(db, id)?;
    Ok(Some(report))
}

/// The workflow a user means by `reference`: a workflow id, else a scheduler job id one of its attempts
/// ran as, on any backend (the highest workflow id when several backends know the job id). `None`
/// when nothing matches.
pub fn resolve(db: &Db<'_>, reference: &str) -> Result<Option<WorkflowId>, StoreError> {
    let reference = reference.trim();
    if let Ok(id) = reference.parse::<WorkflowId>()
        && db.workflow(id)?.is_some()
    {
        return Ok(Some(id));
    }
    let mut backends: Vec<BackendKind> = db.workflows()?.into_iter().map(|w| w.backend).collect();
    backends.sort();
    backends.dedup();
    let mut found: Option<WorkflowId> = None;
    for backend in backends {
        if let Some(attempt) = db.attempt_by_job(backend.as_str(), reference)? {
            found = found.max(Some(attempt.workflow_id));
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests;
