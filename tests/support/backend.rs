//! The scripted scheduler: the jobs the test sets, a [`Script`] for what it does when asked to act,
//! and a record of every call the engine made. Wrapped around a real backend instead, it passes the
//! calls on and only its script's [`Script::interrupt`] applies (a scheduler that goes down).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use runguard_engine::backend::{
    ActionOutcome, Backend, BackendError, Can, Capabilities, JobSnapshot, NewJob, NodeCapacity,
};
use runguard_engine::clock::Clock;
use runguard_engine::model::BackendKind;
use runguard_engine::model::{ActionKind, ActionParams, JobSpec, JobState, SpecChange};

/// What the scripted scheduler does when the engine acts. Every method has a default: accept and
/// change nothing (hold and release: unsupported, as for a backend without them).
pub trait Script: Send + Sync + 'static {
    /// Before every call: an error here is the scheduler's answer instead (it is down, it refuses).
    /// `calls_before` counts the calls made before this one.
    fn interrupt(&self, _calls_before: usize, _now: DateTime<Utc>) -> Option<BackendError> {
        None
    }

    fn requeue(
        &self,
        _jobs: &mut [JobSnapshot],
        _job_id: &str,
        _exclude: &[String],
    ) -> Result<ActionOutcome, BackendError> {
        Ok(ActionOutcome::default())
    }

    fn resubmit(
        &self,
        _jobs: &mut Vec<JobSnapshot>,
        _spec: &JobSpec,
        _exclude: &[String],
        _tag: &str,
    ) -> Result<ActionOutcome, BackendError> {
        Ok(ActionOutcome::default())
    }

    fn cancel(
        &self,
        _jobs: &mut [JobSnapshot],
        _job_id: &str,
    ) -> Result<ActionOutcome, BackendError> {
        Ok(ActionOutcome::default())
    }

    /// A new job: by default queued as `new-N` (N: the jobs listed before it), pending, with its tag.
    fn submit(
        &self,
        jobs: &mut Vec<JobSnapshot>,
        job: &NewJob,
    ) -> Result<ActionOutcome, BackendError> {
        let id = format!("new-{}", jobs.len());
        let mut snapshot: JobSnapshot = super::job::job(&id).named(&job.name).build();
        snapshot.state = JobState::Pending;
        snapshot.state_raw = "PENDING".into();
        snapshot.start_time = None;
        snapshot.tag = Some(job.tag.clone());
        snapshot.spec.nodes = job.nodes.unwrap_or(1);
        jobs.push(snapshot);
        Ok(ActionOutcome {
            detail: format!("submitted {} as job {id}", job.name),
            new_job_id: Some(id),
        })
    }

    fn drain_node(&self, _node: &str, _reason: &str) -> Result<ActionOutcome, BackendError> {
        Ok(ActionOutcome::default())
    }

    fn hold(&self, _jobs: &mut [JobSnapshot], job_id: &str) -> Result<ActionOutcome, BackendError> {
        Err(BackendError::Invalid(format!(
            "scripted cannot hold job {job_id}"
        )))
    }

    fn release(
        &self,
        _jobs: &mut [JobSnapshot],
        job_id: &str,
    ) -> Result<ActionOutcome, BackendError> {
        Err(BackendError::Invalid(format!(
            "scripted cannot release job {job_id}"
        )))
    }

    /// The nodes that could run the job now and ever; `None`: the scheduler cannot tell.
    fn usable_nodes(
        &self,
        _job_id: &str,
        _spec: &JobSpec,
    ) -> Result<Option<NodeCapacity>, BackendError> {
        Ok(None)
    }
}

/// The script that accepts everything and changes nothing.
pub struct Accepting;

impl Script for Accepting {}

/// One call the engine made.
#[derive(Debug, Clone, PartialEq)]
pub enum Call {
    ListJobs,
    Job(String),
    Requeue {
        job_id: String,
        exclude: Vec<String>,
    },
    Resubmit {
        name: String,
        exclude: Vec<String>,
        tag: String,
    },
    Recreate {
        job_id: String,
        exclude: Vec<String>,
        changes: Vec<SpecChange>,
    },
    Cancel(String),
    Submit {
        name: String,
        tag: String,
    },
    DrainNode {
        node: String,
        reason: String,
    },
    Hold(String),
    Release(String),
    UsableNodes(String),
    DeadNodes(Vec<String>),
    SetExclusions {
        job_id: String,
        nodes: Vec<String>,
    },
    ResumeNode {
        node: String,
        reason: String,
    },
    Signal {
        job_id: String,
        signal: String,
    },
}

/// A call and when it was made, by the test's clock.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub at: DateTime<Utc>,
    pub call: Call,
}

