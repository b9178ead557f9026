//! Multiphase workflows on the scripted scheduler: a phase is submitted only once the one before it
//! succeeded and only as the whitelist allows, a phase's own failure limit applies to its run, a
//! phase failing for good skips the rest, and a submission cut short is found again, never repeated.

use runguard_engine::backend::{ActionOutcome, Backend, BackendError, JobSnapshot};
use runguard_engine::model::{
    ActionKind, ActionState, BackendKind, JobState, MultiphaseState, PhaseJob, PhaseSpec,
    PhaseState,
};
use runguard_engine::phases::{WorkflowFile, record};
use runguard_engine::store::CommandKind;

use crate::support::backend::{Call, Script};
use crate::support::rig::EngineRig;

/// A scheduler whose requeue starts the job again under its id, off the excluded nodes.
struct Requeuing;

impl Script for Requeuing {
    fn requeue(
        &self,
        jobs: &mut [JobSnapshot],
        job_id: &str,
        exclude: &[String],
    ) -> Result<ActionOutcome, BackendError> {
        let job = jobs
            .iter_mut()
            .find(|job| job.job_id == job_id)
            .ok_or_else(|| BackendError::NoSuchJob(job_id.into()))?;
        job.restart_count += 1;
        job.state = JobState::Running;
        job.state_raw = "RUNNING".into();
        job.exit_code = None;
        job.end_time = None;
        job.excluded_nodes = exclude.to_vec();
        Ok(ActionOutcome {
            detail: format!("requeued job {job_id}"),
            new_job_id: None,
        })
    }
}

fn phase(name: &str, max_failures: Option<u32>) -> PhaseSpec {
    PhaseSpec {
        name: name.into(),
        job: PhaseJob::Batch {
            script: format!("/w/{name}.sbatch").into(),
            args: vec![],
            sbatch_args: vec![],
        },
        nodes: Some(2),
        min_nodes: None,
        max_failures,
        checkpoint_dir: None,
        work_dir: None,
    }
}

/// Stores the workflow `llama` of `phases` (all waiting) as `runguard submit` would.
fn store(rig: &EngineRig, phases: Vec<PhaseSpec>) -> i64 {
    let file = WorkflowFile {
        name: "llama".into(),
        phases,
    };
    let now = rig.now();
    rig.store()
        .write(|db| record::store_multiphase(db, &file, BackendKind::Slurm, None, now))
        .unwrap()
}

fn submissions(rig: &EngineRig) -> Vec<String> {
    rig.backend
        .calls()
        .into_iter()
        .filter_map(|recorded| match recorded.call {
            Call::Submit { name, .. } => Some(name),
            _ => None,
        })
        .collect()
}

fn phase_states(rig: &EngineRig, id: i64) -> Vec<PhaseState> {
    rig.store()
        .db()
        .phases(id)
        .unwrap()
        .iter()
        .map(|phase| phase.state)
        .collect()
}

/// The job id of phase `index`, once known.
fn job_of(rig: &EngineRig, id: i64, index: usize) -> String {
    rig.store().db().phases(id).unwrap()[index]
        .job_id
        .clone()
        .unwrap_or_default()
}

fn complete(rig: &EngineRig, job_id: &str) {
    rig.backend.update(job_id, |job| {
        job.state = JobState::Completed;
        job.state_raw = "COMPLETED".into();
        job.exit_code = Some(0);
    });
}

fn run_on(rig: &EngineRig, job_id: &str, nodes: &[&str]) {
    rig.backend.update(job_id, |job| {
        job.state = JobState::Running;
        job.state_raw = "RUNNING".into();
        job.nodes = nodes.iter().map(|node| node.to_string()).collect();
    });
}

