//! What the engine can ask of the simulated cluster, and what the cluster tells it: Slurm's requeue,
//! sbatch, scancel and drain, and `squeue`/`sacct`-like snapshots.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use rand::Rng;

use crate::backend::{ActionOutcome, BackendError, JobSnapshot};
use crate::model::{ActionKind, ActionParams, JobSpec, JobState};

use super::cluster::{Placement, World, log_file, normalised};
use super::files::Output;
use super::state::{Draw, Job, Pending, Phase, rng};

/// How long a requeued job shows as REQUEUED before it is pending again.
const REQUEUED_MS: i64 = 3_000;

impl World {
    fn index_of(&self, job_id: &str) -> Result<usize, BackendError> {
        job_id
            .trim()
            .parse::<u64>()
            .ok()
            .and_then(|id| self.state.jobs.iter().position(|job| job.id == id))
            .ok_or_else(|| BackendError::NoSuchJob(job_id.to_string()))
    }

    /// The job with that id and where it is kept.
    fn job_of(&self, job_id: &str) -> Result<(usize, &Job), BackendError> {
        let index = self.index_of(job_id)?;
        self.state
            .jobs
            .get(index)
            .map(|job| (index, job))
            .ok_or_else(|| BackendError::NoSuchJob(job_id.to_string()))
    }

    /// Checks exclusion names and that enough usable nodes remain for a job of `needed` nodes.
    fn check_exclusion(&self, excluded: &[String], needed: u32) -> Result<(), BackendError> {
        if let Some(unknown) = excluded
            .iter()
            .find(|name| !self.state.nodes.iter().any(|node| &node.name == *name))
        {
            return Err(BackendError::Invalid(format!(
                "no node named `{unknown}` in the simulated cluster"
            )));
        }
        let usable = self
            .state
            .nodes
            .iter()
            .filter(|node| node.drain_reason.is_none() && !excluded.contains(&node.name))
            .count();
        if usable < needed as usize {
            return Err(BackendError::Invalid(format!(
                "excluding {} leaves {usable} usable nodes, but the job needs {needed}",
                if excluded.is_empty() {
                    "nothing".to_string()
                } else {
                    excluded.join(",")
                }
            )));
        }
        Ok(())
    }

    /// `scontrol requeue`: kills a running attempt or takes a failed one, and queues the job again
    /// under the same id, never to run on `exclude` (added to what it already excludes).
    pub fn requeue(
        &mut self,
        job_id: &str,
        exclude: &[String],
        at_ms: i64,
        out: &mut Output,
    ) -> Result<ActionOutcome, BackendError> {
        let (index, job) = self.job_of(job_id)?;
        match job.phase {
            Phase::Running(_) | Phase::Failed => {}
            Phase::Pending(_) => {
                return Err(BackendError::Invalid(format!(
                    "job {job_id} is already pending; there is nothing to requeue"
                )));
            }
            Phase::Completed | Phase::Cancelled => {
                return Err(BackendError::Invalid(format!(
                    "job {job_id} is {}; only a running or failed job can be requeued",
                    raw_state(job, at_ms)
                )));
            }
        }
        let mut excluded = job.excluded.clone();
        excluded.extend(exclude.iter().cloned());
        let excluded = normalised(excluded);
        self.check_exclusion(&excluded, job.spec.nodes)?;
        let was_running = matches!(job.phase, Phase::Running(_));
        let (id, restart) = (job.id, job.restart_count + 1);
        if was_running {
            self.kill(index, at_ms, true, out);
        }
        let begin_ms = rng(self.state.seed, Draw::Requeue, &[id, u64::from(restart)])
            .random_range(7_000..12_000);
        if let Some(job) = self.state.jobs.get_mut(index) {
            job.restart_count = restart;
            job.excluded = excluded.clone();
            job.phase = Phase::Pending(Pending {
                eligible_ms: at_ms + REQUEUED_MS + begin_ms,
                woken: false,
                requeued_until_ms: Some(at_ms + REQUEUED_MS),
            });
            job.alloc.clear();
            job.start_ms = None;
            job.end_ms = None;
            job.exit_code = None;
        }
        self.schedule(at_ms, out);
        out.changed = true;
        let verb = if was_running {
            "killed and requeued"
        } else {
            "requeued"
        };
        let excluding = if excluded.is_empty() {
            String::new()
        } else {
            format!(", excluding {}", excluded.join(","))
        };
        Ok(ActionOutcome {
            detail: format!("{verb} job {id} (restart {restart}){excluding}"),
            new_job_id: None,
        })
    }

