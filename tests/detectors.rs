//! Each detector firing and not firing, through the whole engine: a scripted backend reports one job
//! whose log the test writes line by line, and a manual clock moves time.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use runguard_engine::backend::{ActionOutcome, BackendError, JobSnapshot};
use runguard_engine::clock::{Clock, ManualClock};
use runguard_engine::model::{AnomalyKind, JobSpec, JobState, WorkflowStatus};

use crate::support::{EngineRig, Script, job};

/// The scheduler of the one job: a requeue puts it back in the queue; it resubmits nothing, and
/// draining a node is refused as to a user without operator rights.
struct OneJob;

impl Script for OneJob {
    fn requeue(
        &self,
        jobs: &mut [JobSnapshot],
        job_id: &str,
        _exclude: &[String],
    ) -> Result<ActionOutcome, BackendError> {
        let job = jobs.iter_mut().find(|job| job.job_id == job_id).unwrap();
        job.restart_count += 1;
        job.state = JobState::Pending;
        job.state_raw = "PENDING".into();
        Ok(ActionOutcome {
            detail: "requeued".into(),
            new_job_id: None,
        })
    }

    fn resubmit(
        &self,
        _: &mut Vec<JobSnapshot>,
        _: &JobSpec,
        _: &[String],
        _: &str,
    ) -> Result<ActionOutcome, BackendError> {
        Err(BackendError::Invalid("not scripted".into()))
    }

    fn drain_node(&self, node: &str, _reason: &str) -> Result<ActionOutcome, BackendError> {
        Err(BackendError::Refused {
            command: format!("scontrol update NodeName={node} State=DRAIN"),
            message: "Access/permission denied".into(),
        })
    }
}

/// The log the job writes, each line stamped with the manual clock's time.
struct TrainLog {
    path: PathBuf,
    clock: Arc<ManualClock>,
}

impl TrainLog {
    fn write(&self, bytes: &[u8]) {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(&self.path)
            .unwrap();
        file.write_all(bytes).unwrap();
    }

