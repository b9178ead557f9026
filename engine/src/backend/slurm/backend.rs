//! The Slurm backend: enrolment, the steps of each action and waiting for a job to settle, over
//! [`SlurmApi`] (the command-line tools or slurmrestd).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};

use super::api::{Operation, SlurmApi, Submission};
use super::comment::Enrolment;
use super::jobcomp::JobCompRecord;
use super::squeue::SlurmJob;
use super::words;
use crate::backend::{
    ActionOutcome, Backend, BackendError, Can, Capabilities, Hold, JobSnapshot, NewJob,
    NodeCapacity,
};
use crate::model::BackendKind;
use crate::model::{ActionKind, ActionParams, JobSpec, JobState, RecoveryLimits, SpecChange};
use crate::recover::overrides;
use crate::sync::lock;

/// How the Slurm backend chooses jobs.
#[derive(Debug, Clone)]
pub struct SlurmOptions {
    /// Every job of these partitions is watched (per-partition enrolment).
    pub partitions: Vec<String>,
    /// Jobs watched by id (from the config; `runguard watch JOBID` adds more while running).
    pub watched: Vec<String>,
    /// Longest a requeued job may take to leave its nodes before its release.
    pub settle_timeout: Duration,
}

impl Default for SlurmOptions {
    fn default() -> Self {
        Self {
            partitions: Vec::new(),
            watched: Vec::new(),
            settle_timeout: Duration::from_secs(30),
        }
    }
}

/// Slurm, as the engine sees a scheduler.
pub struct SlurmBackend {
    options: SlurmOptions,
    api: Arc<dyn SlurmApi>,
    /// Job ids watched besides enrolled jobs: the config's and those added with `runguard watch`.
    watched: Mutex<HashSet<String>>,
    /// Comments already warned about, so a broken one is reported once, not every tick.
    warned: Mutex<HashSet<String>>,
}

