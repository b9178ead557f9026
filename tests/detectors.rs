//! Each detector firing and not firing, through the whole engine: a scripted backend reports one job
//! whose log the test writes line by line, and a manual clock moves time.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use runguard::status::{StatusReport, report};
use runguard_engine::attribute::Catalog;
use runguard_engine::backend::sim::{Scenario, SimCluster, SimOptions};
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

/// A scheduler with one job whose state the test sets; requeues are counted, not performed.
struct ScriptedBackend {
    job: Mutex<JobSnapshot>,
    requeues: Mutex<Vec<Vec<String>>>,
}

#[async_trait]
impl Backend for ScriptedBackend {
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
        Ok(vec![self.job.lock().unwrap().clone()])
    }
    async fn job(&self, _job_id: &str) -> Result<Option<JobSnapshot>, BackendError> {
        Ok(Some(self.job.lock().unwrap().clone()))
    }
    async fn requeue(
        &self,
        _job_id: &str,
        exclude: &[String],
    ) -> Result<ActionOutcome, BackendError> {
        self.requeues.lock().unwrap().push(exclude.to_vec());
        let mut job = self.job.lock().unwrap();
        job.restart_count += 1;
        job.state = JobState::Pending;
        job.state_raw = "PENDING".into();
        Ok(ActionOutcome {
            detail: "requeued".into(),
            new_job_id: None,
        })
    }
    async fn resubmit(
        &self,
        _: &JobSpec,
        _: &[String],
        _: &str,
    ) -> Result<ActionOutcome, BackendError> {
        Err(BackendError::Invalid("not scripted".into()))
    }
    async fn cancel(&self, _job_id: &str) -> Result<ActionOutcome, BackendError> {
        Ok(ActionOutcome::default())
    }
    async fn drain_node(&self, node: &str, _reason: &str) -> Result<ActionOutcome, BackendError> {
        Err(BackendError::Refused {
            command: format!("scontrol update NodeName={node} State=DRAIN"),
            message: "Access/permission denied".into(),
        })
    }
    fn command_for(&self, kind: ActionKind, _params: &ActionParams) -> String {
        kind.as_str().to_string()
    }
    fn node_log(&self, _node: &str) -> Option<PathBuf> {
        None
    }
}

struct Rig {
    dir: tempfile::TempDir,
    clock: Arc<ManualClock>,
    backend: Arc<ScriptedBackend>,
    config: Config,
    log: PathBuf,
}

impl Rig {
    fn new(state: JobState) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("train_77_0.log");
        std::fs::write(&log, b"").unwrap();
        let nodes: Vec<String> = ["node-01", "node-02"].map(String::from).to_vec();
        let job = JobSnapshot {
            job_id: "77".into(),
            name: "train".into(),
            user: "alice".into(),
            state,
            state_raw: format!("{state:?}").to_uppercase(),
            reason: (state == JobState::Pending).then(|| "ReqNodeNotAvail".to_string()),
            hold: None,
            nodes: if state == JobState::Pending {
                vec![]
            } else {
                nodes
            },
            gpus: 16,
            submit_time: Some(start()),
            start_time: (state == JobState::Running).then(start),
            end_time: None,
            exit_code: None,
            restart_count: 0,
            excluded_nodes: vec![],
            log_path: Some(log.clone()),
            spec: JobSpec {
                name: "train".into(),
                user: "alice".into(),
                nodes: 2,
                gpus_per_node: 8,
                ..JobSpec::default()
            },
            limits: RecoveryLimits::default(),
            tag: None,
        };
        Self {
            clock: Arc::new(ManualClock::new(start())),
            backend: Arc::new(ScriptedBackend {
                job: Mutex::new(job),
                requeues: Mutex::new(vec![]),
            }),
            config: Config::default(),
            log,
            dir,
        }
    }

    fn engine(&self) -> Engine {
        Engine::new(
            Store::open(&self.dir.path().join("db.sqlite")).unwrap(),
            Arc::clone(&self.backend) as Arc<dyn Backend>,
            Arc::clone(&self.clock) as Arc<dyn Clock>,
            self.config.clone(),
            Catalog::builtin().unwrap(),
            EngineOptions { auto: true },
        )
    }

    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    fn write(&self, bytes: &[u8]) {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.log)
            .unwrap();
        file.write_all(bytes).unwrap();
    }

    fn stamp(&self) -> String {
        self.now().format("%Y-%m-%d %H:%M:%S").to_string()
    }

    /// A Megatron iteration line from the last rank, stamped now.
    fn iteration(&self, iteration: u64, tflops: f64) {
        let line = format!(
            "15: [{}] iteration {iteration:>8}/   10000 | consumed samples: {:>12} | elapsed time per iteration (ms): 3000.0 | throughput per GPU (TFLOP/s/GPU): {tflops:.1} | learning rate: 3.0E-04 | global batch size:   512 | lm loss: 2.100000E+00 | loss scale: 1.0 | grad norm: 0.800 | number of skipped iterations:   0 | number of nan iterations:   0 |\n",
            self.stamp(),
            iteration * 512
        );
        self.write(line.as_bytes());
    }

    fn checkpoint(&self, iteration: u64) {
        let line = format!(
            " 0: [{}] successfully saved checkpoint from iteration {iteration:>7} to /ckpt/train\n",
            self.stamp()
        );
        self.write(line.as_bytes());
    }

    async fn tick(&self, engine: &mut Engine, seconds: u64) {
        engine.tick().await.unwrap();
        self.clock.advance(Duration::from_secs(seconds));
    }

    fn status(&self) -> StatusReport {
        let store = Store::open(&self.dir.path().join("db.sqlite")).unwrap();
        report(
            &store.db(),
            "t",
            &Policy::from_config(&self.config.recovery, false),
            None,
        )
        .unwrap()
    }

    fn anomalies(&self) -> Vec<AnomalyKind> {
        self.status()
            .workflows
            .iter()
            .flat_map(|w| w.anomalies.iter().map(|a| a.kind))
            .collect()
    }
}