    /// `sbatch` of a saved spec: a new job id running the same workload, resuming from its checkpoints.
    pub fn resubmit(
        &mut self,
        spec: &JobSpec,
        exclude: &[String],
        tag: &str,
        at_ms: i64,
        out: &mut Output,
    ) -> Result<ActionOutcome, BackendError> {
        if let Some(existing) = self
            .state
            .jobs
            .iter()
            .find(|job| job.tag.as_deref() == Some(tag))
        {
            return Ok(ActionOutcome {
                detail: format!("job {} was already submitted with tag {tag}", existing.id),
                new_job_id: Some(existing.id.to_string()),
            });
        }
        let Some(workload) = self.scenario.workload_index(&spec.name) else {
            return Err(BackendError::Invalid(format!(
                "the simulated cluster only runs its scenario's workloads ({}); no job named `{}`",
                self.scenario
                    .jobs
                    .iter()
                    .map(|job| job.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
                spec.name
            )));
        };
        let mut spec = spec.clone();
        if spec.nodes == 0 {
            spec.nodes = self.scenario.jobs.get(workload).map_or(1, |w| w.nodes);
        }
        if spec.gpus_per_node == 0 || spec.gpus_per_node > super::scenario::GPUS_PER_NODE {
            spec.gpus_per_node = self
                .scenario
                .jobs
                .get(workload)
                .map_or(super::scenario::GPUS_PER_NODE, |w| w.gpus_per_node);
        }
        let excluded = normalised(exclude.to_vec());
        self.check_exclusion(&excluded, spec.nodes)?;
        let id = self.submit(
            workload,
            spec,
            Some(tag.to_string()),
            excluded.clone(),
            at_ms,
        );
        self.schedule(at_ms, out);
        out.changed = true;
        let excluding = if excluded.is_empty() {
            String::new()
        } else {
            format!(", excluding {}", excluded.join(","))
        };
        Ok(ActionOutcome {
            detail: format!("submitted job {id}{excluding}"),
            new_job_id: Some(id.to_string()),
        })
    }

    /// `scancel`.
    pub fn cancel(
        &mut self,
        job_id: &str,
        at_ms: i64,
        out: &mut Output,
    ) -> Result<ActionOutcome, BackendError> {
        let (index, job) = self.job_of(job_id)?;
        match job.phase {
            Phase::Cancelled => {
                return Ok(ActionOutcome {
                    detail: format!("job {job_id} was already cancelled"),
                    new_job_id: None,
                });
            }
            Phase::Completed | Phase::Failed => {
                return Err(BackendError::Invalid(format!(
                    "job {job_id} already finished ({})",
                    raw_state(job, at_ms)
                )));
            }
            Phase::Running(_) | Phase::Pending(_) => {}
        }
        self.kill(index, at_ms, false, out);
        if let Some(job) = self.state.jobs.get_mut(index) {
            job.phase = Phase::Cancelled;
            job.end_ms = Some(at_ms);
        }
        self.schedule(at_ms, out);
        out.changed = true;
        Ok(ActionOutcome {
            detail: format!("cancelled job {job_id}"),
            new_job_id: None,
        })
    }

    /// `scontrol update State=DRAIN`: the node takes no new jobs; running ones continue.
    pub fn drain(
        &mut self,
        node: &str,
        reason: &str,
        out: &mut Output,
    ) -> Result<ActionOutcome, BackendError> {
        let Some(state) = self.state.nodes.iter_mut().find(|n| n.name == node) else {
            return Err(BackendError::Invalid(format!(
                "no node named `{node}` in the simulated cluster"
            )));
        };
        // A standing drain keeps its reason, as Slurm's does when runguard finds a node drained.
        let detail = if state.drain_reason.is_some() {
            format!("node {node} was already drained")
        } else {
            state.drain_reason = Some(reason.to_string());
            format!("drained node {node}: {reason}")
        };
        out.changed = true;
        Ok(ActionOutcome {
            detail,
            new_job_id: None,
        })
    }

    /// `scontrol update State=RESUME`, only over a drain with exactly `reason`.
    pub fn resume(
        &mut self,
        node: &str,
        reason: &str,
        at_ms: i64,
        out: &mut Output,
    ) -> Result<ActionOutcome, BackendError> {
        let Some(state) = self.state.nodes.iter_mut().find(|n| n.name == node) else {
            return Err(BackendError::Invalid(format!(
                "no node named `{node}` in the simulated cluster"
            )));
        };
        let detail = match state.drain_reason.as_deref() {
            None => format!("{node} is not drained: nothing to undo"),
            Some(current) if current != reason => {
                format!(
                    "{node} left drained: its reason is {current:?}, not runguard's ({reason:?})"
                )
            }
            Some(_) => {
                state.drain_reason = None;
                out.changed = true;
                self.schedule(at_ms, out);
                format!("returned {node} to service")
            }
        };
        Ok(ActionOutcome {
            detail,
            new_job_id: None,
        })
    }

    /// `scontrol update JobId=… ExcNodeList=…` on a pending job.
    pub fn set_exclusions(
        &mut self,
        job_id: &str,
        nodes: &[String],
        out: &mut Output,
    ) -> Result<ActionOutcome, BackendError> {
        let (index, job) = self.job_of(job_id)?;
        if !matches!(job.phase, Phase::Pending(_)) {
            return Err(BackendError::Invalid(format!(
                "job {job_id} is not pending: its exclusions cannot change"
            )));
        }
        self.check_exclusion(nodes, job.spec.nodes)?;
        if let Some(job) = self.state.jobs.get_mut(index) {
            job.excluded = nodes.to_vec();
        }
        out.changed = true;
        Ok(ActionOutcome {
            detail: format!("job {job_id} excludes {}", nodes.join(",")),
            new_job_id: None,
        })
    }

    /// Every job, as the scheduler would show it at `now_ms`.
    pub fn snapshots(&self, now_ms: i64) -> Vec<JobSnapshot> {
        let reasons = self.pending_reasons(now_ms);
        self.state
            .jobs
            .iter()
            .enumerate()
            .map(|(index, job)| self.snapshot_of(job, reasons.get(&index).copied(), now_ms))
            .collect()
    }

    /// One job, as the scheduler would show it at `now_ms`.
    pub fn snapshot(&self, job_id: &str, now_ms: i64) -> Option<JobSnapshot> {
        let index = self.index_of(job_id).ok()?;
        let job = self.state.jobs.get(index)?;
        let reasons = self.pending_reasons(now_ms);
        Some(self.snapshot_of(job, reasons.get(&index).copied(), now_ms))
    }

    /// Slurm's reason for each pending job: the head of the queue waits for `Resources`, the jobs behind
    /// it for `Priority`.
    fn pending_reasons(&self, now_ms: i64) -> BTreeMap<usize, &'static str> {
        let mut reasons = BTreeMap::new();
        let mut head_seen = false;
        for (index, job) in self.state.jobs.iter().enumerate() {
            let Phase::Pending(pending) = &job.phase else {
                continue;
            };
            if pending
                .requeued_until_ms
                .is_some_and(|until| now_ms < until)
            {
                continue;
            }
            let reason = if now_ms < pending.eligible_ms {
                if pending.requeued_until_ms.is_some() {
                    "BeginTime"
                } else {
                    "Priority"
                }
            } else {
                match self.placement(index) {
                    Placement::Never => "ReqNodeNotAvail",
                    _ if head_seen => "Priority",
                    _ => {
                        head_seen = true;
                        "Resources"
                    }
                }
            };
            reasons.insert(index, reason);
        }
        reasons
    }

