//! A read-only view of the store for `runguard status`: a table for people, JSON for scripts.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::Serialize;

use runguard_engine::model::{
    Action, Anomaly, Attempt, Attribution, JournalEntry, Notification, Workflow,
};
use runguard_engine::recover::Policy;
use runguard_engine::report::WorkflowHistory;
use runguard_engine::report::advisor::{self, Advice};
use runguard_engine::store::{Db, StoreError};
use runguard_engine::text::ellipsize;

/// Everything known about one workflow.
#[derive(Debug, Clone, Serialize)]
pub struct WorkflowView {
    #[serde(flatten)]
    pub workflow: Workflow,
    /// min(system, job) requeues.
    pub requeue_limit: u32,
    pub checkpoints: u32,
    pub last_checkpoint_iteration: Option<u64>,
    pub attempts: Vec<Attempt>,
    pub anomalies: Vec<Anomaly>,
    pub attributions: Vec<Attribution>,
    pub actions: Vec<Action>,
    /// Every decision the engine took about it, with its evidence.
    pub journal: Vec<JournalEntry>,
    /// The checkpoint interval advisor's figures, once a save's cost and a failure rate are known.
    pub checkpoint_advice: Option<Advice>,
}

/// The whole status report.
#[derive(Debug, Clone, Serialize)]
pub struct StatusReport {
    pub store: String,
    pub workflows: Vec<WorkflowView>,
    /// Multiphase workflows with their phases (`runguard submit`).
    pub multiphases: Vec<crate::phases::MultiphaseView>,
    pub notifications: Vec<Notification>,
    /// Skipped input and failed calls, counted: (kind, count, last message).
    pub warnings: Vec<(String, u64, String)>,
}

/// Builds the report, optionally for one workflow only.
pub fn report(
    db: &Db<'_>,
    store: &str,
    policy: &Policy,
    only: Option<i64>,
) -> Result<StatusReport, StoreError> {
    // One read transaction: one state of the store, and its locks taken once, not per query.
    db.reading(|db| report_of(db, store, policy, only))
}

fn report_of(
    db: &Db<'_>,
    store: &str,
    policy: &Policy,
    only: Option<i64>,
) -> Result<StatusReport, StoreError> {
    let mut workflows = Vec::new();
    for workflow in db.workflows()? {
        if only.is_some_and(|id| id != workflow.id) {
            continue;
        }
        let summary = db.workflow_summary(workflow.id)?;
        // The history the advisor reads holds the rows shown too: they are read once.
        let Some(history) = WorkflowHistory::load(db, policy, workflow.id)? else {
            continue;
        };
        // Advised as of the workflow's last record: the simulated cluster keeps a clock of its own.
        let now = history
            .latest_record()
            .unwrap_or(history.workflow.updated_at);
        let checkpoint_advice = advisor::of_history(&history, now);
        workflows.push(WorkflowView {
            requeue_limit: policy.requeue_limit(&workflow),
            checkpoints: summary.checkpoints,
            last_checkpoint_iteration: summary.last_checkpoint_iteration,
            attempts: history.attempts,
            anomalies: history.anomalies,
            attributions: history.attributions,
            actions: history.actions,
            journal: history.journal,
            checkpoint_advice,
            workflow,
        });
    }
    let notifications = db
        .notifications(20)?
        .into_iter()
        .filter(|n| only.is_none() || n.workflow_id == only)
        .collect();
    let multiphases = crate::phases::views(db)?
        .into_iter()
        .filter(|view| {
            only.is_none_or(|id| {
                view.phases
                    .iter()
                    .any(|phase| phase.workflow_id == Some(id))
            })
        })
        .collect();
    Ok(StatusReport {
        store: store.to_string(),
        workflows,
        multiphases,
        notifications,
        warnings: db.warnings()?,
    })
}