/// Where the jobs come from.
enum Jobs {
    /// The test's.
    Scripted(Mutex<Vec<JobSnapshot>>),
    /// A real backend's, which also acts.
    Wrapped(Arc<dyn Backend>),
}

pub struct ScriptedBackend {
    jobs: Jobs,
    script: Box<dyn Script>,
    clock: Arc<dyn Clock>,
    calls: Mutex<Vec<Recorded>>,
    /// Nodes the scheduler says are dead, with its words for them.
    dead: Mutex<Vec<(String, String)>>,
    /// Drained nodes with their reason, as the scheduler keeps them.
    drained: Mutex<Vec<(String, String)>>,
    /// Jobs whose processes take no signal (as a Ray workload's on Kubernetes).
    unsignalable: Mutex<Vec<String>>,
    /// How long a listing takes, in real time, and whether it reads a cache of the backend's own
    /// (as watch streams are) rather than asking the controller.
    listing: Mutex<(std::time::Duration, bool)>,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl ScriptedBackend {
    /// A scheduler with no jobs yet, acting as `script` says.
    pub fn new(script: impl Script, clock: Arc<dyn Clock>) -> Self {
        Self {
            jobs: Jobs::Scripted(Mutex::new(Vec::new())),
            script: Box::new(script),
            clock,
            calls: Mutex::new(Vec::new()),
            dead: Mutex::new(Vec::new()),
            drained: Mutex::new(Vec::new()),
            unsignalable: Mutex::new(Vec::new()),
            listing: Mutex::new((std::time::Duration::ZERO, false)),
        }
    }

    /// From now on a listing takes `took` of real time; `from_cache` as
    /// [`Backend::lists_from_cache`] says.
    pub fn list_slowly(&self, took: std::time::Duration, from_cache: bool) {
        *lock(&self.listing) = (took, from_cache);
    }

    /// From now on `job_id` takes no signal, as a backend says of a kind of job it cannot signal.
    pub fn refuse_signals(&self, job_id: &str) {
        lock(&self.unsignalable).push(job_id.to_string());
    }

    /// An administrator drains `node` with `reason`.
    pub fn drain_by_admin(&self, node: &str, reason: &str) {
        lock(&self.drained).push((node.to_string(), reason.to_string()));
    }

    /// The drained nodes with their reasons.
    pub fn drained(&self) -> Vec<(String, String)> {
        lock(&self.drained).clone()
    }

    /// The scheduler says `node` is dead (`how`: its words) from now on.
    pub fn kill_node(&self, node: &str, how: &str) {
        lock(&self.dead).push((node.into(), how.into()));
    }

    /// How many times the jobs were listed so far.
    pub fn listings(&self) -> usize {
        self.calls()
            .iter()
            .filter(|recorded| recorded.call == Call::ListJobs)
            .count()
    }

    /// `inner`, recorded, and interrupted when `script` says so.
    pub fn wrapping(inner: Arc<dyn Backend>, script: impl Script, clock: Arc<dyn Clock>) -> Self {
        Self {
            jobs: Jobs::Wrapped(inner),
            ..Self::new(script, clock)
        }
    }

    fn scripted(&self) -> MutexGuard<'_, Vec<JobSnapshot>> {
        match &self.jobs {
            Jobs::Scripted(jobs) => lock(jobs),
            Jobs::Wrapped(_) => panic!("the jobs of a wrapped backend are its own"),
        }
    }

    fn inner(&self) -> Option<&Arc<dyn Backend>> {
        match &self.jobs {
            Jobs::Wrapped(inner) => Some(inner),
            Jobs::Scripted(_) => None,
        }
    }

    /// Adds jobs the scheduler reports from now on.
    pub fn add<J: Into<JobSnapshot>>(&self, jobs: impl IntoIterator<Item = J>) {
        self.scripted().extend(jobs.into_iter().map(Into::into));
    }

    /// Changes a job as the scheduler would report it from now on.
    pub fn update(&self, job_id: &str, change: impl FnOnce(&mut JobSnapshot)) {
        let mut jobs = self.scripted();
        let job = jobs
            .iter_mut()
            .find(|job| job.job_id == job_id)
            .unwrap_or_else(|| panic!("no scripted job {job_id}"));
        change(job);
    }

    /// The job failed with exit code 1.
    pub fn fail(&self, job_id: &str) {
        self.update(job_id, |job| {
            job.state = JobState::Failed;
            job.state_raw = "FAILED".into();
            job.exit_code = Some(1);
        });
    }

    /// Every call so far, in order.
    pub fn calls(&self) -> Vec<Recorded> {
        lock(&self.calls).clone()
    }