    fn stamp(&self) -> String {
        self.clock.now().format("%Y-%m-%d %H:%M:%S").to_string()
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
}

/// Job 77, `train` of alice, in `state` on node-01 and node-02 (pending for them), and its empty log.
fn one_job(state: JobState) -> (EngineRig, TrainLog) {
    let rig = EngineRig::new(OneJob);
    let log = TrainLog {
        path: rig.path().join("train_77_0.log"),
        clock: Arc::clone(&rig.clock),
    };
    std::fs::write(&log.path, b"").unwrap();
    let job = job("77")
        .named("train")
        .running_on(["node-01", "node-02"])
        .log(&log.path);
    rig.backend.add([match state {
        JobState::Pending => job.pending("ReqNodeNotAvail"),
        state => job.state(state),
    }]);
    (rig, log)
}

#[tokio::test]
async fn a_steady_run_raises_nothing() {
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    for step in 1..=400u64 {
        log.iteration(step * 10, 400.0 + (step % 7) as f64);
        if step % 10 == 0 {
            log.checkpoint(step * 10);
        }
        rig.step(&mut engine, 30).await;
    }
    assert_eq!(rig.anomalies(), vec![]);
}

#[tokio::test]
async fn a_persistent_throughput_drop_is_raised_once_without_an_action() {
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    for step in 1..=40u64 {
        let tflops = if step < 20 { 400.0 } else { 250.0 };
        log.iteration(step * 10, tflops);
        rig.step(&mut engine, 30).await;
    }
    assert_eq!(rig.anomalies(), vec![AnomalyKind::ThroughputDrop]);
    let status = rig.status();
    assert!(status.workflows[0].actions.is_empty());
    assert!(status.workflows[0].anomalies[0].summary.contains("38%"));
}

#[tokio::test]
async fn steps_that_stay_three_times_slower_are_a_warning_without_an_action() {
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    for step in 0..26u32 {
        let took = if step < 20 { 30.4 } else { 101.2 };
        log.write(format!(" 0: [{}] Iteration took {took} s.\n", log.stamp()).as_bytes());
        rig.step(&mut engine, took as u64).await;
    }
    assert_eq!(rig.anomalies(), vec![AnomalyKind::ThroughputDrop]);
    let status = rig.status();
    assert!(status.workflows[0].actions.is_empty());
    let summary = &status.workflows[0].anomalies[0].summary;
    assert!(
        summary.starts_with("slowdown: steps take 3.3x"),
        "{summary}"
    );
}

#[tokio::test]
async fn a_loader_that_stalls_every_eighth_batch_is_a_warning_without_an_action() {
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    for batch in 0..40u32 {
        let waited_ms: u32 = if batch % 8 == 7 { 31_000 } else { 20 };
        log.write(format!(" 0: [{}] data: {waited_ms}ms, mem: 24882M\n", log.stamp()).as_bytes());
        rig.step(&mut engine, 1 + u64::from(waited_ms / 1000)).await;
    }
    assert_eq!(rig.anomalies(), vec![AnomalyKind::ThroughputDrop]);
    let status = rig.status();
    assert!(status.workflows[0].actions.is_empty());
    let summary = &status.workflows[0].anomalies[0].summary;
    assert!(summary.starts_with("input stalls: "), "{summary}");
}

#[tokio::test]
async fn a_checkpoint_overdue_by_twice_the_interval_is_a_stall() {
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    // Checkpoints every 10 steps of 30 s (300 s), then none.
    for step in 1..=60u64 {
        log.iteration(step * 10, 400.0);
        if step % 10 == 0 && step <= 30 {
            log.checkpoint(step * 10);
        }
        rig.step(&mut engine, 30).await;
    }
    assert_eq!(rig.anomalies(), vec![AnomalyKind::CheckpointStall]);
}

#[tokio::test]
async fn a_job_that_logs_but_makes_no_progress_is_a_hang_and_is_requeued() {
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    log.iteration(10, 400.0);
    rig.step(&mut engine, 60).await;
    // Lines keep coming (so the heartbeat is fine), the iteration count does not move.
    for _ in 0..31 {
        log.write(
            format!(
                " 3: [{}] WARNING: dataloader worker 2 is slow\n",
                log.stamp()
            )
            .as_bytes(),
        );
        rig.step(&mut engine, 60).await;
    }
    assert_eq!(rig.anomalies(), vec![AnomalyKind::Hang]);
    assert_eq!(rig.backend.requeues().len(), 1);
}

#[tokio::test]
async fn a_silent_job_is_a_hang_after_the_heartbeat_timeout_and_not_before() {
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    log.iteration(10, 400.0);
    rig.step(&mut engine, 119).await;
    rig.step(&mut engine, 1).await;
    assert_eq!(rig.anomalies(), vec![]);
    rig.step(&mut engine, 0).await;
    assert_eq!(rig.anomalies(), vec![AnomalyKind::Hang]);
}

#[tokio::test]
async fn a_job_pending_too_long_is_stuck_with_the_scheduler_reason() {
    let (rig, _log) = one_job(JobState::Pending);
    let mut engine = rig.engine();
    rig.step(&mut engine, 3599).await;
    rig.step(&mut engine, 0).await;
    assert_eq!(rig.anomalies(), vec![]);
    rig.clock.advance(Duration::from_secs(1));
    rig.step(&mut engine, 0).await;
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
async fn a_requeued_job_waits_in_the_queue_from_its_requeue_not_from_its_first_submission() {
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    // Two hours of training, then a GPU falls off the bus and the job fails.
    for step in 1..=240u64 {
        log.iteration(step * 10, 400.0);
        rig.step(&mut engine, 30).await;
    }
    log.write(b"node-02: NVRM: Xid (PCI:0000:9b:00): 79, pid=4242, name=python, GPU has fallen off the bus.\n");
    let ended = rig.now();
    rig.backend.update("77", |job| {
        job.state = JobState::Failed;
        job.state_raw = "FAILED".into();
        job.exit_code = Some(1);
        job.end_time = Some(ended);
    });
    rig.step(&mut engine, 1).await;
    rig.step(&mut engine, 1).await;
    assert_eq!(rig.backend.requeues().len(), 1, "{:?}", rig.backend.calls());
    // Queued again, it holds no nodes until it starts.
    rig.backend.update("77", |job| job.nodes.clear());
    let stuck = |rig: &EngineRig| rig.anomalies().contains(&AnomalyKind::StuckPending);
    // Pending for 59 minutes after the requeue, three hours after the first submission.
    rig.step(&mut engine, 3540).await;
    rig.step(&mut engine, 120).await;
    assert!(!stuck(&rig), "counted from the first submission");
    rig.step(&mut engine, 0).await;
    assert!(stuck(&rig), "an hour after the requeue it is stuck");
}

#[tokio::test]
async fn a_restarted_engine_continues_reading_where_it_stopped_without_repeating_anomalies() {
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    for step in 1..=40u64 {
        log.iteration(step * 10, if step < 20 { 400.0 } else { 250.0 });
        if step == 30 {
            drop(std::mem::replace(&mut engine, rig.engine()));
        }
        rig.step(&mut engine, 30).await;
    }
    let status = rig.status();
    assert_eq!(rig.anomalies(), vec![AnomalyKind::ThroughputDrop]);
    let store = rig.store();
    let samples = store
        .db()
        .throughput(status.workflows[0].workflow.id)
        .unwrap();
    assert_eq!(samples.len(), 40, "every line read exactly once");
}

#[tokio::test]
async fn a_truncated_log_is_read_again_from_the_start_and_counted() {
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    for step in 1..=5u64 {
        log.iteration(step * 10, 400.0);
        rig.step(&mut engine, 30).await;
    }
    std::fs::write(&log.path, b"").unwrap();
    log.iteration(60, 400.0);
    rig.step(&mut engine, 30).await;
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
    let (mut rig, log) = one_job(JobState::Running);
    rig.config.telemetry.max_line_bytes = 4096;
    rig.config.telemetry.max_read_bytes_per_tick = 1 << 20;
    let mut engine = rig.engine();
    log.iteration(10, 400.0);
    log.write(b"\xff\xfe\x00\x01 binary junk \x80\x81\n");
    log.write(&vec![b'x'; 100_000]);
    log.write(b"\n");
    log.iteration(20, 401.0);
    log.checkpoint(20);
    rig.step(&mut engine, 30).await;
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
    let (rig, log) = one_job(JobState::Running);
    std::fs::remove_file(&log.path).unwrap();
    let mut engine = rig.engine();
    rig.step(&mut engine, 30).await;
    std::fs::write(&log.path, b"").unwrap();
    log.iteration(10, 400.0);
    rig.step(&mut engine, 30).await;
    assert_eq!(
        rig.status().workflows[0].attempts[0].last_iteration,
        Some(10)
    );
}

#[cfg(feature = "sim")]
#[tokio::test]
async fn the_straggler_scenario_names_the_slow_node_and_the_throughput_drop_without_acting() {
    let rig = EngineRig::default();
    let sim = rig.sim("straggler", 7);
    let mut engine = rig.engine_over(sim, true);
    let status = rig.run(&mut engine, |_| false).await;
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
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    for step in 1..=3u64 {
        log.iteration(step * 10, 400.0);
    }
    rig.step(&mut engine, 30).await;
    std::fs::rename(&log.path, log.path.with_extension("log.1")).unwrap();
    std::fs::write(&log.path, b"").unwrap();
    // The new file grows past the old offset before the next read.
    for step in 4..=20u64 {
        log.iteration(step * 10, 400.0);
    }
    rig.step(&mut engine, 30).await;
    let status = rig.status();
    assert_eq!(status.workflows[0].attempts[0].last_iteration, Some(200));
    let store = rig.store();
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
    let (mut rig, mut log) = one_job(JobState::Running);
    rig.backend.update("77", |job| job.log_path = None);
    rig.config.telemetry.log_dir = Some(rig.path().to_path_buf());
    rig.config.telemetry.log_pattern = "{name}_{jobid}_{datetime}.log".into();
    // The job writes its log under the AJR naming; an older job's log with another id is ignored.
    std::fs::write(rig.path().join("train_76_2026-01-04T10-00-00.log"), b"").unwrap();
    log.path = rig.path().join("train_77_2026-01-05T08-00-00.log");
    std::fs::write(&log.path, b"").unwrap();
    let mut engine = rig.engine();
    log.iteration(10, 400.0);
    rig.step(&mut engine, 30).await;
    let status = rig.status();
    let attempt = &status.workflows[0].attempts[0];
    assert_eq!(attempt.log_path.as_deref(), Some(log.path.as_path()));
    assert_eq!(attempt.last_iteration, Some(10));
}

#[tokio::test]
async fn a_hot_gpu_reported_by_nvidia_smi_makes_its_node_a_straggler() {
    let (mut rig, log) = one_job(JobState::Running);
    let report = rig.path().join("node-02-smi.txt");
    std::fs::copy("tests/fixtures/node/nvidia_smi_q_8gpu.txt", &report).unwrap();
    rig.config.telemetry.gpu_status_command = vec![
        "cat".into(),
        rig.path().join("{node}-smi.txt").display().to_string(),
    ];
    let mut engine = rig.engine();
    log.iteration(10, 400.0);
    rig.step(&mut engine, 30).await;
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

/// Kernel logs at `<rig>/<node>/kern.log`; the directory of node-02's, made.
fn with_node_logs(rig: &mut EngineRig) -> std::path::PathBuf {
    let node_dir = rig.path().join("node-02");
    std::fs::create_dir_all(&node_dir).unwrap();
    rig.config.telemetry.node_log_pattern =
        Some(rig.path().join("{node}/kern.log").display().to_string());
    node_dir
}

#[tokio::test]
async fn an_xid_in_a_configured_node_log_names_the_node_and_gpu_of_a_crash() {
    let (mut rig, log) = one_job(JobState::Running);
    let node_dir = with_node_logs(&mut rig);
    // The inventory that maps the Xid's bus id to a GPU index.
    let report = rig.path().join("smi.txt");
    std::fs::copy("tests/fixtures/node/nvidia_smi_q_8gpu.txt", &report).unwrap();
    rig.config.telemetry.gpu_status_command = vec!["cat".into(), report.display().to_string()];
    rig.config.detect.thermal_limit_c = 200.0;
    let mut engine = rig.engine();
    log.iteration(10, 400.0);
    rig.step(&mut engine, 30).await;
    std::fs::write(
        node_dir.join("kern.log"),
        "2026-01-05T08:00:40+00:00 node-02 kernel: NVRM: Xid (PCI:0000:3a:00): 79, pid=4242, name=python, GPU has fallen off the bus.\n",
    )
    .unwrap();
    rig.backend.fail("77");
    rig.step(&mut engine, 30).await;
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
    // The status report (the same file for both nodes) shows an uncorrectable ECC error with a row
    // remap pending on GPU 2: the node ledger keeps both nodes out.
    assert_eq!(rig.backend.requeues()[0], vec!["node-01", "node-02"]);
    assert_eq!(
        rig.store().db().quarantined_nodes().unwrap(),
        ["node-01", "node-02"]
    );
}

#[tokio::test]
async fn a_kernel_log_larger_than_a_read_step_is_read_whole_in_one_tick() {
    let (mut rig, log) = one_job(JobState::Running);
    let node_dir = with_node_logs(&mut rig);
    let mut engine = rig.engine();
    log.iteration(10, 400.0);
    rig.step(&mut engine, 30).await;
    // Three steps' worth of chatter: a node signal in the first step, a line only the catalog knows in
    // the second, another signal at the very end.
    let quiet = "2026-01-05T08:00:41+00:00 node-02 kernel: audit: type=1400 audit(1736064041.123:812): apparmor=\"ALLOWED\" operation=\"open\" profile=\"snap.lxd\" name=\"/proc/1/mountinfo\" pid=1234\n";
    let mut text = String::from(
        "2026-01-05T08:00:40+00:00 node-02 kernel: NVRM: Xid (PCI:0000:3a:00): 63, pid=4242, name=python, Row Remapper: New row marked for remapping, reset gpu to activate.\n",
    );
    while text.len() < 3 << 19 {
        text.push_str(quiet);
    }
    text.push_str("2026-01-05T08:00:42+00:00 node-02 kernel: Out of memory: Killed process 4242 (python) total-vm:123456kB, anon-rss:123kB, file-rss:0kB\n");
    while text.len() < 3 << 20 {
        text.push_str(quiet);
    }
    text.push_str("2026-01-05T08:00:43+00:00 node-02 kernel: NVRM: Xid (PCI:0000:3a:00): 94, pid=4242, name=python, Contained: CE User Channel (0x9).\n");
    let path = node_dir.join("kern.log");
    std::fs::write(&path, &text).unwrap();
    rig.step(&mut engine, 30).await;
    let store = rig.store();
    let db = store.db();
    let attempt = db.attempts(1).unwrap()[0].index;
    let evidence: Vec<String> = db
        .evidence_lines(1, attempt)
        .unwrap()
        .into_iter()
        .map(|line| line.text)
        .collect();
    for wanted in ["): 63,", "Out of memory: Killed process 4242", "): 94,"] {
        assert!(
            evidence.iter().any(|line| line.contains(wanted)),
            "{wanted}: {evidence:#?}"
        );
    }
    assert!(!evidence.iter().any(|line| line.contains("apparmor")));
    let (offset, _) = db.file_offset(&path.to_string_lossy()).unwrap();
    assert_eq!(offset, text.len() as u64);
}

#[tokio::test]
async fn lines_stamped_far_in_the_future_do_not_hide_a_hang() {
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    // A node whose clock jumped a year ahead writes one line, then the job goes silent.
    log.write(b" 5: [2027-06-01 00:00:00] iteration       10/   10000 | elapsed time per iteration (ms): 3000.0 | throughput per GPU (TFLOP/s/GPU): 400.0 | lm loss: 2.0E+00 |\n");
    rig.step(&mut engine, 60).await;
    rig.step(&mut engine, 60).await;
    assert_eq!(rig.anomalies(), vec![]);
    rig.step(&mut engine, 0).await;
    assert_eq!(rig.anomalies(), vec![AnomalyKind::Hang]);
}

#[tokio::test]
async fn a_chained_traceback_written_across_two_reads_is_one_block_with_its_root_cause() {
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    log.iteration(10, 400.0);
    log.write(
        b" 4: Traceback (most recent call last):\n 4:   File \"/workspace/data.py\", line 12, in load\n 4:     shard = open(path)\n 4: FileNotFoundError: [Errno 2] No such file or directory: '/data/shard-7'\n",
    );
    rig.step(&mut engine, 10).await;
    log.write(
        b" 4: \n 4: During handling of the above exception, another exception occurred:\n 4: \n 4: Traceback (most recent call last):\n 4:   File \"/workspace/train.py\", line 88, in <module>\n 4:     batch = next(loader)\n 4: RuntimeError: dataset shard missing\n",
    );
    rig.backend.fail("77");
    rig.step(&mut engine, 10).await;
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

#[tokio::test]
async fn a_log_larger_than_a_read_step_is_read_in_one_tick_with_a_traceback_across_the_steps_whole()
{
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    let step = runguard_engine::telemetry::tail::READ_STEP_BYTES as usize;
    // Progress lines up to just before the first step's end, the traceback across it, more after.
    let mut text = String::new();
    let mut iteration = 0;
    while text.len() < step - 120 {
        iteration += 1;
        text.push_str(&format!(
            "15: [2026-03-01 12:00:00] iteration {iteration:>8}/ 1000000 | lm loss: 2.100000E+00 |\n"
        ));
    }
    text.push_str(" 4: Traceback (most recent call last):\n");
    for frame in 0..8 {
        text.push_str(&format!(
            " 4:   File \"/workspace/model.py\", line {frame}, in layer_{frame}\n 4:     out = block(x)\n"
        ));
    }
    text.push_str(" 4: RuntimeError: shard index out of range\n");
    assert!(
        text.len() > step,
        "the traceback crosses the first step's end"
    );
    while text.len() < 2 * step + step / 2 {
        iteration += 1;
        text.push_str(&format!(
            "15: [2026-03-01 12:00:00] iteration {iteration:>8}/ 1000000 | lm loss: 2.100000E+00 |\n"
        ));
    }
    log.write(text.as_bytes());
    // Finished before runguard reads it: the last read of the tick closes the tracebacks, not the first.
    rig.backend.fail("77");
    rig.step(&mut engine, 10).await;
    let status = rig.status();
    let view = &status.workflows[0];
    assert_eq!(
        view.attempts[0].last_iteration,
        Some(iteration),
        "2.5 steps of log in one tick (the budget is 64 MiB)"
    );
    let block = &view
        .anomalies
        .first()
        .unwrap_or_else(|| panic!("an anomaly: {view:#?}"))
        .evidence;
    assert!(
        block.iter().any(|l| l.contains("in layer_0")),
        "the frames before the step's end: {block:#?}"
    );
    assert!(
        block
            .iter()
            .any(|l| l.contains("RuntimeError: shard index out of range")),
        "{block:#?}"
    );
}

#[tokio::test]
async fn a_state_the_scheduler_reports_in_words_runguard_cannot_read_is_a_warning_and_never_acted_on()
 {
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    log.iteration(10, 400.0);
    rig.step(&mut engine, 30).await;
    // The scheduler answers with a state of a release runguard does not know; the job then stays
    // silent past the heartbeat, which would otherwise be a hang to end and requeue.
    rig.backend.update("77", |job| {
        job.state = JobState::Unknown;
        job.state_raw = "LAUNCH_FAILED_SOMEHOW".into();
    });
    for _ in 0..20 {
        rig.step(&mut engine, 30).await;
    }
    let status = rig.status();
    let view = &status.workflows[0];
    assert_eq!(
        view.attempts.last().map(|a| a.state),
        Some(JobState::Running),
        "the last understood state is kept"
    );
    let warnings = rig.store().db().warnings().unwrap();
    assert!(
        warnings
            .iter()
            .any(|(kind, count, message)| kind == "not_understood"
                && *count > 0
                && message.contains("LAUNCH_FAILED_SOMEHOW")),
        "{warnings:?}"
    );
    assert!(rig.backend.requeues().is_empty(), "nothing requeued");
    assert!(
        view.actions
            .iter()
            .all(|action| action.state != runguard_engine::model::ActionState::Done),
        "{:?}",
        view.actions
    );
}

#[tokio::test]
async fn a_run_stepping_every_two_seconds_that_stops_mid_step_is_hung_within_thirty_seconds() {
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    for iteration in 1..=20 {
        log.iteration(iteration, 400.0);
        rig.step(&mut engine, 2).await;
    }
    assert_eq!(rig.anomalies(), vec![]);
    // It stops in the middle of iteration 21.
    let mut silent = 0;
    while rig.anomalies().is_empty() && silent < 120 {
        rig.step(&mut engine, 2).await;
        silent += 2;
    }
    assert_eq!(rig.anomalies(), vec![AnomalyKind::Hang]);
    assert!(silent <= 30, "called hung after {silent} s of silence");
    let status = rig.status();
    let summary = &status.workflows[0].anomalies[0].summary;
    assert!(summary.contains("in its step"), "{summary}");
}

#[tokio::test]
async fn a_long_first_compile_and_a_long_checkpoint_save_are_not_hangs() {
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    // Fifteen silent minutes of start-up (compilation).
    for _ in 0..30 {
        rig.step(&mut engine, 30).await;
    }
    assert_eq!(rig.anomalies(), vec![], "a fifteen-minute compile");
    // Then a steady run whose first save, announced after iteration 50, takes ten minutes.
    for iteration in 1..=50 {
        log.iteration(iteration, 400.0);
        rig.step(&mut engine, 2).await;
    }
    log.write(b" 0: saving checkpoint at iteration      50 to /ckpt/train\n");
    for _ in 0..20 {
        rig.step(&mut engine, 30).await;
    }
    assert_eq!(rig.anomalies(), vec![], "a ten-minute save");
    log.checkpoint(50);
    log.iteration(51, 400.0);
    rig.step(&mut engine, 2).await;
    assert_eq!(rig.anomalies(), vec![]);
}

#[tokio::test]
async fn a_progress_bar_redrawn_without_a_newline_keeps_the_run_alive() {
    let (mut rig, log) = one_job(JobState::Running);
    // No complete line ever comes: the run stays in its start-up section, bounded at 300 s here.
    rig.config.detect.setup_timeout_secs = 300;
    let mut engine = rig.engine();
    log.write(b"Epoch 0:   0%|          | 0/1000 [00:00<?, ?it/s]");
    for step in 1..=40 {
        // tqdm redraws its bar with `\r`: no newline for minutes.
        log.write(
            format!("\rEpoch 0:  {step:>2}%|#         | {step}/1000 [00:{step:02}<05:00, 3.3it/s]")
                .as_bytes(),
        );
        rig.step(&mut engine, 10).await;
    }
    assert_eq!(rig.anomalies(), vec![], "400 s of a redrawn bar");
    // The bar stops moving: silence.
    for _ in 0..31 {
        rig.step(&mut engine, 10).await;
    }
    assert_eq!(rig.anomalies(), vec![AnomalyKind::Hang]);
}

#[tokio::test]
async fn a_workflow_is_pending_until_its_job_runs_and_its_log_is_read_then_enabled() {
    let (rig, log) = one_job(JobState::Pending);
    let mut engine = rig.engine();
    rig.step(&mut engine, 5).await;
    let workflow = &rig.status().workflows[0].workflow;
    assert_eq!(workflow.status, WorkflowStatus::Pending);
    assert_eq!(
        workflow.status_reason.as_deref(),
        Some("checking: job 77 is listed; its log is read once it runs")
    );
    rig.backend
        .update("77", |job| job.state = JobState::Running);
    log.iteration(10, 400.0);
    rig.step(&mut engine, 5).await;
    let workflow = &rig.status().workflows[0].workflow;
    assert_eq!(workflow.status, WorkflowStatus::Enabled, "{workflow:#?}");
    let reason = workflow.status_reason.as_deref().unwrap_or_default();
    assert!(
        reason.starts_with("checked: job 77 runs") && reason.ends_with("train_77_0.log is read"),
        "{reason}"
    );
}

#[tokio::test]
async fn a_log_that_cannot_be_found_is_a_warning_not_a_hang() {
    let (rig, log) = one_job(JobState::Running);
    std::fs::remove_file(&log.path).unwrap();
    let mut engine = rig.engine();
    for _ in 0..60 {
        rig.step(&mut engine, 60).await;
    }
    assert_eq!(rig.anomalies(), vec![]);
    let status = rig.status();
    // Never read: not enabled.
    assert_eq!(status.workflows[0].workflow.status, WorkflowStatus::Pending);
    assert!(
        status
            .warnings
            .iter()
            .any(|(kind, count, message)| kind == "log_missing"
                && *count == 1
                && message.contains("cannot be found")),
        "{:?}",
        status.warnings
    );
    assert!(
        status
            .notifications
            .iter()
            .any(|n| n.title.contains("log not found")),
        "{:?}",
        status.notifications
    );
}

/// Every healthy log of the labelled corpus (and the noise fixture), read through the engine's own
/// pipeline into evidence and progress reports: the fatal-line rule finds nothing in any of them
/// however long the run then stays without progress, while the corpus's IB completion error fires it.
#[test]
fn the_fatal_line_rule_never_fires_on_a_healthy_corpus_log() {
    use runguard_engine::attribute::Catalog;
    use runguard_engine::config::DetectConfig;
    use runguard_engine::detect::fatal_line::{FatalLineTracker, RunningLog};
    use runguard_engine::explain::Case;
    use runguard_engine::model::ThroughputSample;
    use runguard_engine::report::fixtures::{attempt, t};
    use runguard_engine::telemetry::pipeline::Digester;

    #[derive(serde::Deserialize)]
    struct Manifest {
        case: Vec<Case>,
    }
    let catalog = Catalog::builtin().unwrap();
    let fixtures = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut healthy = vec![fixtures.join("logs/healthy_noise.log")];
    for manifest in [
        "cases.toml",
        "field/tune.toml",
        "field/validation.toml",
        "field/third.toml",
        "field/fourth.toml",
        "field/fifth.toml",
        "field/sixth.toml",
        "field/seventh.toml",
        "field/eighth.toml",
        "field/ninth.toml",
        "field/tenth.toml",
    ] {
        let manifest = fixtures.join("corpus").join(manifest);
        let parsed: Manifest =
            toml::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
        let base = manifest.parent().unwrap();
        healthy.extend(
            parsed
                .case
                .iter()
                .filter(|case| case.category == "healthy")
                .map(|case| base.join(&case.file)),
        );
    }
    assert!(healthy.len() >= 20, "{healthy:?}");

    // The log as one running attempt's: read at t(0), then no progress for a day.
    let fires = |path: &PathBuf| {
        let text = String::from_utf8_lossy(&std::fs::read(path).unwrap()).into_owned();
        let mut digester = Digester::new(|line: &str| catalog.is_notable(line), t(0), None, None);
        for line in text.lines() {
            digester.push(line);
        }
        let digest = digester.finish();
        let progress: Vec<ThroughputSample> = digest
            .samples
            .iter()
            .map(|(time, iteration, tflops, rank)| ThroughputSample {
                workflow_id: 1,
                attempt_index: 0,
                time: *time,
                iteration: *iteration,
                tflops_per_gpu: *tflops,
                rank: *rank,
                node: None,
            })
            .collect();
        let mut running = attempt(0, JobState::Running, [Some(-60), Some(-60), None]);
        running.last_iteration = digest.last_iteration;
        running.last_progress_time = digest.last_iteration.map(|_| t(0));
        running.last_log_time = Some(t(0));
        let log = RunningLog {
            lines: &digest.evidence,
            progress: &progress,
        };
        let fatal_lines = digest
            .evidence
            .iter()
            .filter(|line| catalog.fatal_while_running(&line.text).is_some())
            .count();
        // Read at 0, then looked at every poll of a minute and a day later.
        let mut tracker = FatalLineTracker::default();
        let finding = (0..=12)
            .map(|poll| poll * 5)
            .chain([86_400])
            .find_map(|now| {
                tracker.observe(&running, &log, &catalog, t(now), &DetectConfig::default())
            });
        (finding, fatal_lines)
    };
    for path in &healthy {
        assert_eq!(fires(path), (None, 0), "{}", path.display());
    }
    let ib = fixtures.join("corpus/cases/p10-ib-completion-status-12.log");
    let (finding, _) = fires(&ib);
    let finding = finding.expect("the IB completion error is fatal");
    assert!(finding.summary.contains("printed a fatal"), "{finding:?}");
}

#[tokio::test]
async fn a_run_a_person_starts_again_after_runguard_declined_it_is_watched_again() {
    let (rig, log) = one_job(JobState::Running);
    let mut engine = rig.engine();
    log.iteration(10, 400.0);
    rig.step(&mut engine, 5).await;
    // A bug of the script: runguard declines to requeue and stops.
    log.write(
        b"0: Traceback (most recent call last):\n0:   File \"train.py\", line 12, in <module>\n0: KeyError: 'lm_head.weight'\n",
    );
    rig.backend.fail("77");
    for _ in 0..3 {
        rig.step(&mut engine, 5).await;
    }
    let workflow = rig.status().workflows[0].workflow.clone();
    assert_eq!(workflow.status, WorkflowStatus::Completed, "{workflow:#?}");
    assert!(!workflow.succeeded);
    assert!(rig.backend.requeues().is_empty());
    // The person fixes the script and requeues the job under its id.
    rig.backend.update("77", |job| {
        job.state = JobState::Running;
        job.state_raw = "RUNNING".into();
        job.exit_code = None;
        job.restart_count = 1;
    });
    rig.step(&mut engine, 5).await;
    let status = rig.status();
    let workflow = &status.workflows[0].workflow;
    assert_eq!(workflow.status, WorkflowStatus::Enabled, "{workflow:#?}");
    let reason = workflow.status_reason.as_deref().unwrap_or_default();
    assert!(
        reason.starts_with("job 77 was started again (attempt 1) after runguard had stopped"),
        "{reason}"
    );
    // Its new run makes progress, then hangs: runguard acts on it as on any run it watches.
    log.iteration(20, 400.0);
    rig.step(&mut engine, 5).await;
    assert_eq!(
        rig.status().workflows[0].attempts[1].last_iteration,
        Some(20)
    );
    for _ in 0..100 {
        rig.step(&mut engine, 10).await;
    }
    assert!(
        rig.anomalies().contains(&AnomalyKind::Hang),
        "{:#?}",
        rig.status().workflows[0]
    );
    assert_eq!(rig.backend.requeues().len(), 1, "the hung run is requeued");
}