#[tokio::test]
async fn a_steady_run_raises_nothing() {
    let rig = Rig::new(JobState::Running);
    let mut engine = rig.engine();
    for step in 1..=400u64 {
        rig.iteration(step * 10, 400.0 + (step % 7) as f64);
        if step % 10 == 0 {
            rig.checkpoint(step * 10);
        }
        rig.tick(&mut engine, 30).await;
    }
    assert_eq!(rig.anomalies(), vec![]);
}

#[tokio::test]
async fn a_persistent_throughput_drop_is_raised_once_without_an_action() {
    let rig = Rig::new(JobState::Running);
    let mut engine = rig.engine();
    for step in 1..=40u64 {
        let tflops = if step < 20 { 400.0 } else { 250.0 };
        rig.iteration(step * 10, tflops);
        rig.tick(&mut engine, 30).await;
    }
    assert_eq!(rig.anomalies(), vec![AnomalyKind::ThroughputDrop]);
    let status = rig.status();
    assert!(status.workflows[0].actions.is_empty());
    assert!(status.workflows[0].anomalies[0].summary.contains("38%"));
}

#[tokio::test]
async fn a_checkpoint_overdue_by_twice_the_interval_is_a_stall() {
    let rig = Rig::new(JobState::Running);
    let mut engine = rig.engine();
    // Checkpoints every 10 steps of 30 s (300 s), then none.
    for step in 1..=60u64 {
        rig.iteration(step * 10, 400.0);
        if step % 10 == 0 && step <= 30 {
            rig.checkpoint(step * 10);
        }
        rig.tick(&mut engine, 30).await;
    }
    assert_eq!(rig.anomalies(), vec![AnomalyKind::CheckpointStall]);
}