    /// The nodes each requeue excluded, in order.
    pub fn requeues(&self) -> Vec<Vec<String>> {
        self.calls()
            .into_iter()
            .filter_map(|recorded| match recorded.call {
                Call::Requeue { exclude, .. } => Some(exclude),
                _ => None,
            })
            .collect()
    }

    /// Records the call; the script's interruption, if any.
    fn answer(&self, call: Call) -> Result<(), BackendError> {
        let now = self.clock.now();
        let calls_before = {
            let mut calls = lock(&self.calls);
            calls.push(Recorded { at: now, call });
            calls.len() - 1
        };
        match self.script.interrupt(calls_before, now) {
            Some(err) => Err(err),
            None => Ok(()),
        }
    }
}

// The only `impl Backend` of the tests: a change to the trait is one edit here.
#[async_trait]
impl Backend for ScriptedBackend {
    /// A wrapped backend's own; on its own, a scheduler shaped like Slurm (it holds and releases).
    fn kind(&self) -> BackendKind {
        match self.inner() {
            Some(inner) => inner.kind(),
            None => BackendKind::Slurm,
        }
    }

    /// A wrapped backend's own; on its own, what the scripted scheduler answers to.
    fn capabilities(&self) -> Capabilities {
        match self.inner() {
            Some(inner) => inner.capabilities(),
            None => Capabilities::of(&[
                Can::Requeue,
                Can::Resubmit,
                Can::Hold,
                Can::Drain,
                Can::UsableNodes,
                Can::UpdateExclusions,
                Can::Signal,
            ]),
        }
    }

    fn lists_from_cache(&self) -> bool {
        match self.inner() {
            Some(inner) => inner.lists_from_cache(),
            None => lock(&self.listing).1,
        }
    }

    async fn list_jobs(&self) -> Result<Vec<JobSnapshot>, BackendError> {
        self.answer(Call::ListJobs)?;
        let took = lock(&self.listing).0;
        if !took.is_zero() {
            tokio::time::sleep(took).await;
        }
        match self.inner() {
            Some(inner) => inner.list_jobs().await,
            None => Ok(self.scripted().clone()),
        }
    }

    async fn job(&self, job_id: &str) -> Result<Option<JobSnapshot>, BackendError> {
        self.answer(Call::Job(job_id.into()))?;
        match self.inner() {
            Some(inner) => inner.job(job_id).await,
            None => Ok(self
                .scripted()
                .iter()
                .find(|job| job.job_id == job_id)
                .cloned()),
        }
    }

    async fn requeue(
        &self,
        job_id: &str,
        exclude: &[String],
    ) -> Result<ActionOutcome, BackendError> {
        self.answer(Call::Requeue {
            job_id: job_id.into(),
            exclude: exclude.to_vec(),
        })?;
        match self.inner() {
            Some(inner) => inner.requeue(job_id, exclude).await,
            None => self.script.requeue(&mut self.scripted(), job_id, exclude),
        }
    }

    async fn resubmit(
        &self,
        spec: &JobSpec,
        exclude: &[String],
        tag: &str,
    ) -> Result<ActionOutcome, BackendError> {
        self.answer(Call::Resubmit {
            name: spec.name.clone(),
            exclude: exclude.to_vec(),
            tag: tag.into(),
        })?;
        match self.inner() {
            Some(inner) => inner.resubmit(spec, exclude, tag).await,
            None => self
                .script
                .resubmit(&mut self.scripted(), spec, exclude, tag),
        }
    }

    async fn recreate(
        &self,
        job_id: &str,
        exclude: &[String],
        changes: &[SpecChange],
    ) -> Result<ActionOutcome, BackendError> {
        self.answer(Call::Recreate {
            job_id: job_id.into(),
            exclude: exclude.to_vec(),
            changes: changes.to_vec(),
        })?;
        match self.inner() {
            Some(inner) => inner.recreate(job_id, exclude, changes).await,
            None => Err(BackendError::Invalid(format!(
                "scripted cannot change the spec of job {job_id}"
            ))),
        }
    }

    async fn submit(&self, job: &NewJob) -> Result<ActionOutcome, BackendError> {
        self.answer(Call::Submit {
            name: job.name.clone(),
            tag: job.tag.clone(),
        })?;
        match self.inner() {
            Some(inner) => inner.submit(job).await,
            None => self.script.submit(&mut self.scripted(), job),
        }
    }

    async fn cancel(&self, job_id: &str) -> Result<ActionOutcome, BackendError> {
        self.answer(Call::Cancel(job_id.into()))?;
        match self.inner() {
            Some(inner) => inner.cancel(job_id).await,
            None => self.script.cancel(&mut self.scripted(), job_id),
        }
    }

