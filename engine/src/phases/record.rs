//! The records a phase's submission leaves, the same whether `runguard submit` submits the first
//! phase or the engine a later one: the workflow that will follow the phase's job and the `submit`
//! action, both stored before anything is submitted, so that a submission cut short is found again by
//! its tag and never made twice.

use chrono::{DateTime, Utc};

use super::{CHECKPOINT_DIR_ENV, PHASE_ENV, WorkflowFile};
use crate::backend::NewJob;
use crate::model::{
    Action, ActionKind, ActionParams, ActionState, BackendKind, JobSpec, Multiphase, MultiphaseId,
    MultiphaseState, Phase, PhaseJob, PhaseState, RecoveryLimits, Workflow, WorkflowId,
};
use crate::store::{Db, StoreError};

/// Stores a multiphase workflow read from `source`, every phase waiting.
pub fn store_multiphase(
    db: &Db<'_>,
    file: &WorkflowFile,
    backend: BackendKind,
    source: Option<&std::path::Path>,
    now: DateTime<Utc>,
) -> Result<MultiphaseId, StoreError> {
    let multiphase = Multiphase {
        id: 0,
        name: file.name.clone(),
        backend,
        source: source.map(std::path::Path::to_path_buf),
        state: MultiphaseState::Running,
        reason: None,
        created_at: now,
        updated_at: now,
    };
    let id = db.insert_multiphase(&multiphase, &file.phases)?;
    db.journal(
        None,
        now,
        &format!(
            "multiphase workflow {id} ({}) stored with {} phases: {}",
            file.name,
            file.phases.len(),
            file.phases
                .iter()
                .map(|phase| phase.name.as_str())
                .collect::<Vec<_>>()
                .join(" → ")
        ),
        &[],
    )?;
    Ok(id)
}

/// The name a phase's job runs under: the workflow's and the phase's.
pub fn job_name(multiphase: &Multiphase, phase: &Phase) -> String {
    format!("{}.{}", multiphase.name, phase.spec.name)
}

/// The job runguard submits for `phase`, whose run `workflow_id` follows.
pub fn new_job(multiphase: &Multiphase, phase: &Phase, workflow_id: WorkflowId) -> NewJob {
    let spec = &phase.spec;
    let mut env = vec![(PHASE_ENV.to_string(), spec.name.clone())];
    if let Some(dir) = &spec.checkpoint_dir {
        env.push((CHECKPOINT_DIR_ENV.to_string(), dir.display().to_string()));
    }
    NewJob {
        name: job_name(multiphase, phase),
        job: spec.job.clone(),
        tag: crate::engine::attempt_tag(workflow_id, 0),
        nodes: spec.nodes,
        min_nodes: spec.min_nodes,
        max_requeue_times: None,
        work_dir: spec.work_dir.clone(),
        env,
    }
}

/// What is to be submitted, once recorded.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub action: Action,
    pub job: NewJob,
}

/// Records the submission of `phase`: the workflow that will follow its job, the `submit` action in
/// `state` (`approved` when the whitelist lets it run, `executing` when the user's own `runguard
/// submit` runs it at once, `proposed` otherwise), and the phase as submitting.
#[allow(clippy::too_many_arguments)]
pub fn prepare(
    db: &Db<'_>,
    describe: impl FnOnce(&NewJob) -> String,
    multiphase: &Multiphase,
    phase: &mut Phase,
    state: ActionState,
    permitted: bool,
    why: String,
    now: DateTime<Utc>,
) -> Result<Prepared, StoreError> {
    let script = match &phase.spec.job {
        PhaseJob::Batch { script, .. } => script.display().to_string(),
        PhaseJob::Manifest { path } => path.display().to_string(),
    };
    let workflow = Workflow::enrolled(
        job_name(multiphase, phase),
        multiphase.backend,
        JobSpec {
            name: job_name(multiphase, phase),
            nodes: phase.spec.nodes.unwrap_or(0),
            command: Some(script),
            work_dir: phase
                .spec
                .work_dir
                .as_ref()
                .map(|dir| dir.display().to_string()),
            ..JobSpec::default()
        },
        RecoveryLimits {
            auto_resume_mode: Some("requeue".to_string()),
            ..RecoveryLimits::default()
        },
        now,
    );
    let workflow_id = db.insert_workflow(&workflow)?;
    let job = new_job(multiphase, phase, workflow_id);
    let command = describe(&job);
    let mut action = Action {
        id: 0,
        workflow_id,
        attempt_index: 0,
        kind: ActionKind::Submit,
        params: ActionParams {
            reason: Some(format!("phase {} of {}", phase.spec.name, multiphase.name)),
            ..ActionParams::default()
        },
        state,
        permitted,
        why,
        command: Some(command.clone()),
        result: None,
        created_at: now,
        updated_at: now,
    };
    action.id = db.insert_action(&action)?;
    phase.state = PhaseState::Submitting;
    phase.workflow_id = Some(workflow_id);
    phase.updated_at = now;
    db.update_phase(phase)?;
    db.journal(
        Some(workflow_id),
        now,
        &format!(
            "phase {} ({} of {}) of {}: action {} submit ({}); command: {command}",
            phase.spec.name,
            phase.index + 1,
            db.phases(multiphase.id)?.len(),
            multiphase.name,
            action.id,
            state.as_str()
        ),
        &[],
    )?;
    Ok(Prepared { action, job })
}

/// Records the job id a phase's submission was given.
pub fn submitted(
    db: &Db<'_>,
    workflow_id: WorkflowId,
    job_id: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    if let Some(mut phase) = db.phase_of_workflow(workflow_id)? {
        phase.state = PhaseState::Running;
        phase.job_id = Some(job_id.to_string());
        phase.updated_at = now;
        db.update_phase(&phase)?;
    }
    Ok(())
}

/// Makes the phase's checkpoint directory, so that its job finds it on its first start.
pub fn make_checkpoint_dir(job: &NewJob) -> Result<(), String> {
    let Some((_, dir)) = job.env.iter().find(|(name, _)| name == CHECKPOINT_DIR_ENV) else {
        return Ok(());
    };
    std::fs::create_dir_all(dir)
        .map_err(|err| format!("cannot create the checkpoint directory {dir}: {err}"))
}