#[tokio::test]
async fn without_submit_in_the_whitelist_each_phase_waits_for_approval() {
    let rig = EngineRig::default();
    assert!(!rig.config.recovery.whitelist.contains(&ActionKind::Submit));
    let id = store(&rig, vec![phase("pretrain", None), phase("eval", None)]);
    let mut engine = rig.engine();
    rig.step(&mut engine, 5).await;
    assert!(submissions(&rig).is_empty());
    let proposed: Vec<_> = rig
        .status()
        .workflows
        .iter()
        .flat_map(|w| w.actions.clone())
        .filter(|action| action.kind == ActionKind::Submit)
        .collect();
    assert_eq!(proposed.len(), 1);
    assert_eq!(proposed[0].state, ActionState::Proposed);
    assert_eq!(phase_states(&rig, id)[0], PhaseState::Submitting);

    rig.command(CommandKind::Approve, proposed[0].id);
    rig.step(&mut engine, 5).await;
    assert_eq!(submissions(&rig), ["llama.pretrain"]);
    rig.step(&mut engine, 5).await;
    let job = job_of(&rig, id, 0);
    assert_eq!(phase_states(&rig, id)[0], PhaseState::Running);
    // The job runguard submitted is followed by the phase's own workflow.
    let status = rig.status();
    let pretrain = status
        .workflows
        .iter()
        .find(|w| w.workflow.name == "llama.pretrain")
        .unwrap();
    assert_eq!(pretrain.attempts[0].job_id, job);

    run_on(&rig, &job, &["n1", "n2"]);
    rig.step(&mut engine, 5).await;
    complete(&rig, &job);
    rig.step(&mut engine, 5).await;
    assert_eq!(
        phase_states(&rig, id),
        [PhaseState::Succeeded, PhaseState::Submitting]
    );
    // The next phase too waits for a human.
    assert_eq!(submissions(&rig), ["llama.pretrain"]);
}

#[tokio::test]
async fn each_phase_starts_after_the_previous_one_and_a_phase_failing_for_good_skips_the_rest() {
    let mut rig = EngineRig::new(Requeuing);
    rig.config.recovery.whitelist = vec![ActionKind::Requeue, ActionKind::Submit];
    rig.config.recovery.crash_loop_threshold = 10;
    // Phase 2 may restart once without a new checkpoint; the second failure stops it.
    let id = store(
        &rig,
        vec![
            phase("pretrain", None),
            phase("extend", Some(1)),
            phase("eval", None),
        ],
    );
    let mut engine = rig.engine();
    rig.step(&mut engine, 5).await;
    rig.step(&mut engine, 5).await;
    let pretrain = job_of(&rig, id, 0);
    run_on(&rig, &pretrain, &["n1", "n2"]);
    rig.step(&mut engine, 5).await;
    rig.step(&mut engine, 5).await;
    assert_eq!(
        submissions(&rig),
        ["llama.pretrain"],
        "no phase before its turn"
    );

    complete(&rig, &pretrain);
    rig.step(&mut engine, 5).await;
    assert_eq!(submissions(&rig), ["llama.pretrain", "llama.extend"]);
    rig.step(&mut engine, 5).await;
    let extend = job_of(&rig, id, 1);
    run_on(&rig, &extend, &["n1", "n2"]);
    rig.step(&mut engine, 5).await;

    // The first failure is restarted: the phase's limit allows one restart.
    rig.backend.update(&extend, |job| {
        job.state = JobState::NodeFail;
        job.state_raw = "NODE_FAIL".into();
    });
    rig.step(&mut engine, 5).await;
    rig.step(&mut engine, 5).await;
    assert_eq!(
        rig.backend.requeues().len(),
        1,
        "{:#?}",
        rig.status().workflows
    );
    assert_eq!(phase_states(&rig, id)[1], PhaseState::Running);

    // The second, without a new checkpoint in between, stops the phase and with it the workflow.
    rig.step(&mut engine, 5).await;
    rig.backend.update(&extend, |job| {
        job.state = JobState::NodeFail;
        job.state_raw = "NODE_FAIL".into();
    });
    for _ in 0..3 {
        rig.step(&mut engine, 5).await;
    }
    assert_eq!(rig.backend.requeues().len(), 1);
    assert_eq!(
        phase_states(&rig, id),
        [
            PhaseState::Succeeded,
            PhaseState::Failed,
            PhaseState::Skipped
        ]
    );
    let phases = rig.store().db().phases(id).unwrap();
    let failed = phases[1].reason.clone().unwrap_or_default();
    assert!(failed.contains("crash loop"), "{failed}");
    let skipped = phases[2].reason.clone().unwrap_or_default();
    assert!(skipped.contains("\"extend\" failed"), "{skipped}");
    assert!(phases[2].workflow_id.is_none());
    let multiphase = rig.store().db().multiphase(id).unwrap().unwrap();
    assert_eq!(multiphase.state, MultiphaseState::Failed);
    assert_eq!(submissions(&rig), ["llama.pretrain", "llama.extend"]);
    assert!(engine.settled().unwrap());
    // The report of the failed phase's run places it among the phases.
    let policy = runguard_engine::recover::Policy::from_config(&rig.config.recovery, false);
    let extend_run = phases[1].workflow_id.unwrap();
    let report = runguard_engine::report::build(&rig.store().db(), &policy, extend_run, rig.now())
        .unwrap()
        .unwrap();
    let text = runguard_engine::report::render::text(&report);
    assert!(text.contains("Phases of llama (failed"), "{text}");
    assert!(text.contains("2. extend — failed"), "{text}");
    assert!(text.contains("← this report"), "{text}");
    assert!(text.contains("3. eval — skipped"), "{text}");
}