    async fn drain_node(&self, node: &str, reason: &str) -> Result<ActionOutcome, BackendError> {
        self.answer(Call::DrainNode {
            node: node.into(),
            reason: reason.into(),
        })?;
        match self.inner() {
            Some(inner) => inner.drain_node(node, reason).await,
            None => {
                let outcome = self.script.drain_node(node, reason)?;
                let mut drained = lock(&self.drained);
                if !drained.iter().any(|(name, _)| name == node) {
                    drained.push((node.to_string(), reason.to_string()));
                }
                Ok(outcome)
            }
        }
    }

    async fn set_exclusions(
        &self,
        job_id: &str,
        nodes: &[String],
    ) -> Result<ActionOutcome, BackendError> {
        self.answer(Call::SetExclusions {
            job_id: job_id.into(),
            nodes: nodes.to_vec(),
        })?;
        if let Some(inner) = self.inner() {
            return inner.set_exclusions(job_id, nodes).await;
        }
        let mut jobs = self.scripted();
        match jobs.iter_mut().find(|job| job.job_id == job_id) {
            Some(job) if job.state == JobState::Pending => {
                job.excluded_nodes = nodes.to_vec();
                Ok(ActionOutcome::default())
            }
            _ => Err(BackendError::Invalid(format!(
                "job {job_id} is not pending"
            ))),
        }
    }

    fn can_signal(&self, job_id: &str) -> bool {
        let refused = lock(&self.unsignalable).iter().any(|job| job == job_id);
        !refused
            && match self.inner() {
                Some(inner) => inner.can_signal(job_id),
                None => self.capabilities().signal,
            }
    }

    async fn signal_job(&self, job_id: &str, signal: &str) -> Result<ActionOutcome, BackendError> {
        self.answer(Call::Signal {
            job_id: job_id.into(),
            signal: signal.into(),
        })?;
        match self.inner() {
            Some(inner) => inner.signal_job(job_id, signal).await,
            None => Ok(ActionOutcome::default()),
        }
    }

    async fn resume_node(&self, node: &str, reason: &str) -> Result<ActionOutcome, BackendError> {
        self.answer(Call::ResumeNode {
            node: node.into(),
            reason: reason.into(),
        })?;
        if let Some(inner) = self.inner() {
            return inner.resume_node(node, reason).await;
        }
        let mut drained = lock(&self.drained);
        drained.retain(|(name, current)| name != node || current != reason);
        Ok(ActionOutcome::default())
    }

    fn command_for(&self, kind: ActionKind, params: &ActionParams) -> String {
        match self.inner() {
            Some(inner) => inner.command_for(kind, params),
            None => kind.as_str().to_string(),
        }
    }

    fn node_log(&self, node: &str) -> Option<PathBuf> {
        self.inner().and_then(|inner| inner.node_log(node))
    }

    async fn dead_nodes(
        &self,
        nodes: &[String],
    ) -> Result<Option<Vec<(String, String)>>, BackendError> {
        self.answer(Call::DeadNodes(nodes.to_vec()))?;
        if let Some(inner) = self.inner() {
            return inner.dead_nodes(nodes).await;
        }
        Ok(Some(
            lock(&self.dead)
                .iter()
                .filter(|(node, _)| nodes.contains(node))
                .cloned()
                .collect(),
        ))
    }

    async fn hold(&self, job_id: &str) -> Result<ActionOutcome, BackendError> {
        self.answer(Call::Hold(job_id.into()))?;
        match self.inner() {
            Some(inner) => inner.hold(job_id).await,
            None => self.script.hold(&mut self.scripted(), job_id),
        }
    }

    async fn release(&self, job_id: &str) -> Result<ActionOutcome, BackendError> {
        self.answer(Call::Release(job_id.into()))?;
        match self.inner() {
            Some(inner) => inner.release(job_id).await,
            None => self.script.release(&mut self.scripted(), job_id),
        }
    }

    fn set_waker(&self, waker: Arc<tokio::sync::Notify>) {
        if let Some(inner) = self.inner() {
            inner.set_waker(waker);
        }
    }

    fn set_watched(&self, job_refs: &[String]) {
        if let Some(inner) = self.inner() {
            inner.set_watched(job_refs);
        }
    }

    async fn usable_nodes(
        &self,
        job_id: &str,
        spec: &JobSpec,
    ) -> Result<Option<NodeCapacity>, BackendError> {
        self.answer(Call::UsableNodes(job_id.to_string()))?;
        match self.inner() {
            Some(inner) => inner.usable_nodes(job_id, spec).await,
            None => self.script.usable_nodes(job_id, spec),
        }
    }
}
