//! Job snapshots as a scheduler reports them, built from sensible defaults:
//! `job("4201").running_on(["n1", "n2"]).log(path).build()`.

use std::path::PathBuf;

use runguard_engine::backend::JobSnapshot;
use runguard_engine::model::{JobSpec, JobState, RecoveryLimits};

use super::start_time;

/// A job being built; [`JobBuilder::build`] (or `into()`) gives the snapshot.
#[derive(Debug, Clone)]
pub struct JobBuilder(JobSnapshot);

/// Job `id`: `train-ID` of user alice, running on no node yet with 8 GPUs a node, submitted and
/// started at [`start_time`], no log.
pub fn job(id: &str) -> JobBuilder {
    let name = format!("train-{id}");
    JobBuilder(JobSnapshot {
        job_id: id.into(),
        name: name.clone(),
        user: "alice".into(),
        state: JobState::Running,
        state_raw: "RUNNING".into(),
        reason: None,
        hold: None,
        nodes: vec![],
        gpus: 0,
        submit_time: Some(start_time()),
        start_time: Some(start_time()),
        end_time: None,
        exit_code: None,
        restart_count: 0,
        excluded_nodes: vec![],
        log_path: None,
        spec: JobSpec {
            name,
            user: "alice".into(),
            nodes: 0,
            gpus_per_node: 8,
            ..JobSpec::default()
        },
        limits: RecoveryLimits::default(),
        tag: None,
    })
}

/// `job` put back in the queue under its id, as a requeue leaves it: pending for `reason` on no
/// node, not started, its restart count now `restart_count`.
pub fn queued_again(job: &mut JobSnapshot, restart_count: u32, reason: Option<&str>) {
    job.state = JobState::Pending;
    job.state_raw = "PENDING".into();
    job.reason = reason.map(Into::into);
    job.restart_count = restart_count;
    job.nodes.clear();
    job.start_time = None;
}

impl JobBuilder {
    /// The job's name and the name it is submitted again under.
    pub fn named(mut self, name: &str) -> Self {
        self.0.name = name.into();
        self.0.spec.name = name.into();
        self
    }

    /// Running on `nodes`, each with the spec's GPUs a node.
    pub fn running_on<S: Into<String>>(mut self, nodes: impl IntoIterator<Item = S>) -> Self {
        self.0.nodes = nodes.into_iter().map(Into::into).collect();
        self.0.spec.nodes = self.0.nodes.len() as u32;
        self.0.gpus = self.0.spec.gpus_per_node * self.0.spec.nodes;
        self.state(JobState::Running)
    }

    /// Waiting in the queue for `reason`: on no node and not started, its request unchanged.
    pub fn pending(mut self, reason: &str) -> Self {
        self.0.reason = Some(reason.into());
        self.0.nodes.clear();
        self.0.start_time = None;
        self.state(JobState::Pending)
    }

    /// The state, and the scheduler's word for it.
    pub fn state(mut self, state: JobState) -> Self {
        self.0.state = state;
        self.0.state_raw = format!("{state:?}").to_uppercase();
        self
    }

    /// Where the job writes its unified log.
    pub fn log(mut self, path: impl Into<PathBuf>) -> Self {
        self.0.log_path = Some(path.into());
        self
    }

    /// Waits for job `upstream` to succeed.
    pub fn after(mut self, upstream: &str) -> Self {
        self.0.spec.dependency = Some(upstream.into());
        self
    }

    pub fn build(self) -> JobSnapshot {
        self.0
    }
}

impl From<JobBuilder> for JobSnapshot {
    fn from(job: JobBuilder) -> Self {
        job.build()
    }
}