#[tokio::test]
async fn a_job_that_logs_but_makes_no_progress_is_a_hang_and_is_requeued() {
    let rig = Rig::new(JobState::Running);
    let mut engine = rig.engine();
    rig.iteration(10, 400.0);
    rig.tick(&mut engine, 60).await;
    // Lines keep coming (so the heartbeat is fine), the iteration count does not move.
    for _ in 0..31 {
        rig.write(
            format!(
                " 3: [{}] WARNING: dataloader worker 2 is slow\n",
                rig.stamp()
            )
            .as_bytes(),
        );
        rig.tick(&mut engine, 60).await;
    }
    assert_eq!(rig.anomalies(), vec![AnomalyKind::Hang]);
    assert_eq!(rig.backend.requeues.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_silent_job_is_a_hang_after_the_heartbeat_timeout_and_not_before() {
    let rig = Rig::new(JobState::Running);
    let mut engine = rig.engine();
    rig.iteration(10, 400.0);
    rig.tick(&mut engine, 119).await;
    rig.tick(&mut engine, 1).await;
    assert_eq!(rig.anomalies(), vec![]);
    rig.tick(&mut engine, 0).await;
    assert_eq!(rig.anomalies(), vec![AnomalyKind::Hang]);
}

#[tokio::test]
async fn a_job_pending_too_long_is_stuck_with_the_scheduler_reason() {
    let rig = Rig::new(JobState::Pending);
    let mut engine = rig.engine();
    rig.tick(&mut engine, 3599).await;
    rig.tick(&mut engine, 0).await;
    assert_eq!(rig.anomalies(), vec![]);
    rig.clock.advance(Duration::from_secs(1));
    rig.tick(&mut engine, 0).await;
    let status = rig.status();
    let anomaly = &status.workflows[0].anomalies[0];
    assert_eq!(anomaly.kind, AnomalyKind::StuckPending);
    assert!(
        anomaly.summary.contains("ReqNodeNotAvail"),
        "{}",
        anomaly.summary
    );
}

#[tokio::test]
async fn a_restarted_engine_continues_reading_where_it_stopped_without_repeating_anomalies() {
    let rig = Rig::new(JobState::Running);
    let mut engine = rig.engine();
    for step in 1..=40u64 {
        rig.iteration(step * 10, if step < 20 { 400.0 } else { 250.0 });
        if step == 30 {
            drop(std::mem::replace(&mut engine, rig.engine()));
        }
        rig.tick(&mut engine, 30).await;
    }
    let status = rig.status();
    assert_eq!(rig.anomalies(), vec![AnomalyKind::ThroughputDrop]);
    let store = Store::open(&rig.dir.path().join("db.sqlite")).unwrap();
    let samples = store
        .db()
        .throughput(status.workflows[0].workflow.id)
        .unwrap();
    assert_eq!(samples.len(), 40, "every line read exactly once");
}

#[tokio::test]
async fn a_truncated_log_is_read_again_from_the_start_and_counted() {
    let rig = Rig::new(JobState::Running);
    let mut engine = rig.engine();
    for step in 1..=5u64 {
        rig.iteration(step * 10, 400.0);
        rig.tick(&mut engine, 30).await;
    }
    std::fs::write(&rig.log, b"").unwrap();
    rig.iteration(60, 400.0);
    rig.tick(&mut engine, 30).await;
    let status = rig.status();
    let warned = status
        .warnings
        .iter()
        .any(|(kind, count, _)| kind == "log_truncated" && *count == 1);
    assert!(warned, "{:?}", status.warnings);
    assert_eq!(status.workflows[0].attempts[0].last_iteration, Some(60));
}

#[tokio::test]
async fn garbled_lines_are_counted_and_skipped_and_the_log_still_parses() {
    let mut rig = Rig::new(JobState::Running);
    rig.config.telemetry.max_line_bytes = 4096;
    rig.config.telemetry.max_read_bytes_per_tick = 1 << 20;
    let mut engine = rig.engine();
    rig.iteration(10, 400.0);
    rig.write(b"\xff\xfe\x00\x01 binary junk \x80\x81\n");
    rig.write(&vec![b'x'; 100_000]);
    rig.write(b"\n");
    rig.iteration(20, 401.0);
    rig.checkpoint(20);
    rig.tick(&mut engine, 30).await;
    let status = rig.status();
    let count = |kind: &str| {
        status
            .warnings
            .iter()
            .find(|(k, _, _)| k == kind)
            .map(|(_, n, _)| *n)
            .unwrap_or(0)
    };
    assert_eq!(count("invalid_utf8"), 1);
    assert!(count("line_truncated") >= 1);
    assert_eq!(status.workflows[0].attempts[0].last_iteration, Some(20));
    assert_eq!(status.workflows[0].checkpoints, 1);
}

#[tokio::test]
async fn a_log_that_appears_late_is_picked_up() {
    let rig = Rig::new(JobState::Running);
    std::fs::remove_file(&rig.log).unwrap();
    let mut engine = rig.engine();
    rig.tick(&mut engine, 30).await;
    std::fs::write(&rig.log, b"").unwrap();
    rig.iteration(10, 400.0);
    rig.tick(&mut engine, 30).await;
    assert_eq!(
        rig.status().workflows[0].attempts[0].last_iteration,
        Some(10)
    );
}

#[tokio::test]
async fn the_straggler_scenario_names_the_slow_node_and_the_throughput_drop_without_acting() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(start()));
    let sim = Arc::new(
        SimCluster::open(
            SimOptions::new(
                dir.path().join("sim"),
                Scenario::builtin("straggler").unwrap(),
                7,
            ),
            Arc::clone(&clock) as Arc<dyn Clock>,
        )
        .unwrap(),
    );
    let mut engine = Engine::new(
        Store::open(&dir.path().join("db.sqlite")).unwrap(),
        sim as Arc<dyn Backend>,
        Arc::clone(&clock) as Arc<dyn Clock>,
        Config::default(),
        Catalog::builtin().unwrap(),
        EngineOptions { auto: true },
    );
    for _ in 0..3000 {
        engine.tick().await.unwrap();
        if engine.settled().unwrap() {
            break;
        }
        clock.advance(Duration::from_secs(5));
    }
    let store = Store::open(&dir.path().join("db.sqlite")).unwrap();
    let status = report(
        &store.db(),
        "t",
        &Policy::from_config(&Config::default().recovery, false),
        None,
    )
    .unwrap();
    let view = &status.workflows[0];
    assert!(view.workflow.succeeded);
    assert!(view.actions.is_empty());
    let kinds: Vec<AnomalyKind> = view.anomalies.iter().map(|a| a.kind).collect();
    assert!(kinds.contains(&AnomalyKind::Straggler), "{kinds:?}");
    assert!(kinds.contains(&AnomalyKind::ThroughputDrop), "{kinds:?}");
    let straggler = view
        .anomalies
        .iter()
        .find(|a| a.kind == AnomalyKind::Straggler)
        .unwrap();
    assert!(
        straggler.summary.contains(" on node-"),
        "{}",
        straggler.summary
    );
}

