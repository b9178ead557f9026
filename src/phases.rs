//! Multiphase workflows as `status` and the cockpit show them: each phase with its state, the job
//! ids its attempts ran as, its failures since its last checkpoint and that checkpoint.

use std::fmt::Write as _;
use std::path::PathBuf;

use runguard_engine::model::{Multiphase, Phase, PhaseState};
use runguard_engine::store::{Db, StoreError};

/// One multiphase workflow as `status` shows it: its phases with their runs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct MultiphaseView {
    #[serde(flatten)]
    pub multiphase: Multiphase,
    pub phases: Vec<PhaseView>,
}

/// One phase as `status` shows it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PhaseView {
    pub index: u32,
    pub name: String,
    pub state: PhaseState,
    pub reason: Option<String>,
    /// The workflow that follows its job (see `workflows`), once submitted.
    pub workflow_id: Option<i64>,
    /// Every job id its attempts ran as, in order.
    pub job_ids: Vec<String>,
    pub attempts: u32,
    /// Consecutive failed attempts since its last new checkpoint.
    pub failures_since_checkpoint: u32,
    pub last_checkpoint_iteration: Option<u64>,
    pub checkpoint_dir: Option<PathBuf>,
}

/// Every multiphase workflow with its phases.
pub fn views(db: &Db<'_>) -> Result<Vec<MultiphaseView>, StoreError> {
    let mut views = Vec::new();
    for multiphase in db.multiphases()? {
        let mut phases = Vec::new();
        for phase in db.phases(multiphase.id)? {
            phases.push(phase_view(db, phase)?);
        }
        views.push(MultiphaseView { multiphase, phases });
    }
    Ok(views)
}

fn phase_view(db: &Db<'_>, phase: Phase) -> Result<PhaseView, StoreError> {
    let mut job_ids = Vec::new();
    let mut attempts = 0;
    let mut failures = 0;
    let mut last_checkpoint = None;
    if let Some(workflow_id) = phase.workflow_id {
        for attempt in db.attempts(workflow_id)? {
            attempts += 1;
            if !job_ids.contains(&attempt.job_id) {
                job_ids.push(attempt.job_id);
            }
        }
        if let Some(workflow) = db.workflow(workflow_id)? {
            failures = workflow.failures_since_checkpoint;
        }
        last_checkpoint = db.workflow_summary(workflow_id)?.last_checkpoint_iteration;
    }
    if job_ids.is_empty()
        && let Some(job_id) = &phase.job_id
    {
        job_ids.push(job_id.clone());
    }
    Ok(PhaseView {
        index: phase.index,
        name: phase.spec.name,
        state: phase.state,
        reason: phase.reason,
        workflow_id: phase.workflow_id,
        job_ids,
        attempts,
        failures_since_checkpoint: failures,
        last_checkpoint_iteration: last_checkpoint,
        checkpoint_dir: phase.spec.checkpoint_dir,
    })
}

/// The phases of every multiphase workflow as table lines.
pub fn render(views: &[MultiphaseView]) -> String {
    let mut out = String::new();
    for view in views {
        let state = view.multiphase.state.as_str();
        let _ = writeln!(
            out,
            "multiphase {} {} [{state}]{}",
            view.multiphase.id,
            view.multiphase.name,
            view.multiphase
                .reason
                .as_deref()
                .map(|reason| format!(": {reason}"))
                .unwrap_or_default()
        );
        for phase in &view.phases {
            let _ = writeln!(
                out,
                "  {}. {:<16} {:<10} jobs {:<12} attempts {} failures {}{}{}",
                phase.index + 1,
                phase.name,
                phase.state.as_str(),
                if phase.job_ids.is_empty() {
                    "-".to_string()
                } else {
                    phase.job_ids.join(",")
                },
                phase.attempts,
                phase.failures_since_checkpoint,
                phase
                    .last_checkpoint_iteration
                    .map(|it| format!(" checkpoint {it}"))
                    .unwrap_or_default(),
                phase
                    .reason
                    .as_deref()
                    .map(|reason| format!(" ({reason})"))
                    .unwrap_or_default()
            );
        }
    }
    out
}