#[tokio::test]
async fn a_submission_cut_short_is_found_by_its_tag_and_not_made_again() {
    let mut rig = EngineRig::default();
    rig.config.recovery.whitelist = vec![ActionKind::Submit];
    let id = store(&rig, vec![phase("pretrain", None)]);
    // As `runguard submit` does: recorded as executing, submitted, and then the process dies before
    // it records the job id.
    let now = rig.now();
    let prepared = rig
        .store()
        .write(|db| {
            let multiphase = db.multiphase(id)?.unwrap();
            let mut first = db.phases(id)?.remove(0);
            record::prepare(
                db,
                |job| format!("submit {}", job.name),
                &multiphase,
                &mut first,
                ActionState::Executing,
                true,
                "asked by the user".into(),
                now,
            )
        })
        .unwrap();
    rig.backend.submit(&prepared.job).await.unwrap();
    assert_eq!(submissions(&rig).len(), 1);

    let mut engine = rig.engine();
    engine.reconcile().unwrap();
    rig.step(&mut engine, 5).await;
    rig.step(&mut engine, 5).await;
    assert_eq!(submissions(&rig).len(), 1, "submitted twice");
    let action = rig
        .store()
        .db()
        .action(prepared.action.id)
        .unwrap()
        .unwrap();
    assert_eq!(action.state, ActionState::Done, "{action:#?}");
    assert!(
        action
            .result
            .as_deref()
            .unwrap_or_default()
            .contains("already submitted"),
        "{action:#?}"
    );
    assert_eq!(phase_states(&rig, id), [PhaseState::Running]);
    assert_eq!(job_of(&rig, id, 0), "new-0");
}

/// On the simulated cluster, a phase's script names the scenario workload it runs.
#[cfg(feature = "sim")]
#[tokio::test]
async fn on_the_simulated_cluster_the_phases_run_one_after_the_other_to_success() {
    let mut rig = EngineRig::default();
    rig.config.recovery.whitelist = vec![ActionKind::Requeue, ActionKind::Submit];
    let sim = rig.sim("healthy", 7);
    let mut first = phase("bert-large-finetune", None);
    let mut second = phase("llama3-8b-pretrain", None);
    first.nodes = Some(2);
    second.nodes = Some(4);
    let file = WorkflowFile {
        name: "chain".into(),
        phases: vec![first, second],
    };
    let now = rig.now();
    let id = rig
        .store()
        .write(|db| record::store_multiphase(db, &file, BackendKind::Sim, None, now))
        .unwrap();
    let mut engine = rig.engine_over(sim, true);
    let status = rig
        .run(&mut engine, |status| {
            status
                .multiphases
                .first()
                .is_some_and(|view| view.multiphase.state != MultiphaseState::Running)
        })
        .await;
    let view = &status.multiphases[0];
    assert_eq!(
        view.multiphase.state,
        MultiphaseState::Succeeded,
        "{view:#?}"
    );
    let run = |index: usize| {
        status
            .workflows
            .iter()
            .find(|w| Some(w.workflow.id) == view.phases[index].workflow_id)
            .unwrap()
    };
    let (finetune, pretrain) = (run(0), run(1));
    assert!(finetune.workflow.succeeded && pretrain.workflow.succeeded);
    // The second phase was submitted only once the first had ended.
    let finetune_end = finetune.attempts.last().unwrap().end_time.unwrap();
    let pretrain_submit = pretrain.attempts[0].submit_time.unwrap();
    assert!(pretrain_submit >= finetune_end, "{view:#?}");
    assert_eq!(id, view.multiphase.id);
}