#[tokio::test]
async fn a_log_rotated_by_rename_is_followed_into_the_new_file() {
    let rig = Rig::new(JobState::Running);
    let mut engine = rig.engine();
    for step in 1..=3u64 {
        rig.iteration(step * 10, 400.0);
    }
    rig.tick(&mut engine, 30).await;
    std::fs::rename(&rig.log, rig.log.with_extension("log.1")).unwrap();
    std::fs::write(&rig.log, b"").unwrap();
    // The new file grows past the old offset before the next read.
    for step in 4..=20u64 {
        rig.iteration(step * 10, 400.0);
    }
    rig.tick(&mut engine, 30).await;
    let status = rig.status();
    assert_eq!(status.workflows[0].attempts[0].last_iteration, Some(200));
    let store = Store::open(&rig.dir.path().join("db.sqlite")).unwrap();
    let samples = store
        .db()
        .throughput(status.workflows[0].workflow.id)
        .unwrap();
    assert_eq!(samples.len(), 20);
    assert!(
        status
            .warnings
            .iter()
            .any(|(kind, _, _)| kind == "log_rotated")
    );
}

#[tokio::test]
async fn a_log_the_scheduler_does_not_name_is_found_by_the_configured_pattern() {
    let mut rig = Rig::new(JobState::Running);
    rig.backend.job.lock().unwrap().log_path = None;
    rig.config.telemetry.log_dir = Some(rig.dir.path().to_path_buf());
    rig.config.telemetry.log_pattern = "{name}_{jobid}_{datetime}.log".into();
    // The job writes its log under the AJR naming; an older job's log with another id is ignored.
    std::fs::write(rig.dir.path().join("train_76_2026-01-04T10-00-00.log"), b"").unwrap();
    rig.log = rig.dir.path().join("train_77_2026-01-05T08-00-00.log");
    std::fs::write(&rig.log, b"").unwrap();
    let mut engine = rig.engine();
    rig.iteration(10, 400.0);
    rig.tick(&mut engine, 30).await;
    let status = rig.status();
    let attempt = &status.workflows[0].attempts[0];
    assert_eq!(attempt.log_path.as_deref(), Some(rig.log.as_path()));
    assert_eq!(attempt.last_iteration, Some(10));
}

#[tokio::test]
async fn a_hot_gpu_reported_by_nvidia_smi_makes_its_node_a_straggler() {
    let mut rig = Rig::new(JobState::Running);
    let report = rig.dir.path().join("node-02-smi.txt");
    std::fs::copy("tests/fixtures/node/nvidia_smi_q_8gpu.txt", &report).unwrap();
    rig.config.telemetry.gpu_status_command = vec![
        "cat".into(),
        rig.dir.path().join("{node}-smi.txt").display().to_string(),
    ];
    let mut engine = rig.engine();
    rig.iteration(10, 400.0);
    rig.tick(&mut engine, 30).await;
    let status = rig.status();
    let view = &status.workflows[0];
    let straggler = view
        .anomalies
        .iter()
        .find(|a| a.kind == AnomalyKind::Straggler)
        .expect("a straggler");
    assert!(
        straggler.summary.starts_with("node-02 GPU 5"),
        "{}",
        straggler.summary
    );
    assert!(straggler.summary.contains("93"), "{}", straggler.summary);
    // node-01 has no report: the command fails there, counted, and nothing is raised for it.
    assert!(
        status
            .warnings
            .iter()
            .any(|(kind, _, message)| kind == "gpu_status_failed" && message.contains("node-01"))
    );
    assert_eq!(view.anomalies.len(), 1);
}

