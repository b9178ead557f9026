//! The phases section of a report, when the workflow is one phase of a multiphase workflow: every
//! phase with its state, its jobs and why it failed or was skipped, so that a reader sees where in
//! the whole run this failure happened and what it stopped.

use serde::Serialize;

use crate::model::{MultiphaseState, PhaseState, WorkflowId};
use crate::store::{Db, StoreError};

/// The multiphase workflow a report's workflow belongs to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhasesReport {
    pub multiphase_id: i64,
    pub name: String,
    pub state: MultiphaseState,
    pub reason: Option<String>,
    pub phases: Vec<PhaseLine>,
}

/// One phase in the report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseLine {
    pub name: String,
    pub state: PhaseState,
    pub workflow_id: Option<WorkflowId>,
    /// The job ids of its attempts, each once.
    pub job_ids: Vec<String>,
    pub attempts: u32,
    pub reason: Option<String>,
    /// This phase is the report's workflow.
    pub this_report: bool,
}

/// The phases section for `workflow_id`, when it is a phase's run.
pub fn of_workflow(
    db: &Db<'_>,
    workflow_id: WorkflowId,
) -> Result<Option<PhasesReport>, StoreError> {
    let Some(phase) = db.phase_of_workflow(workflow_id)? else {
        return Ok(None);
    };
    let Some(multiphase) = db.multiphase(phase.multiphase_id)? else {
        return Ok(None);
    };
    let mut phases = Vec::new();
    for phase in db.phases(multiphase.id)? {
        let mut job_ids = Vec::new();
        let mut attempts = 0;
        if let Some(id) = phase.workflow_id {
            for attempt in db.attempts(id)? {
                attempts += 1;
                if !job_ids.contains(&attempt.job_id) {
                    job_ids.push(attempt.job_id);
                }
            }
        }
        phases.push(PhaseLine {
            name: phase.spec.name,
            state: phase.state,
            workflow_id: phase.workflow_id,
            job_ids,
            attempts,
            reason: phase.reason,
            this_report: phase.workflow_id == Some(workflow_id),
        });
    }
    Ok(Some(PhasesReport {
        multiphase_id: multiphase.id,
        name: multiphase.name,
        state: multiphase.state,
        reason: multiphase.reason,
        phases,
    }))
}

/// The section as lines of text, one a phase; `bullet` starts each (`  ` for text, `- ` for Markdown).
pub fn lines(report: &PhasesReport, bullet: &str) -> Vec<String> {
    report
        .phases
        .iter()
        .enumerate()
        .map(|(index, phase)| {
            format!(
                "{bullet}{}. {} — {}{}{}{}",
                index + 1,
                phase.name,
                phase.state.as_str(),
                if phase.job_ids.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (job {}, {} attempt{})",
                        phase.job_ids.join(", "),
                        phase.attempts,
                        if phase.attempts == 1 { "" } else { "s" }
                    )
                },
                phase
                    .reason
                    .as_deref()
                    .map(|reason| format!(": {reason}"))
                    .unwrap_or_default(),
                if phase.this_report {
                    "  ← this report"
                } else {
                    ""
                }
            )
        })
        .collect()
}