impl SlurmBackend {
    pub fn new(options: SlurmOptions, api: Arc<dyn SlurmApi>) -> Self {
        let watched = options.watched.iter().cloned().collect();
        Self {
            options,
            api,
            watched: Mutex::new(watched),
            warned: Mutex::new(HashSet::new()),
        }
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
                lock(&self.watched).contains(&job.snapshot.job_id)
                    || job
                        .partition
                        .as_ref()
                        .is_some_and(|p| self.options.partitions.contains(p))
            }
        }
    }

    fn warn_once(&self, job_id: &str, message: &str) {
        if lock(&self.warned).insert(format!("{job_id}:{message}")) {
            tracing::warn!(job_id, %message, "job comment");
        }
    }

    async fn listing(&self, job_id: Option<&str>) -> Result<Vec<SlurmJob>, BackendError> {
        let (jobs, warnings) = self.api.jobs(job_id).await?;
        for warning in warnings {
            tracing::warn!(%warning, "job listing");
        }
        Ok(jobs)
    }

    async fn perform(&self, operation: Operation) -> Result<String, BackendError> {
        self.api.perform(&operation).await
    }

    /// Polls the job until `done` says it has reached the state wanted, or fails after the settle
    /// timeout with the error `timed_out` makes of it.
    async fn wait_for(
        &self,
        job_id: &str,
        done: impl Fn(&JobSnapshot) -> bool,
        timed_out: impl FnOnce(u64) -> BackendError,
    ) -> Result<JobSnapshot, BackendError> {
        let deadline = tokio::time::Instant::now() + self.options.settle_timeout;
        loop {
            match self.job(job_id).await? {
                Some(job) if done(&job) => return Ok(job),
                Some(_) => {}
                None => return Err(BackendError::NoSuchJob(job_id.to_string())),
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(timed_out(self.options.settle_timeout.as_secs()));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// Waits until a requeued job has left its nodes: pending, no longer completing. A job that does
    /// not within the settle timeout stays held by runguard's requeue, which is escalated with the
    /// command that releases it rather than retried in silence.
    async fn wait_until_settled(&self, job_id: &str) -> Result<(), BackendError> {
        self.wait_for(
            job_id,
            |job| job.state == JobState::Pending && job.nodes.is_empty(),
            |settle| {
                BackendError::Unconfirmed(format!(
                    "job {job_id} was requeued and held by runguard but did not leave its nodes \
                     within {settle} s; it is still held: release it with `scontrol release \
                     {job_id}` once its nodes are free"
                ))
            },
        )
        .await
        .map(drop)
    }

    /// The timeout of a wait that is worth trying again later: the job is still on its way.
    fn still_waiting(job_id: &str, what: &'static str) -> impl FnOnce(u64) -> BackendError {
        let job_id = job_id.to_string();
        move |settle| BackendError::Unavailable(format!("job {job_id} {what} within {settle} s"))
    }

    /// A hold that is not runguard's own (the user's `scontrol hold`, an administrator's) is never
    /// released by it.
    fn refuse_foreign_hold(job: &JobSnapshot) -> Result<(), BackendError> {
        match job.hold {
            Some(hold @ (Hold::User | Hold::Admin)) => Err(BackendError::Invalid(format!(
                "job {} is held by {} ({}); runguard releases only its own requeue's hold",
                job.job_id,
                if hold == Hold::User {
                    "its user"
                } else {
                    "an administrator"
                },
                job.reason.as_deref().unwrap_or("-")
            ))),
            _ => Ok(()),
        }
    }

    /// The operations of a requeue, in order: held first, so that the exclusion is in place before it
    /// can be scheduled; released once it has left its nodes (see [`Self::release_now`]).
    fn requeue_operations(job_id: &str, exclude: &[String]) -> Vec<Operation> {
        let job_id = job_id.to_string();
        let mut operations = vec![Operation::RequeueHold {
            job_id: job_id.clone(),
        }];
        if !exclude.is_empty() {
            operations.push(Operation::ExcludeNodes {
                job_id: job_id.clone(),
                nodes: exclude.to_vec(),
            });
        }
        operations.extend(Self::release_operations(&job_id));
        operations
    }

    fn release_operations(job_id: &str) -> [Operation; 2] {
        [
            Operation::Release {
                job_id: job_id.to_string(),
            },
            // Slurm holds a requeued batch job on BeginTime for about two minutes; start it now instead.
            Operation::StartNow {
                job_id: job_id.to_string(),
            },
        ]
    }

    /// Releases a held job once it has left its nodes, and lets it start at once — but not before two
    /// seconds after its previous run `ended_at`: slurmd revokes a job's credential when the job ends,
    /// with a one-second resolution, and refuses to launch the same job id in that second ("already
    /// killed, do not launch batch job"), which fails the new run at once.
    async fn release_now(
        &self,
        job_id: &str,
        ended_at: Option<DateTime<Utc>>,
    ) -> Result<(), BackendError> {
        self.wait_until_settled(job_id).await?;
        if let Some(ended_at) = ended_at {
            let not_before = ended_at + TimeDelta::seconds(2);
            if let Ok(wait) = (not_before - Utc::now()).to_std() {
                tokio::time::sleep(wait).await;
            }
        }
        for operation in Self::release_operations(job_id) {
            self.perform(operation).await?;
        }
        Ok(())
    }
}

/// The batch script and its arguments, from the command Slurm reports (`/path/train.sbatch --epochs 3`:
/// Slurm keeps the arguments as one line, so they are split at whitespace).
fn batch_command(spec: &JobSpec) -> Result<(PathBuf, Vec<String>), BackendError> {
    let mut words = spec.command.as_deref().unwrap_or("").split_whitespace();
    let Some(script) = words.next() else {
        return Err(BackendError::Invalid(format!(
            "job {} has no batch script to resubmit",
            spec.name
        )));
    };
    Ok((PathBuf::from(script), words.map(str::to_string).collect()))
}

/// The comment of a resubmitted job: its enrolment plus the tag that links it to its workflow.
fn resubmit_comment(tag: &str) -> String {
    serde_json::json!({ "APS": { "auto_resume_mode": "requeue" }, "runguard": tag }).to_string()
}

/// What the history says of a job the controller forgot: its last attempt, and how many came before.
fn snapshot_from_history(attempts: &[JobCompRecord]) -> Option<JobSnapshot> {
    let last = attempts.last()?;
    Some(JobSnapshot {
        job_id: last.job_id.clone(),
        name: last.name.clone(),
        user: last.user.clone(),
        state: last.state,
        state_raw: last.state_raw.clone(),
        reason: last.reason.clone(),
        // An ended attempt from the history: nothing holds it.
        hold: None,
        nodes: last.nodes.clone(),
        gpus: 0,
        submit_time: last.submit_time,
        start_time: last.start_time,
        end_time: last.end_time,
        exit_code: last.exit_code,
        restart_count: attempts.len().saturating_sub(1) as u32,
        excluded_nodes: Vec::new(),
        log_path: None,
        spec: JobSpec {
            name: last.name.clone(),
            user: last.user.clone(),
            nodes: last.node_count,
            partition: last.partition.clone(),
            work_dir: last.work_dir.clone(),
            ..JobSpec::default()
        },
        limits: RecoveryLimits::default(),
        tag: None,
    })
}

fn with_exclusion(detail: String, exclude: &[String]) -> String {
    if exclude.is_empty() {
        detail
    } else {
        format!("{detail}, excluding {}", exclude.join(","))
    }
}

#[async_trait]
impl Backend for SlurmBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Slurm
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::of(&[
            Can::Requeue,
            Can::Resubmit,
            Can::ResubmitChanged,
            Can::Hold,
            Can::Drain,
            Can::UsableNodes,
            Can::UpdateExclusions,
            Can::Signal,
        ])
    }

    async fn list_jobs(&self) -> Result<Vec<JobSnapshot>, BackendError> {
        let jobs = self.listing(None).await?;
        Ok(jobs
            .into_iter()
            .filter(|job| self.watched(job))
            .map(|job| job.snapshot)
            .collect())
    }

    async fn job(&self, job_id: &str) -> Result<Option<JobSnapshot>, BackendError> {
        let listed = match self.listing(Some(job_id)).await {
            // Some Slurm versions list every job whatever `--jobs` says.
            Ok(jobs) => jobs
                .into_iter()
                .map(|job| job.snapshot)
                .find(|job| job.job_id == job_id),
            Err(BackendError::NoSuchJob(_)) => None,
            Err(err) => return Err(err),
        };
        if listed.is_some() {
            return Ok(listed);
        }
        // Gone from the controller's memory (MinJobAge): how it ended is in the history, if kept.
        match self.api.history(job_id).await {
            Ok(Some(attempts)) => Ok(snapshot_from_history(&attempts)),
            Ok(None) => Ok(None),
            // A controller that does not answer says nothing of the job: not "gone".
            Err(err) if err.is_transient() => Err(err),
            Err(err) => {
                tracing::warn!(job_id, %err, "reading the job's history");
                Ok(None)
            }
        }
    }

    async fn requeue(
        &self,
        job_id: &str,
        exclude: &[String],
    ) -> Result<ActionOutcome, BackendError> {
        let Some(mut job) = self.job(job_id).await? else {
            return Err(BackendError::NoSuchJob(job_id.to_string()));
        };
        if job.state == JobState::Completing {
            // Still leaving its nodes: requeued by Slurm itself (a node failure) it turns pending,
            // otherwise it ends. Which path to take is only known then.
            job = self
                .wait_for(
                    job_id,
                    |job| job.state != JobState::Completing,
                    Self::still_waiting(job_id, "did not finish completing"),
                )
                .await?;
        }
        let exclude_step = Operation::ExcludeNodes {
            job_id: job_id.to_string(),
            nodes: exclude.to_vec(),
        };
        if job.state == JobState::Pending {
            // Queued again already (by Slurm itself, or by an earlier try): set the exclusion, and
            // release it if it is held by a requeue.
            Self::refuse_foreign_hold(&job)?;
            if !exclude.is_empty() {
                self.perform(exclude_step).await?;
            }
            self.release_now(job_id, None).await?;
            return Ok(ActionOutcome {
                detail: with_exclusion(
                    format!("job {job_id} was queued again already; started it now"),
                    exclude,
                ),
                new_job_id: None,
            });
        }
        let mut detail = format!("requeued job {job_id}");
        let mut ended_at = job.end_time;
        if !job.state.is_terminal() {
            // A job still running (a hang) is ended first and requeued once its processes are gone.
            // Requeued while running, it could start again on a node still killing its previous run,
            // and that kill, addressed to the same job id, would end the new run too.
            self.perform(Operation::Cancel {
                job_id: job_id.to_string(),
            })
            .await?;
            // A job on a node that no longer answers stays completing there until the controller
            // declares the node down: when only excluded nodes hold it, waiting is of no use.
            let stuck = |job: &JobSnapshot| {
                job.state == JobState::Completing
                    && !job.nodes.is_empty()
                    && job.nodes.iter().all(|node| exclude.contains(node))
            };
            let ended = self
                .wait_for(
                    job_id,
                    |job| {
                        (job.state.is_terminal() && job.state != JobState::Completing) || stuck(job)
                    },
                    Self::still_waiting(job_id, "did not end after scancel"),
                )
                .await?;
            if stuck(&ended) {
                return Err(BackendError::StuckOnNodes {
                    job_id: job_id.to_string(),
                    nodes: ended.nodes,
                });
            }
            ended_at = ended.end_time.or_else(|| Some(Utc::now()));
            detail = format!("ended the running job {job_id} and requeued it");
        }
        self.perform(Operation::RequeueHold {
            job_id: job_id.to_string(),
        })
        .await?;
        crate::chaos::point("requeue_held");
        if !exclude.is_empty() {
            self.perform(exclude_step).await?;
        }
        self.release_now(job_id, ended_at).await?;
        Ok(ActionOutcome {
            detail: with_exclusion(detail, exclude),
            new_job_id: None,
        })
    }

    async fn resubmit(
        &self,
        spec: &JobSpec,
        exclude: &[String],
        tag: &str,
    ) -> Result<ActionOutcome, BackendError> {
        self.resubmit_changed(spec, exclude, tag, &[]).await
    }

    async fn resubmit_changed(
        &self,
        spec: &JobSpec,
        exclude: &[String],
        tag: &str,
        changes: &[SpecChange],
    ) -> Result<ActionOutcome, BackendError> {
        let (script, args) = batch_command(spec)?;
        let fixed = overrides::apply(&args, changes)
            .map_err(|err| BackendError::Invalid(err.to_string()))?;
        let id = self
            .perform(Operation::Submit(Submission {
                script,
                args: fixed.args,
                name: spec.name.clone(),
                comment: resubmit_comment(tag),
                exclude: exclude.to_vec(),
                work_dir: spec.work_dir.clone(),
                environment: fixed.environment,
                ..Submission::default()
            }))
            .await?;
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_digit()) {
            return Err(BackendError::Unavailable(format!(
                "the submission answered {id:?} instead of a job id"
            )));
        }
        let mut changed = if fixed.diff.is_empty() {
            String::new()
        } else {
            format!(" with {}", fixed.diff.join("; "))
        };
        if args.is_empty() {
            // Slurm 23.02 and later list the script alone: arguments it had are not known.
            changed.push_str(" (Slurm reported the batch script without arguments: none passed)");
        }
        Ok(ActionOutcome {
            detail: with_exclusion(
                format!("resubmitted {} as job {id}{changed}", spec.name),
                exclude,
            ),
            new_job_id: Some(id),
        })
    }

    async fn submit(&self, job: &NewJob) -> Result<ActionOutcome, BackendError> {
        super::submit::submit(self.api.as_ref(), job).await
    }

    fn submit_command(&self, job: &NewJob) -> String {
        match super::submit::submission(job) {
            Ok(submission) => self.api.describe(&Operation::Submit(submission)),
            Err(err) => format!("(cannot submit: {err})"),
        }
    }

    async fn cancel(&self, job_id: &str) -> Result<ActionOutcome, BackendError> {
        self.perform(Operation::Cancel {
            job_id: job_id.to_string(),
        })
        .await?;
        Ok(ActionOutcome {
            detail: format!("cancelled job {job_id}"),
            new_job_id: None,
        })
    }

    async fn hold(&self, job_id: &str) -> Result<ActionOutcome, BackendError> {
        self.perform(Operation::Hold {
            job_id: job_id.to_string(),
        })
        .await?;
        Ok(ActionOutcome {
            detail: format!("held job {job_id}"),
            new_job_id: None,
        })
    }

    async fn release(&self, job_id: &str) -> Result<ActionOutcome, BackendError> {
        if let Some(job) = self.job(job_id).await? {
            Self::refuse_foreign_hold(&job)?;
        }
        self.release_now(job_id, None).await?;
        Ok(ActionOutcome {
            detail: format!("released job {job_id}"),
            new_job_id: None,
        })
    }

    async fn drain_node(&self, node: &str, reason: &str) -> Result<ActionOutcome, BackendError> {
        // A drain already set (by an administrator, or by runguard before a restart) keeps its reason:
        // overwriting it would make someone else's drain look like runguard's.
        let nodes = self.api.node_reasons(&[node.to_string()]).await?;
        if let Some((_, state, current)) = nodes.iter().find(|(name, _, _)| name == node)
            && words::drained(state)
        {
            return Ok(ActionOutcome {
                detail: if current == reason {
                    format!("{node} was already drained by runguard: {reason}")
                } else {
                    format!("{node} was already drained ({current:?}): left as it is")
                },
                new_job_id: None,
            });
        }
        self.perform(Operation::Drain {
            node: node.to_string(),
            reason: reason.to_string(),
        })
        .await?;
        Ok(ActionOutcome {
            detail: format!("drained {node}: {reason}"),
            new_job_id: None,
        })
    }

    async fn set_exclusions(
        &self,
        job_id: &str,
        nodes: &[String],
    ) -> Result<ActionOutcome, BackendError> {
        self.perform(Operation::ExcludeNodes {
            job_id: job_id.to_string(),
            nodes: nodes.to_vec(),
        })
        .await?;
        Ok(ActionOutcome {
            detail: if nodes.is_empty() {
                format!("job {job_id} excludes no node")
            } else {
                format!("job {job_id} excludes {}", nodes.join(","))
            },
            new_job_id: None,
        })
    }

    async fn signal_job(&self, job_id: &str, signal: &str) -> Result<ActionOutcome, BackendError> {
        self.perform(Operation::Signal {
            job_id: job_id.to_string(),
            signal: signal.to_string(),
        })
        .await?;
        Ok(ActionOutcome {
            detail: format!("sent SIG{signal} to job {job_id}"),
            new_job_id: None,
        })
    }

    async fn resume_node(&self, node: &str, reason: &str) -> Result<ActionOutcome, BackendError> {
        let nodes = self.api.node_reasons(&[node.to_string()]).await?;
        let Some((_, state, current)) = nodes.into_iter().find(|(name, _, _)| name == node) else {
            return Err(BackendError::Unavailable(format!(
                "the controller did not list node {node}"
            )));
        };
        if !words::drained(&state) {
            return Ok(ActionOutcome {
                detail: format!("{node} is not drained ({state}): nothing to undo"),
                new_job_id: None,
            });
        }
        // Only runguard's own drain is undone: an administrator who drained the node (or set another
        // reason over runguard's) keeps it out.
        if current != reason {
            return Ok(ActionOutcome {
                detail: format!(
                    "{node} left drained: its reason is {current:?}, not the one runguard set ({reason:?})"
                ),
                new_job_id: None,
            });
        }
        self.perform(Operation::Resume {
            node: node.to_string(),
        })
        .await?;
        Ok(ActionOutcome {
            detail: format!("returned {node} to service (its drain was runguard's: {reason})"),
            new_job_id: None,
        })
    }

    fn command_for(&self, kind: ActionKind, params: &ActionParams) -> String {
        let job_id = params.job_id.clone().unwrap_or_default();
        let operations = match kind {
            ActionKind::UpdateExclusions => vec![Operation::ExcludeNodes {
                job_id: job_id.clone(),
                nodes: params.exclude_nodes.clone(),
            }],
            ActionKind::CheckpointNow => vec![Operation::Signal {
                job_id: job_id.clone(),
                signal: params.signal.clone().unwrap_or_else(|| "USR1".to_string()),
            }],
            ActionKind::ResumeNode => vec![Operation::Resume {
                node: params.node.clone().unwrap_or_default(),
            }],
            ActionKind::Recreate => {
                // The job's own command is not in the params: show where it goes and what changes.
                let fixed = overrides::apply(&[], &params.changes);
                let environment = fixed.map(|fixed| fixed.environment).unwrap_or_default();
                let submit = Operation::Submit(Submission {
                    script: PathBuf::from("<batch script of the job>"),
                    args: vec!["<its arguments, changed as said>".to_string()],
                    name: "<job name>".to_string(),
                    comment: resubmit_comment("<workflow and attempt>"),
                    exclude: params.exclude_nodes.clone(),
                    environment,
                    ..Submission::default()
                });
                return format!(
                    "{} (a new job; the failed one stays as it ended)",
                    self.api.describe(&submit)
                );
            }
            ActionKind::Requeue => Self::requeue_operations(&job_id, &params.exclude_nodes),
            ActionKind::Resubmit => vec![Operation::Submit(Submission {
                script: PathBuf::from("<batch script of the job>"),
                args: vec!["<its arguments>".to_string()],
                name: "<job name>".to_string(),
                comment: resubmit_comment("<workflow and attempt>"),
                exclude: params.exclude_nodes.clone(),
                ..Submission::default()
            })],
            ActionKind::Submit => {
                return "sbatch --parsable (the phase's batch script, enrolled by its comment)"
                    .to_string();
            }
            ActionKind::Cancel => vec![Operation::Cancel {
                job_id: job_id.clone(),
            }],
            ActionKind::Hold => vec![Operation::Hold {
                job_id: job_id.clone(),
            }],
            ActionKind::Release => Self::release_operations(&job_id).to_vec(),
            ActionKind::DrainNode => vec![Operation::Drain {
                node: params.node.clone().unwrap_or_default(),
                reason: params
                    .reason
                    .clone()
                    .unwrap_or_else(|| "runguard".to_string()),
            }],
        };
        let steps = operations
            .iter()
            .map(|operation| self.api.describe(operation))
            .collect::<Vec<_>>()
            .join(" ; ");
        if kind == ActionKind::Requeue {
            let cancel = self.api.describe(&Operation::Cancel { job_id });
            format!("{steps} (a job still running is ended first with `{cancel}`)")
        } else {
            steps
        }
    }

    fn node_log(&self, _node: &str) -> Option<PathBuf> {
        None
    }

    fn set_watched(&self, job_ids: &[String]) {
        let mut watched = lock(&self.watched);
        watched.clear();
        watched.extend(self.options.watched.iter().cloned());
        watched.extend(job_ids.iter().cloned());
    }

    async fn dead_nodes(
        &self,
        nodes: &[String],
    ) -> Result<Option<Vec<(String, String)>>, BackendError> {
        let states = self.api.node_states(nodes).await?;
        Ok(Some(
            states
                .into_iter()
                .filter(|(node, _)| nodes.contains(node))
                .filter_map(|(node, state)| {
                    let death = words::node_death(&state)?;
                    Some((node, format!("{death}: sinfo state {state}")))
                })
                .collect(),
        ))
    }

    async fn usable_nodes(
        &self,
        _job_id: &str,
        spec: &JobSpec,
    ) -> Result<Option<NodeCapacity>, BackendError> {
        self.api
            .usable_nodes(spec.partition.as_deref())
            .await
            .map(Some)
    }

    async fn node_inventory(&self) -> Result<Option<crate::capacity::NodeListing>, BackendError> {
        self.api.node_inventory().await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::backend::slurm::comment::Enrolment;

    /// A controller that always lists the same jobs and records what it is asked to do.
    struct Scripted {
        jobs: Vec<JobSnapshot>,
        performed: Mutex<Vec<Operation>>,
        /// The history cannot be read (the controller, or accounting, does not answer).
        history_down: bool,
    }

    #[async_trait]
    impl SlurmApi for Scripted {
        async fn jobs(
            &self,
            _job_id: Option<&str>,
        ) -> Result<(Vec<SlurmJob>, Vec<String>), BackendError> {
            let jobs = self
                .jobs
                .iter()
                .map(|snapshot| SlurmJob {
                    snapshot: snapshot.clone(),
                    enrolment: Enrolment::NotMentioned,
                    partition: None,
                })
                .collect();
            Ok((jobs, Vec::new()))
        }
        async fn perform(&self, operation: &Operation) -> Result<String, BackendError> {
            self.performed.lock().unwrap().push(operation.clone());
            Ok(String::new())
        }
        fn describe(&self, operation: &Operation) -> String {
            format!("{operation:?}")
        }
        async fn usable_nodes(&self, _: Option<&str>) -> Result<NodeCapacity, BackendError> {
            Ok(NodeCapacity::default())
        }
        async fn node_states(
            &self,
            nodes: &[String],
        ) -> Result<Vec<(String, String)>, BackendError> {
            Ok(nodes.iter().map(|n| (n.clone(), "alloc".into())).collect())
        }
        /// n1 drained by runguard, n2 by an administrator, n3 idle.
        async fn node_reasons(
            &self,
            nodes: &[String],
        ) -> Result<Vec<(String, String, String)>, BackendError> {
            let all = [
                ("n1", "drain", "runguard: quarantined (xid_79)"),
                ("n2", "drain", "bad fan, ticket 4411"),
                ("n3", "idle", ""),
            ];
            Ok(all
                .iter()
                .filter(|(node, _, _)| nodes.iter().any(|n| n == node))
                .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
                .collect())
        }
        async fn history(&self, _: &str) -> Result<Option<Vec<JobCompRecord>>, BackendError> {
            if self.history_down {
                return Err(BackendError::Unavailable(
                    "scontrol show config: Unable to contact slurm controller".into(),
                ));
            }
            Ok(None)
        }
    }

    fn job(state: JobState, hold: Option<Hold>, nodes: &[&str]) -> JobSnapshot {
        JobSnapshot {
            job_id: "7".into(),
            name: "train".into(),
            user: "alice".into(),
            state,
            state_raw: format!("{state:?}").to_uppercase(),
            reason: hold.map(|_| "JobHeldUser".to_string()),
            hold,
            nodes: nodes.iter().map(|n| n.to_string()).collect(),
            gpus: 0,
            submit_time: None,
            start_time: None,
            end_time: None,
            exit_code: None,
            restart_count: 1,
            excluded_nodes: Vec::new(),
            log_path: None,
            spec: JobSpec::default(),
            limits: RecoveryLimits::default(),
            tag: None,
        }
    }

    fn backend(jobs: Vec<JobSnapshot>) -> (SlurmBackend, Arc<Scripted>) {
        let api = Arc::new(Scripted {
            jobs,
            performed: Mutex::new(Vec::new()),
            history_down: false,
        });
        let options = SlurmOptions {
            settle_timeout: Duration::ZERO,
            ..SlurmOptions::default()
        };
        (SlurmBackend::new(options, api.clone()), api)
    }

    #[tokio::test]
    async fn a_job_not_listed_whose_history_cannot_be_read_is_not_taken_for_gone() {
        let api = Arc::new(Scripted {
            jobs: Vec::new(),
            performed: Mutex::new(Vec::new()),
            history_down: true,
        });
        let slurm = SlurmBackend::new(SlurmOptions::default(), api);
        let err = slurm.job("7").await.unwrap_err();
        assert!(err.is_transient(), "{err:?}");
    }

    #[tokio::test]
    async fn a_users_own_hold_is_never_released() {
        for hold in [Hold::User, Hold::Admin] {
            let (slurm, api) = backend(vec![job(JobState::Pending, Some(hold), &[])]);
            let requeue = slurm.requeue("7", &["n2".into()]).await.unwrap_err();
            let release = slurm.release("7").await.unwrap_err();
            assert!(
                requeue.to_string().contains("releases only its own"),
                "{requeue}"
            );
            assert!(!requeue.is_transient() && !release.is_transient());
            assert!(api.performed.lock().unwrap().is_empty(), "nothing done");
        }
    }

    #[tokio::test]
    async fn a_requeues_own_hold_is_released_with_the_exclusion() {
        let (slurm, api) = backend(vec![job(JobState::Pending, Some(Hold::Requeue), &[])]);
        slurm.requeue("7", &["n2".into()]).await.unwrap();
        let performed = api.performed.lock().unwrap();
        assert!(matches!(performed[0], Operation::ExcludeNodes { .. }));
        assert!(matches!(performed[1], Operation::Release { .. }));
        assert!(matches!(performed[2], Operation::StartNow { .. }));
    }

    #[tokio::test]
    async fn a_held_job_that_never_leaves_its_nodes_is_escalated_with_the_release_command() {
        // Requeued and held, but still on its nodes when the settle timeout is over.
        let (slurm, api) = backend(vec![job(
            JobState::Pending,
            Some(Hold::Requeue),
            &["n1", "n2"],
        )]);
        let err = slurm.requeue("7", &[]).await.unwrap_err();
        assert!(matches!(err, BackendError::Unconfirmed(_)), "{err:?}");
        assert!(!err.is_transient());
        assert!(err.to_string().contains("`scontrol release 7`"), "{err}");
        assert!(
            !api.performed
                .lock()
                .unwrap()
                .iter()
                .any(|op| matches!(op, Operation::Release { .. })),
            "not released onto nodes it has not left"
        );
    }
}