#[tokio::test]
async fn an_xid_in_a_configured_node_log_names_the_node_and_gpu_of_a_crash() {
    let mut rig = Rig::new(JobState::Running);
    let node_dir = rig.dir.path().join("node-02");
    std::fs::create_dir_all(&node_dir).unwrap();
    rig.config.telemetry.node_log_pattern =
        Some(rig.dir.path().join("{node}/kern.log").display().to_string());
    // The inventory that maps the Xid's bus id to a GPU index.
    let report = rig.dir.path().join("smi.txt");
    std::fs::copy("tests/fixtures/node/nvidia_smi_q_8gpu.txt", &report).unwrap();
    rig.config.telemetry.gpu_status_command = vec!["cat".into(), report.display().to_string()];
    rig.config.detect.thermal_limit_c = 200.0;
    let mut engine = rig.engine();
    rig.iteration(10, 400.0);
    rig.tick(&mut engine, 30).await;
    std::fs::write(
        node_dir.join("kern.log"),
        "2026-01-05T08:00:40+00:00 node-02 kernel: NVRM: Xid (PCI:0000:3a:00): 79, pid=4242, name=python, GPU has fallen off the bus.\n",
    )
    .unwrap();
    {
        let mut job = rig.backend.job.lock().unwrap();
        job.state = JobState::Failed;
        job.state_raw = "FAILED".into();
        job.exit_code = Some(1);
    }
    rig.tick(&mut engine, 30).await;
    let status = rig.status();
    let attribution = &status.workflows[0].attributions[0];
    assert_eq!(attribution.category, "xid_79");
    assert_eq!(attribution.culprit.node.as_deref(), Some("node-02"));
    assert!(
        attribution
            .evidence
            .iter()
            .any(|line| line.contains("[GPU 2]")),
        "{:?}",
        attribution.evidence
    );
    assert_eq!(attribution.culprit.gpu, Some(2));
    assert_eq!(rig.backend.requeues.lock().unwrap()[0], vec!["node-02"]);
}

#[tokio::test]
async fn lines_stamped_far_in_the_future_do_not_hide_a_hang() {
    let rig = Rig::new(JobState::Running);
    let mut engine = rig.engine();
    // A node whose clock jumped a year ahead writes one line, then the job goes silent.
    rig.write(b" 5: [2027-06-01 00:00:00] iteration       10/   10000 | elapsed time per iteration (ms): 3000.0 | throughput per GPU (TFLOP/s/GPU): 400.0 | lm loss: 2.0E+00 |\n");
    rig.tick(&mut engine, 60).await;
    rig.tick(&mut engine, 60).await;
    assert_eq!(rig.anomalies(), vec![]);
    rig.tick(&mut engine, 0).await;
    assert_eq!(rig.anomalies(), vec![AnomalyKind::Hang]);
}

#[tokio::test]
async fn a_chained_traceback_written_across_two_reads_is_one_block_with_its_root_cause() {
    let rig = Rig::new(JobState::Running);
    let mut engine = rig.engine();
    rig.iteration(10, 400.0);
    rig.write(
        b" 4: Traceback (most recent call last):\n 4:   File \"/workspace/data.py\", line 12, in load\n 4:     shard = open(path)\n 4: FileNotFoundError: [Errno 2] No such file or directory: '/data/shard-7'\n",
    );
    rig.tick(&mut engine, 10).await;
    rig.write(
        b" 4: \n 4: During handling of the above exception, another exception occurred:\n 4: \n 4: Traceback (most recent call last):\n 4:   File \"/workspace/train.py\", line 88, in <module>\n 4:     batch = next(loader)\n 4: RuntimeError: dataset shard missing\n",
    );
    {
        let mut job = rig.backend.job.lock().unwrap();
        job.state = JobState::Failed;
        job.state_raw = "FAILED".into();
        job.exit_code = Some(1);
    }
    rig.tick(&mut engine, 10).await;
    let status = rig.status();
    let block = &status.workflows[0].anomalies[0].evidence;
    assert!(
        block[0].contains("caused by FileNotFoundError"),
        "{block:#?}"
    );
    assert!(
        block.iter().any(|l| l.contains("During handling")),
        "{block:#?}"
    );
    assert!(
        block
            .last()
            .unwrap()
            .contains("RuntimeError: dataset shard missing"),
        "{block:#?}"
    );
}