fn duration(
    start: Option<DateTime<Utc>>,
    end: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> String {
    let Some(start) = start else {
        return "-".to_string();
    };
    let seconds = (end.unwrap_or(now) - start).num_seconds().max(0);
    format!(
        "{:02}:{:02}:{:02}",
        seconds / 3600,
        seconds / 60 % 60,
        seconds % 60
    )
}

/// The report as a table for a terminal.
pub fn render_table(report: &StatusReport, now: DateTime<Utc>) -> String {
    let mut out = String::new();
    if report.workflows.is_empty() {
        let _ = writeln!(out, "No workflows in {} yet.", report.store);
        return out;
    }
    out.push_str(&crate::phases::render(&report.multiphases));
    for view in &report.workflows {
        let w = &view.workflow;
        let _ = writeln!(
            out,
            "workflow {} {} [{}] {}{}",
            w.id,
            w.name,
            w.backend,
            w.status.as_str(),
            w.status_reason
                .as_deref()
                .map(|r| format!(" — {r}"))
                .unwrap_or_default()
        );
        let _ = writeln!(
            out,
            "  requeues {}/{}  failures since checkpoint {}  checkpoints {}{}",
            w.requeues_used,
            view.requeue_limit,
            w.failures_since_checkpoint,
            view.checkpoints,
            view.last_checkpoint_iteration
                .map(|i| format!(" (last at iteration {i})"))
                .unwrap_or_default()
        );
        let _ = writeln!(
            out,
            "  {:<4} {:<8} {:<11} {:<16} {:>5} {:<9} {:>9} {:>6}  NODES",
            "ATT", "JOB", "STATE", "REASON", "GPUS", "DURATION", "ITERATION", "EXIT"
        );
        for a in &view.attempts {
            let marker = if view.anomalies.iter().any(|x| x.attempt_index == a.index) {
                "▲"
            } else {
                " "
            };
            let _ = writeln!(
                out,
                "  {:<4} {:<8} {:<11} {:<16} {:>5} {:<9} {:>9} {:>6}  {}{}",
                a.index,
                a.job_id,
                format!("{}{marker}", a.state_raw),
                a.reason.as_deref().unwrap_or("-"),
                a.gpus,
                duration(a.start_time, a.end_time, now),
                a.last_iteration.map_or("-".to_string(), |i| i.to_string()),
                a.exit_code.map_or("-".to_string(), |c| c.to_string()),
                a.nodes.join(","),
                if a.excluded_nodes.is_empty() {
                    String::new()
                } else {
                    format!("  (excluding {})", a.excluded_nodes.join(","))
                }
            );
        }
        for anomaly in &view.anomalies {
            let _ = writeln!(
                out,
                "  ▲ attempt {} {}: {}",
                anomaly.attempt_index,
                anomaly.kind.as_str(),
                anomaly.summary
            );
        }
        for attribution in &view.attributions {
            let _ = writeln!(
                out,
                "  ⇒ attempt {}: {} ({}) culprit {} confidence {:.0}% {}",
                attribution.attempt_index,
                attribution.category,
                attribution.component.as_str(),
                attribution.culprit.node.as_deref().unwrap_or("unknown"),
                attribution.confidence * 100.0,
                if attribution.recoverable {
                    "recoverable"
                } else {
                    "not recoverable"
                }
            );
            for line in attribution.evidence.iter().take(4) {
                let _ = writeln!(out, "      │ {}", ellipsize(line, 140));
            }
        }
        for action in &view.actions {
            let _ = writeln!(
                out,
                "  action {} {} [{}{}] {}{}",
                action.id,
                action.kind.as_str(),
                action.state.as_str(),
                if action.permitted {
                    ""
                } else {
                    ", not whitelisted"
                },
                action.why,
                action
                    .result
                    .as_deref()
                    .map(|r| format!(" → {r}"))
                    .unwrap_or_default()
            );
        }
        out.push('\n');
    }
    for (kind, count, last) in &report.warnings {
        let _ = writeln!(
            out,
            "warning {kind}: {count} (last: {})",
            ellipsize(last, 120)
        );
    }
    out
}
