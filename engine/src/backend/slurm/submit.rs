//! Submitting a new job runguard starts itself (a phase of a multiphase workflow): `sbatch
//! --parsable` as argv, enrolled by its comment, with the phase's node range and environment.

use super::api::{Operation, SlurmApi, Submission};
use crate::backend::{ActionOutcome, BackendError, NewJob};
use crate::model::PhaseJob;

/// The comment of a job runguard submits: its enrolment, its requeue limit and the tag that links it
/// to its workflow.
pub fn enrolment_comment(tag: &str, max_requeue_times: Option<u32>) -> String {
    let mut aps = serde_json::json!({ "auto_resume_mode": "requeue" });
    if let Some(limit) = max_requeue_times {
        aps["max_requeue_times"] = limit.into();
    }
    serde_json::json!({ "APS": aps, "runguard": tag }).to_string()
}

/// The `sbatch` submission of `job`; an error for what sbatch cannot be told.
pub fn submission(job: &NewJob) -> Result<Submission, BackendError> {
    let PhaseJob::Batch {
        script,
        args,
        sbatch_args,
    } = &job.job
    else {
        return Err(BackendError::Invalid(format!(
            "{}: Slurm submits batch scripts, not Kubernetes manifests",
            job.name
        )));
    };
    let mut options = Vec::new();
    match (job.min_nodes, job.nodes) {
        // A range lets Slurm start (and start again after a requeue that excludes a node) the job on
        // as few as `min` nodes when no more are left.
        (Some(min), Some(nodes)) if min < nodes => options.push(format!("--nodes={min}-{nodes}")),
        (_, Some(nodes)) => options.push(format!("--nodes={nodes}")),
        (_, None) => {}
    }
    let mut environment = Vec::new();
    for (name, value) in &job.env {
        // sbatch splits --export at commas: a value holding one would be cut.
        if value.contains(',') {
            return Err(BackendError::Invalid(format!(
                "{}: {name}={value} cannot be passed to sbatch (a comma in the value)",
                job.name
            )));
        }
        environment.push((name.clone(), value.clone()));
    }
    options.extend(sbatch_args.iter().cloned());
    Ok(Submission {
        script: script.clone(),
        name: job.name.clone(),
        comment: enrolment_comment(&job.tag, job.max_requeue_times),
        exclude: Vec::new(),
        work_dir: job.work_dir.as_ref().map(|dir| dir.display().to_string()),
        environment,
        options,
        args: args.clone(),
    })
}

/// Submits `job` and returns the new job id in the outcome.
pub async fn submit(api: &dyn SlurmApi, job: &NewJob) -> Result<ActionOutcome, BackendError> {
    let submission = submission(job)?;
    let script = submission.script.display().to_string();
    let id = api.perform(&Operation::Submit(submission)).await?;
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
        return Err(BackendError::Unavailable(format!(
            "the submission answered {id:?} instead of a job id"
        )));
    }
    Ok(ActionOutcome {
        detail: format!("submitted {} ({script}) as job {id}", job.name),
        new_job_id: Some(id),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::slurm::cli::{display_argv, operation_argv};
    use crate::backend::slurm::comment::{self, Enrolment};

    fn phase() -> NewJob {
        NewJob {
            name: "llama/extend".into(),
            job: PhaseJob::Batch {
                script: "/w/extend.sbatch".into(),
                args: vec!["--seq-len".into(), "32768".into()],
                sbatch_args: vec!["--partition=gpu".into()],
            },
            tag: "runguard:workflow=7:attempt=0".into(),
            nodes: Some(4),
            min_nodes: Some(2),
            max_requeue_times: Some(3),
            work_dir: Some("/w".into()),
            env: vec![("RUNGUARD_CHECKPOINT_DIR".into(), "/w/ckpt/extend".into())],
        }
    }

    #[test]
    fn a_phase_is_submitted_as_argv_with_its_enrolment_and_node_range() {
        let submission = submission(&phase()).unwrap();
        let argv = operation_argv(&Operation::Submit(submission.clone()));
        assert_eq!(
            display_argv(&argv),
            "sbatch --parsable --job-name=llama/extend \
             '--comment={\"APS\":{\"auto_resume_mode\":\"requeue\",\"max_requeue_times\":3},\"runguard\":\"runguard:workflow=7:attempt=0\"}' \
             --chdir=/w --export=ALL,RUNGUARD_CHECKPOINT_DIR=/w/ckpt/extend --nodes=2-4 \
             --partition=gpu /w/extend.sbatch --seq-len 32768"
        );
        // The comment enrols the job with the phase's limit, as a comment written by hand would.
        let Enrolment::Enrolled { limits, .. } = comment::parse(&submission.comment) else {
            panic!("not enrolled: {}", submission.comment);
        };
        assert_eq!(limits.max_requeue_times, Some(3));
    }

    #[test]
    fn what_sbatch_cannot_be_told_is_refused_before_submitting() {
        let mut job = phase();
        job.env = vec![("RUNGUARD_CHECKPOINT_DIR".into(), "/w/a,b".into())];
        assert!(matches!(submission(&job), Err(BackendError::Invalid(_))));
        job.job = PhaseJob::Manifest {
            path: "/w/job.yaml".into(),
        };
        assert!(matches!(submission(&job), Err(BackendError::Invalid(_))));
    }
}
