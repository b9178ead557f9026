//! Attribution across jobs through the engine: a node that fails several jobs, and a job blocked by a
//! failed upstream dependency.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use runguard::status::{StatusReport, report};
use runguard_engine::attribute::Catalog;
use runguard_engine::backend::{ActionOutcome, Backend, BackendError, JobSnapshot};
use runguard_engine::clock::{Clock, ManualClock};
use runguard_engine::config::Config;
use runguard_engine::engine::{Engine, EngineOptions};
use runguard_engine::model::{
    ActionKind, ActionParams, AnomalyKind, JobSpec, JobState, RecoveryLimits,
};
use runguard_engine::recover::Policy;
use runguard_engine::store::Store;

fn start() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-05T08:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

/// Jobs whose states the test sets.
struct Jobs {
    jobs: Mutex<Vec<JobSnapshot>>,
}

#[async_trait]
impl Backend for Jobs {
    fn name(&self) -> &str {
        "scripted"
    }

    fn capabilities(&self) -> runguard_engine::backend::Capabilities {
        runguard_engine::backend::Capabilities {
            requeue: true,
            resubmit: true,
            drain: true,
            ..Default::default()
        }
    }
    async fn list_jobs(&self) -> Result<Vec<JobSnapshot>, BackendError> {
        Ok(self.jobs.lock().unwrap().clone())
    }
    async fn job(&self, job_id: &str) -> Result<Option<JobSnapshot>, BackendError> {
        Ok(self
            .jobs
            .lock()
            .unwrap()
            .iter()
            .find(|j| j.job_id == job_id)
            .cloned())
    }
    async fn requeue(&self, _: &str, _: &[String]) -> Result<ActionOutcome, BackendError> {
        Ok(ActionOutcome::default())
    }
    async fn resubmit(
        &self,
        _: &JobSpec,
        _: &[String],
        _: &str,
    ) -> Result<ActionOutcome, BackendError> {
        Ok(ActionOutcome::default())
    }
    async fn cancel(&self, _: &str) -> Result<ActionOutcome, BackendError> {
        Ok(ActionOutcome::default())
    }
    async fn drain_node(&self, _: &str, _: &str) -> Result<ActionOutcome, BackendError> {
        Ok(ActionOutcome::default())
    }
    fn command_for(&self, kind: ActionKind, _: &ActionParams) -> String {
        kind.as_str().to_string()
    }
    fn node_log(&self, _: &str) -> Option<PathBuf> {
        None
    }
}

fn job(id: &str, state: JobState, nodes: &[&str], log: PathBuf) -> JobSnapshot {
    JobSnapshot {
        job_id: id.into(),
        name: format!("train-{id}"),
        user: "alice".into(),
        state,
        state_raw: format!("{state:?}").to_uppercase(),
        reason: None,
        hold: None,
        nodes: nodes.iter().map(|n| n.to_string()).collect(),
        gpus: 8 * nodes.len() as u32,
        submit_time: Some(start()),
        start_time: Some(start()),
        end_time: None,
        exit_code: None,
        restart_count: 0,
        excluded_nodes: vec![],
        log_path: Some(log),
        spec: JobSpec {
            name: format!("train-{id}"),
            nodes: nodes.len() as u32,
            gpus_per_node: 8,
            ..JobSpec::default()
        },
        limits: RecoveryLimits::default(),
        tag: None,
    }
}

struct Rig {
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    backend: Arc<Jobs>,
}

impl Rig {
    fn new(jobs: impl FnOnce(&std::path::Path) -> Vec<JobSnapshot>) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let jobs = jobs(dir.path());
        Self {
            clock: Arc::new(ManualClock::new(start())),
            backend: Arc::new(Jobs {
                jobs: Mutex::new(jobs),
            }),
            dir,
        }
    }

    fn engine(&self) -> Engine {
        Engine::new(
            Store::open(&self.dir.path().join("db.sqlite")).unwrap(),
            Arc::clone(&self.backend) as Arc<dyn Backend>,
            Arc::clone(&self.clock) as Arc<dyn Clock>,
            Config::default(),
            Catalog::builtin().unwrap(),
            EngineOptions { auto: true },
        )
    }

    fn fail(&self, id: &str) {
        let mut jobs = self.backend.jobs.lock().unwrap();
        let job = jobs.iter_mut().find(|j| j.job_id == id).unwrap();
        job.state = JobState::Failed;
        job.state_raw = "FAILED".into();
        job.exit_code = Some(1);
    }

    fn status(&self) -> StatusReport {
        let store = Store::open(&self.dir.path().join("db.sqlite")).unwrap();
        report(
            &store.db(),
            "t",
            &Policy::from_config(&Config::default().recovery, false),
            None,
        )
        .unwrap()
    }
}

#[tokio::test]
async fn three_jobs_failing_on_one_node_blame_the_node() {
    let rig = Rig::new(|dir| {
        vec![
            job(
                "11",
                JobState::Running,
                &["node-01", "node-09"],
                dir.join("11.log"),
            ),
            job(
                "12",
                JobState::Running,
                &["node-09", "node-02"],
                dir.join("12.log"),
            ),
            job(
                "13",
                JobState::Running,
                &["node-03", "node-09"],
                dir.join("13.log"),
            ),
        ]
    });
    let mut engine = rig.engine();
    engine.tick().await.unwrap();
    for id in ["11", "12", "13"] {
        rig.clock.advance(Duration::from_secs(30));
        rig.fail(id);
        engine.tick().await.unwrap();
    }
    let status = rig.status();
    let third = status
        .workflows
        .iter()
        .find(|w| w.workflow.name == "train-13")
        .unwrap();
    let attribution = &third.attributions[0];
    assert_eq!(
        attribution.culprit.node.as_deref(),
        Some("node-09"),
        "{attribution:?}"
    );
    assert_eq!(attribution.category, "node_failure");
    assert!(
        attribution
            .evidence
            .iter()
            .any(|l| l.starts_with("correlated:"))
    );
    // The first job alone had nothing to correlate with.
    let first = status
        .workflows
        .iter()
        .find(|w| w.workflow.name == "train-11")
        .unwrap();
    assert_eq!(first.attributions[0].category, "unknown");
}

#[tokio::test]
async fn a_job_blocked_by_a_failed_upstream_job_is_escalated_with_the_upstream_cause() {
    let rig = Rig::new(|dir| {
        std::fs::write(
            dir.join("76.log"),
            "3: [2026-01-05 08:01:00] [rank3]:[E0105 08:01:00.1 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600050 milliseconds before timing out.\n",
        )
        .unwrap();
        let upstream = job("76", JobState::Running, &["node-04"], dir.join("76.log"));
        let mut downstream = job("77", JobState::Pending, &[], dir.join("77.log"));
        downstream.reason = Some("DependencyNeverSatisfied".into());
        downstream.spec.dependency = Some("76".into());
        vec![upstream, downstream]
    });
    let mut engine = rig.engine();
    engine.tick().await.unwrap();
    rig.fail("76");
    rig.clock.advance(Duration::from_secs(5));
    engine.tick().await.unwrap();
    engine.tick().await.unwrap();
    let status = rig.status();
    let downstream = status
        .workflows
        .iter()
        .find(|w| w.workflow.name == "train-77")
        .unwrap();
    let anomaly = downstream
        .anomalies
        .iter()
        .find(|a| a.kind == AnomalyKind::StuckPending)
        .expect("escalated");
    assert!(
        anomaly.summary.contains("waits on job 76"),
        "{}",
        anomaly.summary
    );
    assert!(
        anomaly.summary.contains("nccl_timeout"),
        "{}",
        anomaly.summary
    );
}
