//! The simulated month written into a store as the engine records a real one.

use super::{GPUS_PER_NODE, SimulatedMonth};
use crate::model::{
    Action, ActionKind, ActionParams, ActionState, Anomaly, AnomalyKind, Attempt, BackendKind,
    JobSpec, JobState, RecoveryLimits, ThroughputSample, Workflow, WorkflowStatus,
};
use crate::store::{Store, StoreError};

impl SimulatedMonth {
    /// Writes the month into `store` as the engine records it: one workflow per job with its attempts,
    /// a crash anomaly, a done requeue and the first throughput after each recovery, and every listing.
    pub fn store(&self, store: &mut Store) -> Result<(), StoreError> {
        store.write(|db| {
            for job in &self.jobs {
                let spec = JobSpec {
                    name: format!("train-{}", job.job_id),
                    user: "ml".to_string(),
                    nodes: job.nodes,
                    gpus_per_node: GPUS_PER_NODE,
                    partition: Some(job.partition.clone()),
                    ..JobSpec::default()
                };
                let first = job.attempts.first().map_or(self.start, |a| a.submitted);
                let mut workflow = Workflow::enrolled(
                    spec.name.clone(),
                    BackendKind::Slurm,
                    spec,
                    RecoveryLimits::default(),
                    first,
                );
                let last = job.attempts.last();
                let completed = last.is_some_and(|a| a.ended.is_some() && a.failure.is_none());
                if completed {
                    workflow.status = WorkflowStatus::Completed;
                    workflow.succeeded = true;
                }
                workflow.requeues_used = job.attempts.len().saturating_sub(1) as u32;
                workflow.updated_at = last.and_then(|a| a.ended.or(a.started)).unwrap_or(first);
                let id = db.insert_workflow(&workflow)?;
                for (index, attempt) in job.attempts.iter().enumerate() {
                    let index = index as u32;
                    let state = match (attempt.started, attempt.ended, &attempt.failure) {
                        (_, Some(_), Some(_)) => JobState::Failed,
                        (_, Some(_), None) => JobState::Completed,
                        (Some(_), None, _) => JobState::Running,
                        (None, None, _) => JobState::Pending,
                    };
                    db.save_attempt(&Attempt {
                        workflow_id: id,
                        index,
                        job_id: job.job_id.clone(),
                        restart_count: index,
                        nodes: attempt.nodes.clone(),
                        gpus: job.gpus(),
                        state,
                        state_raw: state.as_str().to_uppercase(),
                        reason: None,
                        submit_time: Some(attempt.submitted),
                        start_time: attempt.started,
                        end_time: attempt.ended,
                        exit_code: None,
                        excluded_nodes: Vec::new(),
                        log_path: None,
                        last_log_time: None,
                        last_iteration: None,
                        last_progress_time: None,
                        updated_at: attempt
                            .ended
                            .or(attempt.started)
                            .unwrap_or(attempt.submitted),
                    })?;
                    if let Some(resumed) = attempt.resumed {
                        db.insert_throughput(&ThroughputSample {
                            workflow_id: id,
                            attempt_index: index,
                            time: resumed,
                            iteration: 1,
                            tflops_per_gpu: 400.0,
                            rank: None,
                            node: None,
                        })?;
                    }
                    if let Some(failure) = &attempt.failure {
                        db.insert_anomaly(&Anomaly {
                            id: 0,
                            workflow_id: id,
                            attempt_index: index,
                            kind: AnomalyKind::Crash,
                            time: failure.detected,
                            summary: format!("crash on {}", failure.node),
                            evidence: Vec::new(),
                        })?;
                        db.insert_action(&Action {
                            id: 0,
                            workflow_id: id,
                            attempt_index: index,
                            kind: ActionKind::Requeue,
                            params: ActionParams::default(),
                            state: ActionState::Done,
                            permitted: true,
                            why: format!("{} failed", failure.node),
                            command: None,
                            result: None,
                            created_at: failure.planned,
                            updated_at: failure.requeued,
                        })?;
                    }
                }
            }
            // The listings are in time order: each instant's jobs follow the previous instant's.
            let mut at = 0;
            for instant in &self.instants {
                let jobs = self.queue[at..]
                    .iter()
                    .take_while(|s| s.time == instant.time);
                let count = jobs.clone().count();
                db.record_job_listing(instant, jobs)?;
                at += count;
            }
            let mut at = 0;
            while at < self.node_samples.len() {
                let time = self.node_samples[at].time;
                let end = self.node_samples[at..]
                    .iter()
                    .position(|s| s.time != time)
                    .map_or(self.node_samples.len(), |n| at + n);
                db.record_node_listing(&self.node_samples[at..end])?;
                at = end;
            }
            Ok(())
        })
    }
}
