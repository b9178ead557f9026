//! The Slurm backend: `squeue --json` to observe, `scontrol`/`sbatch`/`scancel` to act, each run as
//! argv (never through a shell) with a timeout.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;

use super::comment::Enrolment;
use super::squeue::{self, SlurmJob};
use crate::backend::{ActionOutcome, Backend, BackendError, JobSnapshot};
use crate::model::{ActionKind, ActionParams, JobSpec};

/// How the Slurm backend chooses and reaches jobs.
#[derive(Debug, Clone, Default)]
pub struct SlurmOptions {
    /// Every job of these partitions is watched (per-partition enrolment).
    pub partitions: Vec<String>,
    /// Jobs watched by id (`runguard watch JOBID`).
    pub watched: Vec<String>,
    /// Longest a Slurm command may run.
    pub command_timeout: Duration,
}

/// Slurm through its command-line tools.
pub struct SlurmBackend {
    options: SlurmOptions,
    /// Comments already warned about, so a broken one is reported once, not every tick.
    warned: Mutex<HashSet<String>>,
}

impl SlurmBackend {
    pub fn new(mut options: SlurmOptions) -> Self {
        if options.command_timeout.is_zero() {
            options.command_timeout = Duration::from_secs(30);
        }
        Self {
            options,
            warned: Mutex::new(HashSet::new()),
        }
    }

    async fn run(&self, argv: &[String]) -> Result<String, BackendError> {
        let display = argv.join(" ");
        let Some((program, args)) = argv.split_first() else {
            return Err(BackendError::Invalid("empty command".into()));
        };
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .kill_on_drop(true)
            .stdin(std::process::Stdio::null());
        let output =
            match tokio::time::timeout(self.options.command_timeout, command.output()).await {
                Ok(Ok(output)) => output,
                Ok(Err(err)) => return Err(BackendError::Unavailable(format!("{display}: {err}"))),
                Err(_) => {
                    return Err(BackendError::Unavailable(format!(
                        "{display}: no answer within {} s",
                        self.options.command_timeout.as_secs()
                    )));
                }
            };
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() {
            return Ok(stdout);
        }
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_string();
        let message: String = stderr.chars().take(500).collect();
        if message.contains("ermission denied")
            || message.contains("Access denied")
            || message.contains("Access/permission")
        {
            return Err(BackendError::Refused {
                command: display,
                message,
            });
        }
        if message.contains("Invalid job id") {
            return Err(BackendError::NoSuchJob(display));
        }
        if message.contains("Unable to contact slurm controller")
            || message.contains("Connection refused")
        {
            return Err(BackendError::Unavailable(format!("{display}: {message}")));
        }
        Err(BackendError::Invalid(format!("{display}: {message}")))
    }

    fn watched(&self, job: &SlurmJob) -> bool {
        match &job.enrolment {
            Enrolment::Enrolled { warning, .. } => {
                if let Some(warning) = warning {
                    self.warn_once(&job.snapshot.job_id, warning);
                }
                true
            }
            Enrolment::Invalid(message) => {
                self.warn_once(&job.snapshot.job_id, message);
                false
            }
            Enrolment::NotMentioned => {
                self.options.watched.contains(&job.snapshot.job_id)
                    || job
                        .partition
                        .as_ref()
                        .is_some_and(|p| self.options.partitions.contains(p))
            }
        }
    }

    fn warn_once(&self, job_id: &str, message: &str) {
        let mut warned = self
            .warned
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if warned.insert(format!("{job_id}:{message}")) {
            tracing::warn!(job_id, %message, "job comment");
        }
    }

    async fn listing(&self, argv: &[String]) -> Result<Vec<SlurmJob>, BackendError> {
        let text = self.run(argv).await?;
        let (jobs, warnings) =
            squeue::parse(&text).map_err(|err| BackendError::Unavailable(err.to_string()))?;
        for warning in warnings {
            tracing::warn!(%warning, "squeue listing");
        }
        Ok(jobs)
    }
}

fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|part| part.to_string()).collect()
}

/// The argv of each action, shared by execution and display.
fn requeue_steps(job_id: &str, exclude: &[String]) -> Vec<Vec<String>> {
    let mut steps = vec![argv(&["scontrol", "requeuehold", job_id])];
    steps.push(vec![
        "scontrol".into(),
        "update".into(),
        format!("JobId={job_id}"),
        format!("ExcNodeList={}", exclude.join(",")),
    ]);
    steps.push(argv(&["scontrol", "release", job_id]));
    // Slurm holds a requeued batch job on BeginTime for about two minutes; start it now instead.
    steps.push(vec![
        "scontrol".into(),
        "update".into(),
        format!("JobId={job_id}"),
        "StartTime=now".into(),
    ]);
    steps
}

fn drain_argv(node: &str, reason: &str) -> Vec<String> {
    vec![
        "scontrol".into(),
        "update".into(),
        format!("NodeName={node}"),
        "State=DRAIN".into(),
        format!("Reason={reason}"),
    ]
}