    fn snapshot_of(&self, job: &Job, reason: Option<&str>, now_ms: i64) -> JobSnapshot {
        let raw = raw_state(job, now_ms);
        let reason = match job.phase {
            Phase::Pending(_) => reason.map(str::to_string),
            Phase::Failed => Some("NonZeroExitCode".to_string()),
            _ => None,
        };
        let nodes = match job.phase {
            Phase::Pending(_) => Vec::new(),
            _ => job.alloc.clone(),
        };
        JobSnapshot {
            job_id: job.id.to_string(),
            name: job.spec.name.clone(),
            user: job.spec.user.clone(),
            state: sim_state(job, now_ms),
            state_raw: raw.to_string(),
            reason,
            hold: None,
            nodes,
            gpus: job.spec.nodes * job.spec.gpus_per_node,
            submit_time: time(Some(job.submit_ms)),
            start_time: time(job.start_ms),
            end_time: time(job.end_ms),
            exit_code: job.exit_code,
            restart_count: job.restart_count,
            excluded_nodes: job.excluded.clone(),
            log_path: Some(self.dir.join(log_file(job))),
            spec: job.spec.clone(),
            limits: job.limits.clone(),
            tag: job.tag.clone(),
        }
    }

    /// The Slurm command line an action amounts to, for display.
    pub fn command_for(&self, kind: ActionKind, params: &ActionParams) -> String {
        let job_id = params.job_id.as_deref().unwrap_or("<job>");
        let exclude = params.exclude_nodes.join(",");
        match kind {
            ActionKind::Requeue if exclude.is_empty() => format!("scontrol requeue {job_id}"),
            ActionKind::Requeue => format!(
                "scontrol requeuehold {job_id} && scontrol update JobId={job_id} ExcNodeList={exclude} && scontrol release {job_id}"
            ),
            ActionKind::Resubmit => {
                let job = self
                    .index_of(job_id)
                    .ok()
                    .and_then(|index| self.state.jobs.get(index));
                let mut command = String::from("sbatch");
                if let Some(job) = job {
                    command.push_str(&format!(
                        " --job-name={} --nodes={} --gpus-per-node={}",
                        job.spec.name, job.spec.nodes, job.spec.gpus_per_node
                    ));
                    if let Some(partition) = &job.spec.partition {
                        command.push_str(&format!(" --partition={partition}"));
                    }
                }
                if !exclude.is_empty() {
                    command.push_str(&format!(" --exclude={exclude}"));
                }
                match job.and_then(|job| job.spec.command.as_deref()) {
                    Some(script) => command.push_str(&format!(" {script}")),
                    None => command.push_str(&format!(" <script of job {job_id}>")),
                }
                command
            }
            ActionKind::Cancel => format!("scancel {job_id}"),
            ActionKind::Hold => format!("scontrol hold {job_id}"),
            ActionKind::Release => format!("scontrol release {job_id}"),
            ActionKind::DrainNode => {
                let node = params.node.as_deref().unwrap_or("<node>");
                let reason = params
                    .reason
                    .as_deref()
                    .unwrap_or("runguard")
                    .replace('"', "'");
                format!("scontrol update NodeName={node} State=DRAIN Reason=\"{reason}\"")
            }
            ActionKind::Recreate => {
                format!("(a simulated job's spec cannot be changed) re-create {job_id}")
            }
            ActionKind::UpdateExclusions => {
                format!("scontrol update JobId={job_id} ExcNodeList={exclude}")
            }
            ActionKind::Submit => "sbatch --parsable (the phase's batch script)".to_string(),
            ActionKind::CheckpointNow => format!(
                "scancel --signal={} --batch {job_id}",
                params.signal.as_deref().unwrap_or("USR1")
            ),
            ActionKind::ResumeNode => format!(
                "scontrol update NodeName={} State=RESUME",
                params.node.as_deref().unwrap_or("<node>")
            ),
        }
    }
}

/// The state word Slurm would print for the job at `now_ms`.
fn raw_state(job: &Job, now_ms: i64) -> &'static str {
    match &job.phase {
        Phase::Pending(pending)
            if pending
                .requeued_until_ms
                .is_some_and(|until| now_ms < until) =>
        {
            "REQUEUED"
        }
        Phase::Pending(_) => "PENDING",
        Phase::Running(_) => "RUNNING",
        Phase::Completed => "COMPLETED",
        Phase::Failed => "FAILED",
        Phase::Cancelled => "CANCELLED",
    }
}

/// The model's state of a job, as its Slurm-style word above reads.
fn sim_state(job: &Job, now_ms: i64) -> JobState {
    match (&job.phase, raw_state(job, now_ms)) {
        (_, "REQUEUED") => JobState::Requeued,
        (Phase::Pending(_), _) => JobState::Pending,
        (Phase::Running(_), _) => JobState::Running,
        (Phase::Completed, _) => JobState::Completed,
        (Phase::Failed, _) => JobState::Failed,
        (Phase::Cancelled, _) => JobState::Cancelled,
    }
}

fn time(ms: Option<i64>) -> Option<DateTime<Utc>> {
    ms.and_then(DateTime::from_timestamp_millis)
}