/// The comment of a resubmitted job: its enrolment plus the tag that links it to its workflow.
fn resubmit_comment(spec_limits: Option<u32>, tag: &str) -> String {
    let mut aps = serde_json::json!({ "auto_resume_mode": "requeue" });
    if let Some(max) = spec_limits {
        aps["max_requeue_times"] = max.into();
    }
    serde_json::json!({ "APS": aps, "runguard": tag }).to_string()
}

#[async_trait]
impl Backend for SlurmBackend {
    fn name(&self) -> &str {
        "slurm"
    }

    async fn list_jobs(&self) -> Result<Vec<JobSnapshot>, BackendError> {
        let jobs = self.listing(&argv(&["squeue", "--all", "--json"])).await?;
        Ok(jobs
            .into_iter()
            .filter(|job| self.watched(job))
            .map(|job| job.snapshot)
            .collect())
    }

    async fn job(&self, job_id: &str) -> Result<Option<JobSnapshot>, BackendError> {
        match self
            .listing(&argv(&["squeue", "--all", "--json", "--jobs", job_id]))
            .await
        {
            Ok(jobs) => Ok(jobs
                .into_iter()
                .map(|job| job.snapshot)
                .find(|job| job.job_id == job_id)),
            Err(BackendError::NoSuchJob(_)) => Ok(None),
            Err(err) => Err(err),
        }
    }

    async fn requeue(
        &self,
        job_id: &str,
        exclude: &[String],
    ) -> Result<ActionOutcome, BackendError> {
        let steps = requeue_steps(job_id, exclude);
        let Some((start_now, steps)) = steps.split_last() else {
            return Err(BackendError::Invalid("no requeue steps".into()));
        };
        for step in steps {
            self.run(step).await?;
        }
        // A running job (a hang) is requeued only once its processes are gone, and Slurm sets its
        // BeginTime then, after any StartTime given earlier: wait until it is pending to start it now.
        for _ in 0..50 {
            if let Some(job) = self.job(job_id).await?
                && job.state == crate::model::JobState::Pending
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        self.run(start_now).await?;
        Ok(ActionOutcome {
            detail: format!(
                "requeued job {job_id}{}",
                if exclude.is_empty() {
                    String::new()
                } else {
                    format!(", excluding {}", exclude.join(","))
                }
            ),
            new_job_id: None,
        })
    }

    async fn resubmit(
        &self,
        spec: &JobSpec,
        exclude: &[String],
        tag: &str,
    ) -> Result<ActionOutcome, BackendError> {
        let Some(script) = spec.command.clone() else {
            return Err(BackendError::Invalid(format!(
                "job {} has no batch script to resubmit",
                spec.name
            )));
        };
        let mut command = vec![
            "sbatch".to_string(),
            "--parsable".to_string(),
            format!("--job-name={}", spec.name),
            format!("--comment={}", resubmit_comment(None, tag)),
        ];
        if !exclude.is_empty() {
            command.push(format!("--exclude={}", exclude.join(",")));
        }
        if let Some(dir) = &spec.work_dir {
            command.push(format!("--chdir={dir}"));
        }
        command.push(script);
        let out = self.run(&command).await?;
        let id = out.trim().split(';').next().unwrap_or("").to_string();
        Ok(ActionOutcome {
            detail: format!("resubmitted {} as job {id}", spec.name),
            new_job_id: Some(id),
        })
    }

    async fn cancel(&self, job_id: &str) -> Result<ActionOutcome, BackendError> {
        self.run(&argv(&["scancel", job_id])).await?;
        Ok(ActionOutcome {
            detail: format!("cancelled job {job_id}"),
            new_job_id: None,
        })
    }

    async fn drain_node(&self, node: &str, reason: &str) -> Result<ActionOutcome, BackendError> {
        self.run(&drain_argv(node, reason)).await?;
        Ok(ActionOutcome {
            detail: format!("drained {node}: {reason}"),
            new_job_id: None,
        })
    }

    fn command_for(&self, kind: ActionKind, params: &ActionParams) -> String {
        let job = params.job_id.clone().unwrap_or_default();
        let steps = match kind {
            ActionKind::Requeue => requeue_steps(&job, &params.exclude_nodes),
            ActionKind::Resubmit => vec![vec![
                "sbatch".into(),
                format!("--exclude={}", params.exclude_nodes.join(",")),
                "SCRIPT".into(),
            ]],
            ActionKind::Cancel => vec![argv(&["scancel", &job])],
            ActionKind::DrainNode => vec![drain_argv(
                params.node.as_deref().unwrap_or(""),
                params.reason.as_deref().unwrap_or("runguard"),
            )],
        };
        steps
            .iter()
            .map(|step| step.join(" "))
            .collect::<Vec<_>>()
            .join(" ; ")
    }

    fn node_log(&self, _node: &str) -> Option<PathBuf> {
        None
    }
}
