//! Behaviour of the simulated cluster, read back through the engine's own log parsers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::*;
use crate::backend::{Backend, BackendError, JobSnapshot};
use crate::clock::{Clock, ManualClock};
use crate::model::{JobState, RecoveryLimits};
use crate::telemetry::line::frame_with_year;
use crate::telemetry::record::{Record, named_host, recognise};

fn epoch() -> DateTime<Utc> {
    DateTime::from_timestamp(1_767_600_000, 0).unwrap()
}

/// One log line as the engine's telemetry understands it.
#[derive(Debug, Clone)]
struct Parsed {
    rank: Option<u32>,
    message: String,
    record: Option<Record>,
    host: Option<String>,
}

fn parse_log(path: &Path) -> Vec<Parsed> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|line| {
            let framed = frame_with_year(line, 2026);
            Parsed {
                rank: framed.rank,
                message: framed.message.to_string(),
                record: recognise(framed.message),
                host: named_host(framed.message).map(str::to_string),
            }
        })
        .collect()
}

fn iterations(lines: &[Parsed]) -> Vec<(u64, Option<f64>)> {
    lines
        .iter()
        .filter_map(|line| match &line.record {
            Some(Record::Iteration {
                iteration,
                tflops_per_gpu,
                ..
            }) => Some((*iteration, *tflops_per_gpu)),
            _ => None,
        })
        .collect()
}

fn saved(lines: &[Parsed]) -> Vec<u64> {
    lines
        .iter()
        .filter_map(|line| match &line.record {
            Some(Record::CheckpointSaved { iteration, .. }) => *iteration,
            _ => None,
        })
        .collect()
}

fn loaded(lines: &[Parsed]) -> Vec<u64> {
    lines
        .iter()
        .filter_map(|line| match &line.record {
            Some(Record::CheckpointLoaded { iteration, .. }) => *iteration,
            _ => None,
        })
        .collect()
}

fn exceptions(lines: &[Parsed]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|line| match &line.record {
            Some(Record::ExceptionLine { exception, .. }) => Some(exception.clone()),
            _ => None,
        })
        .collect()
}

fn has_record(lines: &[Parsed], wanted: &Record) -> bool {
    lines
        .iter()
        .any(|line| line.record.as_ref() == Some(wanted))
}

/// The host the last `srun: error:` line names.
fn srun_host(lines: &[Parsed]) -> Option<String> {
    lines
        .iter()
        .rev()
        .find(|line| line.message.starts_with("srun: error:"))
        .and_then(|line| line.host.clone())
}

/// Every file the sim wrote (logs, kernel logs, trackers), by path relative to its directory, with the
/// directory itself (which the logs name in checkpoint paths) replaced by `$SIM`.
fn files_of(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, into: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(root, &path, into);
            } else {
                let name = path.strip_prefix(root).unwrap().display().to_string();
                if name != "state.json" {
                    let text = String::from_utf8(std::fs::read(&path).unwrap()).unwrap();
                    into.insert(name, text.replace(&root.display().to_string(), "$SIM"));
                }
            }
        }
    }
    let mut files = BTreeMap::new();
    walk(dir, dir, &mut files);
    files
}

/// Asserts two sims wrote the same files, naming the first file that differs.
fn assert_same_files(expected: &BTreeMap<String, String>, actual: &BTreeMap<String, String>) {
    assert_eq!(
        expected.keys().collect::<Vec<_>>(),
        actual.keys().collect::<Vec<_>>()
    );
    for (name, text) in expected {
        assert!(actual[name] == *text, "{name} differs");
    }
}

/// A sim on a manual clock in its own directory.
struct Harness {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    clock: Arc<ManualClock>,
    scenario: Scenario,
    seed: u64,
    sim: SimCluster,
}

impl Harness {
    fn new(scenario: &str, seed: u64) -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("sim");
        let clock = Arc::new(ManualClock::new(epoch()));
        let scenario = Scenario::builtin(scenario).unwrap();
        let sim = open(&dir, &clock, &scenario, seed);
        Self {
            _tmp: tmp,
            dir,
            clock,
            scenario,
            seed,
            sim,
        }
    }

    fn reopen(&mut self) {
        self.sim = open(&self.dir, &self.clock, &self.scenario, self.seed);
    }

    fn elapsed_s(&self) -> i64 {
        (self.clock.now() - epoch()).num_seconds()
    }

    /// Polls every `step_s` sim seconds, like the engine, until `done` holds (or `limit_s` passes).
    async fn poll_until(
        &self,
        step_s: u64,
        limit_s: i64,
        done: impl Fn(&[JobSnapshot]) -> bool,
    ) -> Vec<JobSnapshot> {
        loop {
            let jobs = self.sim.list_jobs().await.unwrap();
            if done(&jobs) {
                return jobs;
            }
            assert!(
                self.elapsed_s() < limit_s,
                "not done after {limit_s} s: {jobs:#?}"
            );
            self.clock.advance(Duration::from_secs(step_s));
        }
    }

    async fn job(&self, id: &str) -> JobSnapshot {
        self.sim.job(id).await.unwrap().unwrap()
    }
}

fn open(dir: &Path, clock: &Arc<ManualClock>, scenario: &Scenario, seed: u64) -> SimCluster {
    let clock: Arc<dyn Clock> = clock.clone();
    SimCluster::open(SimOptions::new(dir, scenario.clone(), seed), clock).unwrap()
}

fn terminal(jobs: &[JobSnapshot]) -> bool {
    !jobs.is_empty() && jobs.iter().all(|job| job.state.is_terminal())
}

fn first_terminal(jobs: &[JobSnapshot]) -> bool {
    jobs.first().is_some_and(|job| job.state.is_terminal())
}

fn names(nodes: &[&str]) -> Vec<String> {
    nodes.iter().map(|node| node.to_string()).collect()
}

#[tokio::test]
async fn demo_fails_on_node_07_with_lines_the_parsers_recognise() {
    let h = Harness::new("nccl-timeout", 42);
    let jobs = h.poll_until(5, 4 * 3600, first_terminal).await;
    assert_eq!(jobs.len(), 1);
    let job = &jobs[0];
    assert_eq!(job.job_id, "4201");
    assert_eq!(job.name, "llama3-8b-pretrain");
    assert_eq!(
        (job.state, job.state_raw.as_str()),
        (JobState::Failed, "FAILED")
    );
    assert_eq!(job.exit_code, Some(1));
    assert_eq!(job.restart_count, 0);
    assert_eq!(
        job.nodes,
        names(&["node-05", "node-06", "node-07", "node-08"])
    );
    assert_eq!(job.gpus, 32);
    assert_eq!(
        job.limits,
        RecoveryLimits {
            max_requeue_times: Some(3),
            auto_resume_mode: Some("requeue".to_string()),
            allowed_actions: None,
        }
    );
    assert_eq!(job.spec.nodes, 4);
    assert_eq!(job.spec.gpus_per_node, 8);
    let log_path = job.log_path.clone().unwrap();
    assert!(log_path.ends_with("logs/llama3-8b-pretrain_4201_0.log"));

    let lines = parse_log(&log_path);
    let progress = iterations(&lines);
    assert_eq!(progress.first().map(|p| p.0), Some(10));
    assert_eq!(progress.last().map(|p| p.0), Some(350));
    assert_eq!(progress.len(), 35);
    for (_, tflops) in &progress {
        let tflops = tflops.unwrap();
        assert!((380.0..425.0).contains(&tflops), "{tflops}");
    }
    assert!(lines.iter().all(
        |line| !matches!(line.record, Some(Record::Iteration { .. })) || line.rank == Some(31)
    ));
    assert_eq!(saved(&lines), vec![100, 200, 300]);
    assert!(loaded(&lines).is_empty());
    assert!(!has_record(&lines, &Record::TrainingDone));

    let nccl_warns: Vec<&Parsed> = lines
        .iter()
        .filter(|line| line.message.contains("NCCL WARN"))
        .collect();
    assert!(!nccl_warns.is_empty());
    for warn in &nccl_warns {
        assert_eq!(warn.host.as_deref(), Some("node-07"));
        assert!(matches!(warn.record, Some(Record::Error { .. })));
        assert!((16..24).contains(&warn.rank.unwrap()));
    }
    let watchdog_ranks: Vec<u32> = lines
        .iter()
        .filter(|line| {
            matches!(&line.record, Some(Record::Error { text }) if text.contains("Watchdog caught collective operation timeout") && text.contains("Timeout(ms)=60000)"))
        })
        .map(|line| line.rank.unwrap())
        .collect();
    assert_eq!(watchdog_ranks, (0..32).collect::<Vec<_>>());
    assert_eq!(srun_host(&lines).as_deref(), Some("node-07"));
    assert!(lines.iter().any(|line| line.message
        == "srun: error: node-07: tasks 16-23: Exited with exit code 1"
        && matches!(line.record, Some(Record::Error { .. }))));

    // The watchdog fires a minute after progress stopped.
    let stalled = h.elapsed_s();
    assert!(stalled > 1_200 + 60, "{stalled}");
    let tracker = h
        .dir
        .join("checkpoints/llama3-8b-pretrain/latest_checkpointed_iteration.txt");
    assert_eq!(std::fs::read_to_string(tracker).unwrap(), "300");
    assert_eq!(
        h.sim.node_log("node-07"),
        Some(h.dir.join("nodes/node-07/kern.log"))
    );
    assert!(h.sim.node_log("node-07").unwrap().exists());
    assert_eq!(h.sim.node_log("node-99"), None);
}

#[tokio::test]
async fn requeue_excluding_node_07_resumes_from_checkpoint_300_and_completes() {
    let h = Harness::new("nccl-timeout", 42);
    let failed = h.poll_until(5, 4 * 3600, first_terminal).await;
    let first_log = failed[0].log_path.clone().unwrap();
    let first_log_bytes = std::fs::read(&first_log).unwrap();

    let outcome = h.sim.requeue("4201", &names(&["node-07"])).await.unwrap();
    assert!(outcome.detail.contains("node-07"), "{}", outcome.detail);
    assert_eq!(outcome.new_job_id, None);
    let requeued = h.job("4201").await;
    assert_eq!(
        (requeued.state, requeued.state_raw.as_str()),
        (JobState::Requeued, "REQUEUED")
    );
    assert_eq!(requeued.restart_count, 1);
    assert_eq!(requeued.excluded_nodes, names(&["node-07"]));
    assert!(requeued.nodes.is_empty());
    assert_ne!(requeued.log_path.as_ref(), Some(&first_log));

    h.clock.advance(Duration::from_secs(5));
    let pending = h.job("4201").await;
    assert_eq!(
        (pending.state, pending.reason.as_deref()),
        (JobState::Pending, Some("BeginTime"))
    );

    let done = h.poll_until(5, 4 * 3600, first_terminal).await;
    let job = &done[0];
    assert_eq!((job.state, job.exit_code), (JobState::Completed, Some(0)));
    assert_eq!(job.job_id, "4201");
    assert!(!job.nodes.contains(&"node-07".to_string()));
    assert_eq!(
        job.nodes,
        names(&["node-01", "node-02", "node-03", "node-04"])
    );
    let log = job.log_path.clone().unwrap();
    assert!(log.ends_with("logs/llama3-8b-pretrain_4201_1.log"));

    let lines = parse_log(&log);
    assert_eq!(loaded(&lines), vec![300, 300]);
    let progress = iterations(&lines);
    assert_eq!(progress.first().map(|p| p.0), Some(310));
    assert_eq!(progress.last().map(|p| p.0), Some(600));
    assert_eq!(saved(&lines), vec![400, 500, 600]);
    assert!(has_record(&lines, &Record::TrainingDone));
    assert!(
        lines.iter().all(|line| !matches!(
            line.record,
            Some(Record::Error { .. }) | Some(Record::ExceptionLine { .. })
        )),
        "a healthy attempt writes no errors"
    );
    // The failed attempt's log is left as it was.
    assert_eq!(std::fs::read(&first_log).unwrap(), first_log_bytes);
    let tracker = h
        .dir
        .join("checkpoints/llama3-8b-pretrain/latest_checkpointed_iteration.txt");
    assert_eq!(std::fs::read_to_string(tracker).unwrap(), "600");
    // The whole demo fits the minute it has at speed 60.
    assert!(h.elapsed_s() < 3_600, "{}", h.elapsed_s());
}

/// Runs the demo with an engine-like loop (poll every 5 s, requeue on failure excluding node-07),
/// optionally reopening the sim every `reopen_every` polls; returns every file it wrote.
async fn demo_run(seed: u64, reopen_every: Option<usize>) -> (BTreeMap<String, String>, i64) {
    let mut h = Harness::new("nccl-timeout", seed);
    let mut polls = 0;
    let mut requeued_at = None;
    loop {
        let jobs = h.sim.list_jobs().await.unwrap();
        if jobs[0].state == JobState::Failed && requeued_at.is_none() {
            h.sim.requeue("4201", &names(&["node-07"])).await.unwrap();
            requeued_at = Some(h.elapsed_s());
        }
        if jobs[0].state == JobState::Completed {
            break;
        }
        assert!(h.elapsed_s() < 4 * 3600);
        h.clock.advance(Duration::from_secs(5));
        polls += 1;
        if reopen_every.is_some_and(|every| polls % every == 0) {
            h.reopen();
        }
    }
    (files_of(&h.dir), requeued_at.unwrap_or_default())
}

#[tokio::test]
async fn reopening_mid_run_writes_the_same_bytes_as_an_uninterrupted_run() {
    let (uninterrupted, requeued_at) = demo_run(42, None).await;
    let (reopened, requeued_again) = demo_run(42, Some(37)).await;
    assert_eq!(requeued_at, requeued_again);
    assert_same_files(&uninterrupted, &reopened);

    // Advancing in big leaps to the same action times also gives the same bytes: nothing depends
    // on when the sim is asked.
    let h = Harness::new("nccl-timeout", 42);
    h.clock.advance(Duration::from_secs(requeued_at as u64));
    h.sim.requeue("4201", &names(&["node-07"])).await.unwrap();
    h.clock.advance(Duration::from_secs(1_700));
    h.sim.list_jobs().await.unwrap();
    h.clock.advance(Duration::from_secs(2_000));
    let jobs = h.sim.list_jobs().await.unwrap();
    assert_eq!(jobs[0].state, JobState::Completed);
    assert_same_files(&uninterrupted, &files_of(&h.dir));
}

#[tokio::test]
async fn reopen_cuts_lines_written_after_the_last_saved_state() {
    let reference = Harness::new("healthy", 7);
    let mut h = Harness::new("healthy", 7);
    for harness in [&reference, &h] {
        harness.clock.advance(Duration::from_secs(600));
        harness.sim.list_jobs().await.unwrap();
    }
    let log = h.dir.join("logs/llama3-8b-pretrain_4201_0.log");
    let kern = h.dir.join("nodes/node-01/kern.log");
    let committed_log = std::fs::read(&log).unwrap();
    let committed_kern = std::fs::read(&kern).unwrap();
    let state = std::fs::read(h.dir.join("state.json")).unwrap();

    // The process advances, writes its lines, and dies before (or while) it saves its state.
    h.clock.advance(Duration::from_secs(300));
    h.sim.list_jobs().await.unwrap();
    assert!(std::fs::read(&log).unwrap().len() > committed_log.len());
    std::fs::write(h.dir.join("state.json"), &state).unwrap();
    let mut file = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut file, b" 31:  [2026-01-05 08:1").unwrap();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&kern)
        .unwrap();
    std::io::Write::write_all(&mut file, b"Jan  5 08:1").unwrap();

    h.reopen();
    assert_eq!(std::fs::read(&log).unwrap(), committed_log);
    assert_eq!(std::fs::read(&kern).unwrap(), committed_kern);

    for harness in [&reference, &h] {
        harness.clock.advance(Duration::from_secs(4_000));
        let jobs = harness.sim.list_jobs().await.unwrap();
        assert!(terminal(&jobs));
    }
    assert_same_files(&files_of(&reference.dir), &files_of(&h.dir));
}

#[tokio::test]
async fn the_same_seed_gives_the_same_bytes_and_another_seed_does_not() {
    let (first, _) = demo_run(42, None).await;
    let (second, _) = demo_run(42, None).await;
    let (other, _) = demo_run(43, None).await;
    assert_same_files(&first, &second);
    let log = "logs/llama3-8b-pretrain_4201_1.log";
    assert!(first.contains_key(log) && other.contains_key(log));
    assert_ne!(first[log], other[log]);
}

#[test]
fn every_builtin_scenario_parses() {
    let builtins = Scenario::builtin_names();
    assert_eq!(
        builtins,
        vec![
            "nccl-timeout",
            "xid79",
            "cuda-oom",
            "hang",
            "straggler",
            "app-bug",
            "crash-loop",
            "healthy"
        ]
    );
    for name in builtins {
        let scenario = Scenario::builtin(name).unwrap_or_else(|| panic!("{name} does not parse"));
        assert_eq!(scenario.name, name);
        assert!(scenario.description.len() > 40, "{name}");
        assert!(!scenario.jobs.is_empty());
        assert_eq!(Scenario::resolve(name).unwrap(), scenario);
    }
}

#[test]
fn resolve_loads_a_path_and_names_the_builtins_for_an_unknown_name() {
    let err = Scenario::resolve("no-such-scenario").unwrap_err();
    let message = err.to_string();
    assert!(message.contains("no-such-scenario"), "{message}");
    assert!(
        message.contains("nccl-timeout") && message.contains("healthy"),
        "{message}"
    );

    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("mine.toml");
    std::fs::write(
        &path,
        "name = \"mine\"\ndescription = \"one small job\"\n[[jobs]]\nname = \"tiny\"\nnodes = 1\niterations = 20\nseconds_per_iteration = 1.0\ntflops_per_gpu = 100.0\n",
    )
    .unwrap();
    let scenario = Scenario::resolve(path.to_str().unwrap()).unwrap();
    assert_eq!(scenario.name, "mine");
    assert_eq!(scenario.jobs[0].checkpoint_interval, 100);
    assert_eq!(scenario.jobs[0].gpus_per_node, 8);
}

#[test]
fn bad_scenario_toml_names_the_line() {
    let text =
        "name = \"broken\"\ndescription = \"x\"\n\n[[jobs]]\nname = \"a\"\nnodes = \"four\"\n";
    let message = Scenario::parse(text, "broken.toml")
        .unwrap_err()
        .to_string();
    assert!(message.contains("broken.toml"), "{message}");
    assert!(message.contains("line 6"), "{message}");

    let typo =
        "name = \"typo\"\ndescription = \"x\"\n[[jobs]]\nname = \"a\"\nnodes = 1\nnodez = 2\n";
    let message = Scenario::parse(typo, "typo.toml").unwrap_err().to_string();
    assert!(
        message.contains("line 6") && message.contains("nodez"),
        "{message}"
    );

    let nonsense = "name = \"zero\"\ndescription = \"x\"\n[[jobs]]\nname = \"a\"\nnodes = 1\niterations = 10\nseconds_per_iteration = 1.0\ntflops_per_gpu = 1.0\ncheckpoint_interval = 0\n";
    let message = Scenario::parse(nonsense, "zero.toml")
        .unwrap_err()
        .to_string();
    assert!(
        message.contains("job `a`") && message.contains("checkpoint_interval"),
        "{message}"
    );

    let two_triggers = "name = \"f\"\ndescription = \"x\"\n[[jobs]]\nname = \"a\"\nnodes = 1\niterations = 10\nseconds_per_iteration = 1.0\ntflops_per_gpu = 1.0\n[[jobs.faults]]\nkind = \"hang\"\nat_iteration = 3\nafter_iterations = 2\n";
    let message = Scenario::parse(two_triggers, "f.toml")
        .unwrap_err()
        .to_string();
    assert!(message.contains("fault #1 (hang)"), "{message}");
}

#[tokio::test]
async fn an_exclusion_that_leaves_too_few_nodes_is_invalid_and_changes_nothing() {
    let h = Harness::new("nccl-timeout", 42);
    h.poll_until(5, 4 * 3600, first_terminal).await;
    let too_many: Vec<String> = (1..=13).map(|n| format!("node-{n:02}")).collect();
    let err = h.sim.requeue("4201", &too_many).await.unwrap_err();
    assert!(matches!(err, BackendError::Invalid(_)), "{err}");
    assert!(err.to_string().contains("needs 4"), "{err}");
    let err = h
        .sim
        .requeue("4201", &names(&["node-77"]))
        .await
        .unwrap_err();
    assert!(matches!(err, BackendError::Invalid(_)), "{err}");
    let job = h.job("4201").await;
    assert_eq!((job.state, job.restart_count), (JobState::Failed, 0));
    assert!(job.excluded_nodes.is_empty());

    let spec = job.spec.clone();
    let err = h.sim.resubmit(&spec, &too_many, "wf-1").await.unwrap_err();
    assert!(matches!(err, BackendError::Invalid(_)), "{err}");
    assert_eq!(h.sim.list_jobs().await.unwrap().len(), 1);
}

#[tokio::test]
async fn unknown_jobs_are_no_such_job() {
    let h = Harness::new("healthy", 1);
    assert!(h.sim.job("999").await.unwrap().is_none());
    assert!(h.sim.job("not-a-number").await.unwrap().is_none());
    let err = h.sim.requeue("999", &[]).await.unwrap_err();
    assert!(
        matches!(err, BackendError::NoSuchJob(ref id) if id == "999"),
        "{err}"
    );
    let err = h.sim.cancel("abc").await.unwrap_err();
    assert!(matches!(err, BackendError::NoSuchJob(_)), "{err}");
}

#[tokio::test]
async fn resubmit_runs_a_new_job_id_from_the_same_checkpoints_and_is_idempotent_per_tag() {
    let h = Harness::new("nccl-timeout", 42);
    let failed = h.poll_until(5, 4 * 3600, first_terminal).await;
    let spec = failed[0].spec.clone();
    let outcome = h
        .sim
        .resubmit(&spec, &names(&["node-07"]), "wf1-attempt1")
        .await
        .unwrap();
    assert_eq!(outcome.new_job_id.as_deref(), Some("4202"));
    let again = h
        .sim
        .resubmit(&spec, &names(&["node-07"]), "wf1-attempt1")
        .await
        .unwrap();
    assert_eq!(again.new_job_id.as_deref(), Some("4202"));

    let jobs = h
        .poll_until(5, 4 * 3600, |jobs| {
            jobs.len() == 2 && jobs[1].state.is_terminal()
        })
        .await;
    let job = &jobs[1];
    assert_eq!(job.tag.as_deref(), Some("wf1-attempt1"));
    assert_eq!((job.state, job.restart_count), (JobState::Completed, 0));
    assert_eq!(job.excluded_nodes, names(&["node-07"]));
    assert_eq!(jobs[0].state, JobState::Failed);
    let lines = parse_log(job.log_path.as_ref().unwrap());
    assert!(
        job.log_path
            .as_ref()
            .unwrap()
            .ends_with("logs/llama3-8b-pretrain_4202_0.log")
    );
    assert_eq!(loaded(&lines), vec![300, 300]);
    assert_eq!(iterations(&lines).first().map(|p| p.0), Some(310));
    assert!(has_record(&lines, &Record::TrainingDone));

    let mut stranger = spec.clone();
    stranger.name = "someone-elses-job".to_string();
    let err = h.sim.resubmit(&stranger, &[], "wf2").await.unwrap_err();
    assert!(matches!(err, BackendError::Invalid(_)), "{err}");
}

#[tokio::test]
async fn fifo_scheduling_drain_and_cancel() {
    let h = Harness::new("healthy", 3);
    let jobs = h.sim.list_jobs().await.unwrap();
    assert_eq!(jobs.len(), 1, "the second job is submitted a minute later");
    assert_eq!(
        (jobs[0].state, jobs[0].reason.as_deref()),
        (JobState::Pending, Some("Priority"))
    );
    h.sim.drain_node("node-01", "bad DIMM").await.unwrap();

    let jobs = h
        .poll_until(5, 600, |jobs| {
            jobs.len() == 2 && jobs[1].state == JobState::Running
        })
        .await;
    assert_eq!(
        jobs[0].nodes,
        names(&["node-02", "node-03", "node-04", "node-05"])
    );
    assert_eq!(jobs[1].nodes, names(&["node-06", "node-07"]));
    assert_eq!(
        jobs[1].submit_time,
        Some(epoch() + chrono::TimeDelta::seconds(60))
    );

    let outcome = h.sim.cancel("4202").await.unwrap();
    assert!(outcome.detail.contains("4202"));
    let job = h.job("4202").await;
    assert_eq!(
        (job.state, job.state_raw.as_str()),
        (JobState::Cancelled, "CANCELLED")
    );
    let lines = parse_log(job.log_path.as_ref().unwrap());
    assert!(lines.last().unwrap().message.contains("CANCELLED AT"));
    assert!(
        h.sim.cancel("4202").await.is_ok(),
        "cancelling twice is harmless"
    );
    assert!(matches!(
        h.sim.requeue("4202", &[]).await,
        Err(BackendError::Invalid(_))
    ));
    assert!(matches!(
        h.sim.drain_node("node-42", "x").await,
        Err(BackendError::Invalid(_))
    ));
}

#[tokio::test]
async fn pending_jobs_wait_for_resources_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::new(epoch()));
    let scenario = Scenario::builtin("healthy").unwrap();
    let dyn_clock: Arc<dyn Clock> = clock.clone();
    let sim = SimCluster::open(
        SimOptions {
            dir: tmp.path().to_path_buf(),
            scenario: scenario.clone(),
            seed: 5,
            nodes: 5,
        },
        dyn_clock,
    )
    .unwrap();
    clock.advance(Duration::from_secs(120));
    let jobs = sim.list_jobs().await.unwrap();
    assert_eq!(jobs[0].state, JobState::Running);
    assert_eq!(
        (jobs[1].state, jobs[1].reason.as_deref()),
        (JobState::Pending, Some("Resources"))
    );
    clock.advance(Duration::from_secs(3_600));
    let jobs = sim.list_jobs().await.unwrap();
    assert!(terminal(&jobs), "{jobs:#?}");
    assert!(jobs[1].start_time >= jobs[0].end_time);
}

#[tokio::test]
async fn a_hung_job_stays_running_silently_until_requeued() {
    let h = Harness::new("hang", 11);
    let jobs = h
        .poll_until(5, 3 * 3600, |jobs| {
            jobs[0]
                .log_path
                .as_ref()
                .is_some_and(|log| iterations(&parse_log(log)).last().map(|p| p.0) == Some(230))
        })
        .await;
    let log = jobs[0].log_path.clone().unwrap();
    let length = std::fs::metadata(&log).unwrap().len();
    h.clock.advance(Duration::from_secs(3_600));
    let job = h.job("4201").await;
    assert_eq!(job.state, JobState::Running);
    assert_eq!(
        std::fs::metadata(&log).unwrap().len(),
        length,
        "a hung job writes nothing"
    );

    h.sim.requeue("4201", &[]).await.unwrap();
    let lines = parse_log(&log);
    let last = lines.last().unwrap();
    assert!(last.message.contains("CANCELLED AT") && last.message.contains("DUE TO JOB REQUEUE"));
    let done = h.poll_until(5, 6 * 3600, first_terminal).await;
    assert_eq!(done[0].state, JobState::Completed);
    let lines = parse_log(done[0].log_path.as_ref().unwrap());
    assert_eq!(loaded(&lines), vec![200, 200]);
}

#[tokio::test]
async fn xid79_shows_in_the_kernel_log_of_the_node_the_ranks_fail_on() {
    let h = Harness::new("xid79", 42);
    let jobs = h.poll_until(5, 3 * 3600, first_terminal).await;
    assert_eq!(jobs[0].state, JobState::Failed);
    let lines = parse_log(jobs[0].log_path.as_ref().unwrap());
    let node = srun_host(&lines).unwrap();
    assert!(jobs[0].nodes.contains(&node));
    assert!(exceptions(&lines).contains(&"RuntimeError".to_string()));
    assert!(
        lines
            .iter()
            .any(|line| line.message == "RuntimeError: CUDA error: unspecified launch failure")
    );
    assert_eq!(iterations(&lines).last().map(|p| p.0), Some(230));

    let kern = parse_log(&h.sim.node_log(&node).unwrap());
    let xid: Vec<&Parsed> = kern
        .iter()
        .filter(|line| line.message.contains("NVRM: Xid"))
        .collect();
    assert_eq!(xid.len(), 1);
    assert!(matches!(&xid[0].record, Some(Record::Error { text }) if text.contains(": 79, pid=")));
    for other in jobs[0].nodes.iter().filter(|other| **other != node) {
        let quiet = parse_log(&h.sim.node_log(other).unwrap());
        assert!(quiet.iter().all(|line| line.record.is_none()), "{other}");
    }

    h.sim
        .requeue("4201", std::slice::from_ref(&node))
        .await
        .unwrap();
    let done = h.poll_until(5, 6 * 3600, first_terminal).await;
    assert_eq!(done[0].state, JobState::Completed);
    assert!(!done[0].nodes.contains(&node));
}

#[tokio::test]
async fn cuda_oom_strikes_every_attempt() {
    let h = Harness::new("cuda-oom", 42);
    for attempt in 0..3 {
        let jobs = h.poll_until(5, 4 * 3600, first_terminal).await;
        assert_eq!(jobs[0].state, JobState::Failed);
        let lines = parse_log(jobs[0].log_path.as_ref().unwrap());
        assert!(
            lines.iter().any(|line| matches!(&line.record, Some(Record::ExceptionLine { exception, message }) if exception == "torch.OutOfMemoryError" && message.starts_with("CUDA out of memory. Tried to allocate 2.00 GiB."))),
            "attempt {attempt}"
        );
        assert!(has_record(&lines, &Record::TracebackStart));
        assert_eq!(iterations(&lines).last().map(|p| p.0), Some(140));
        assert_eq!(loaded(&lines).is_empty(), attempt == 0);
        if attempt < 2 {
            h.sim.requeue("4201", &[]).await.unwrap();
        }
    }
}

#[tokio::test]
async fn app_bug_is_a_python_traceback_on_rank_0() {
    let h = Harness::new("app-bug", 42);
    let jobs = h.poll_until(5, 3600, first_terminal).await;
    assert_eq!(
        (jobs[0].state, jobs[0].exit_code),
        (JobState::Failed, Some(1))
    );
    let lines = parse_log(jobs[0].log_path.as_ref().unwrap());
    let traceback: Vec<&Parsed> = lines
        .iter()
        .filter(|line| line.record == Some(Record::TracebackStart))
        .collect();
    assert_eq!(traceback.len(), 1);
    assert_eq!(traceback[0].rank, Some(0));
    assert!(lines.iter().any(|line| line.record
        == Some(Record::ExceptionLine {
            exception: "KeyError".to_string(),
            message: "'attention_mask'".to_string()
        })
        && line.rank == Some(0)));
    assert!(
        lines
            .iter()
            .any(|line| line.message == "srun: error: node-01: task 0: Exited with exit code 1")
    );
    assert_eq!(srun_host(&lines).as_deref(), Some("node-01"));
}

#[tokio::test]
async fn a_straggler_slows_the_run_which_still_completes() {
    let h = Harness::new("straggler", 42);
    let jobs = h.poll_until(5, 3 * 3600, first_terminal).await;
    assert_eq!(jobs[0].state, JobState::Completed);
    let lines = parse_log(jobs[0].log_path.as_ref().unwrap());
    let progress = iterations(&lines);
    let mean = |from: u64, to: u64| {
        let values: Vec<f64> = progress
            .iter()
            .filter(|(i, _)| (from..=to).contains(i))
            .filter_map(|(_, t)| *t)
            .collect();
        values.iter().sum::<f64>() / values.len() as f64
    };
    let (before, after) = (mean(20, 150), mean(160, 500));
    assert!((before / after - 1.4).abs() < 0.05, "{before} vs {after}");
    assert!(lines.iter().any(|line| line.message.contains("MxRtt/Rnk")));
    assert!(has_record(&lines, &Record::TrainingDone));
}

#[tokio::test]
async fn a_crash_loop_never_reaches_a_new_checkpoint_after_the_first_attempt() {
    let h = Harness::new("crash-loop", 42);
    let mut excluded = Vec::new();
    for attempt in 0..4 {
        let jobs = h.poll_until(5, 6 * 3600, first_terminal).await;
        assert_eq!(jobs[0].state, JobState::Failed, "attempt {attempt}");
        let lines = parse_log(jobs[0].log_path.as_ref().unwrap());
        if attempt == 0 {
            assert_eq!(saved(&lines), vec![100, 200]);
            assert_eq!(iterations(&lines).last().map(|p| p.0), Some(230));
        } else {
            assert_eq!(loaded(&lines), vec![200, 200]);
            assert!(saved(&lines).is_empty(), "attempt {attempt}");
            assert_eq!(iterations(&lines).last().map(|p| p.0), Some(240));
        }
        let culprit = srun_host(&lines).unwrap();
        assert!(lines.iter().any(|line| line.message.contains("NCCL WARN")
            && line.host.as_deref() == Some(culprit.as_str())));
        excluded.push(culprit);
        h.sim.requeue("4201", &excluded).await.unwrap();
    }
}

#[tokio::test]
async fn startup_and_healthy_progress_produce_no_error_records() {
    let h = Harness::new("healthy", 9);
    let jobs = h.poll_until(5, 3 * 3600, terminal).await;
    assert_eq!(jobs.len(), 2);
    for job in &jobs {
        assert_eq!((job.state, job.exit_code), (JobState::Completed, Some(0)));
        let lines = parse_log(job.log_path.as_ref().unwrap());
        let noisy: Vec<&Parsed> = lines
            .iter()
            .filter(|line| {
                !matches!(
                    line.record,
                    None | Some(Record::Iteration { .. })
                        | Some(Record::CheckpointSaved { .. })
                        | Some(Record::TrainingDone)
                )
            })
            .collect();
        assert!(noisy.is_empty(), "{noisy:#?}");
        assert!(loaded(&lines).is_empty());
        assert_eq!(
            iterations(&lines).last().map(|p| p.0),
            job.spec.name.contains("llama").then_some(400).or(Some(300))
        );
    }
    for node in 1..=16 {
        let kern = parse_log(&h.sim.node_log(&format!("node-{node:02}")).unwrap());
        assert_eq!(kern.len(), 3);
        assert!(kern.iter().all(|line| line.record.is_none()));
    }
}

#[test]
fn timeline_continues_across_restarts_and_rebases_on_a_new_speed() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = timeline(tmp.path(), 60.0).unwrap();
    let start = clock.now();
    assert!(start >= epoch() && start < epoch() + chrono::TimeDelta::seconds(60));
    let stored = std::fs::read(tmp.path().join("timeline.json")).unwrap();

    let again = timeline(tmp.path(), 60.0).unwrap();
    assert!(again.now() >= start);
    assert_eq!(
        std::fs::read(tmp.path().join("timeline.json")).unwrap(),
        stored
    );

    let faster = timeline(tmp.path(), 1200.0).unwrap();
    assert_eq!(faster.speed(), 1200.0);
    assert!(faster.now() >= start && faster.now() < start + chrono::TimeDelta::seconds(120));
    assert_ne!(
        std::fs::read(tmp.path().join("timeline.json")).unwrap(),
        stored
    );

    assert!(matches!(timeline(tmp.path(), 0.0), Err(SimError::Speed(_))));
    assert!(matches!(
        timeline(tmp.path(), f64::NAN),
        Err(SimError::Speed(_))
    ));
}

#[tokio::test]
async fn reset_and_another_scenario_start_afresh() {
    let mut h = Harness::new("nccl-timeout", 42);
    h.clock.advance(Duration::from_secs(900));
    h.sim.list_jobs().await.unwrap();
    h.reopen();
    let jobs = h.sim.list_jobs().await.unwrap();
    assert_eq!(
        jobs[0].state,
        JobState::Running,
        "same scenario and seed continue"
    );

    h.scenario = Scenario::builtin("app-bug").unwrap();
    h.reopen();
    let jobs = h.sim.list_jobs().await.unwrap();
    assert_eq!((jobs.len(), jobs[0].name.as_str()), (1, "qwen2-7b-sft"));
    assert_eq!(jobs[0].state, JobState::Pending);
    assert!(!h.dir.join("logs/llama3-8b-pretrain_4201_0.log").exists());

    timeline(&h.dir, 60.0).unwrap();
    drop(h.sim);
    SimCluster::reset(&h.dir).unwrap();
    for gone in [
        "state.json",
        "timeline.json",
        "logs",
        "nodes",
        "checkpoints",
    ] {
        assert!(!h.dir.join(gone).exists(), "{gone}");
    }
}

#[test]
fn command_for_shows_the_slurm_commands() {
    let h = Harness::new("nccl-timeout", 42);
    let params = ActionParams {
        job_id: Some("4201".to_string()),
        exclude_nodes: names(&["node-07"]),
        ..ActionParams::default()
    };
    assert_eq!(
        h.sim.command_for(ActionKind::Requeue, &params),
        "scontrol requeuehold 4201 && scontrol update JobId=4201 ExcNodeList=node-07 && scontrol release 4201"
    );
    assert_eq!(
        h.sim.command_for(ActionKind::Resubmit, &params),
        "sbatch --job-name=llama3-8b-pretrain --nodes=4 --gpus-per-node=8 --partition=gpu --exclude=node-07 pretrain_llama3_8b.sbatch"
    );
    assert_eq!(
        h.sim.command_for(ActionKind::Cancel, &params),
        "scancel 4201"
    );
    let drain = ActionParams {
        node: Some("node-07".to_string()),
        reason: Some("Xid 79".to_string()),
        ..ActionParams::default()
    };
    assert_eq!(
        h.sim.command_for(ActionKind::DrainNode, &drain),
        "scontrol update NodeName=node-07 State=DRAIN Reason=\"Xid 79\""
    );
    assert_eq!(h.sim.name(), "sim");
}

#[test]
fn python_style_scientific_notation() {
    assert_eq!(text::sci(3.0e-4, 3), "3.000E-04");
    assert_eq!(text::sci(2.345678, 6), "2.345678E+00");
    assert_eq!(text::sci(12.5, 6), "1.250000E+01");
}

/// What an engine would do, crudely: requeue failures and hangs excluding the node the logs name, give up
/// on application errors and after the job's own requeue limit. Returns when every job is final.
async fn crude_engine(h: &Harness, heartbeat_s: i64) -> (Vec<JobSnapshot>, i64) {
    let mut last_growth: BTreeMap<String, (u64, i64)> = BTreeMap::new();
    loop {
        let jobs = h.sim.list_jobs().await.unwrap();
        let now = h.elapsed_s();
        let mut acting = false;
        for job in &jobs {
            let Some(log) = &job.log_path else { continue };
            let lines = parse_log(log);
            let culprit = srun_host(&lines).or_else(|| {
                lines.iter().rev().find_map(|line| {
                    line.host
                        .clone()
                        .filter(|_| line.message.contains("NCCL WARN"))
                })
            });
            let budget = job.restart_count < job.limits.max_requeue_times.unwrap_or(0);
            let hopeless = exceptions(&lines)
                .iter()
                .any(|e| e == "KeyError" || e == "torch.OutOfMemoryError")
                && job.restart_count >= 1;
            let length = std::fs::metadata(log).map(|m| m.len()).unwrap_or(0);
            let entry = last_growth
                .entry(log.display().to_string())
                .or_insert((length, now));
            if entry.0 != length {
                *entry = (length, now);
            }
            let silent_for = now - entry.1;
            let wants_requeue = match job.state {
                JobState::Failed => {
                    budget && !hopeless && !exceptions(&lines).contains(&"KeyError".to_string())
                }
                JobState::Running => budget && silent_for >= heartbeat_s,
                _ => false,
            };
            if wants_requeue {
                let exclude: Vec<String> = culprit.into_iter().collect();
                h.sim.requeue(&job.job_id, &exclude).await.unwrap();
                acting = true;
            }
        }
        if !acting && terminal(&jobs) {
            return (jobs, now);
        }
        assert!(now < 6 * 3600, "{jobs:#?}");
        h.clock.advance(Duration::from_secs(5));
    }
}

#[tokio::test]
async fn every_builtin_scenario_plays_out_within_an_hour_of_sim_time() {
    let expected = [
        ("nccl-timeout", JobState::Completed),
        ("xid79", JobState::Completed),
        ("cuda-oom", JobState::Failed),
        ("hang", JobState::Completed),
        ("straggler", JobState::Completed),
        ("app-bug", JobState::Failed),
        ("crash-loop", JobState::Failed),
        ("healthy", JobState::Completed),
    ];
    for ((name, outcome), heartbeat_s) in expected
        .into_iter()
        .map(|expected| (expected, 120))
        // The demo also when the engine waits for the NCCL watchdog instead of calling the silence a hang.
        .chain([(("nccl-timeout", JobState::Completed), 3_600)])
    {
        let h = Harness::new(name, 42);
        let (jobs, seconds) = crude_engine(&h, heartbeat_s).await;
        eprintln!(
            "{name} (heartbeat {heartbeat_s} s): final after {seconds} sim s ({:.0} s at speed 60), restarts {:?}",
            seconds as f64 / 60.0,
            jobs.iter().map(|job| job.restart_count).collect::<Vec<_>>()
        );
        assert!(
            jobs.iter().all(|job| job.state == outcome),
            "{name}: {jobs:#?}"
        );
        assert!(seconds < 3_600, "{name} takes {seconds} sim seconds");
    }
}

#[tokio::test]
async fn a_lost_timeline_restarts_where_the_sim_had_got_to() {
    let h = Harness::new("healthy", 2);
    h.clock.advance(Duration::from_secs(900));
    h.sim.list_jobs().await.unwrap();
    let clock = timeline(&h.dir, 60.0).unwrap();
    assert!(
        clock.now() >= epoch() + chrono::TimeDelta::seconds(890),
        "{}",
        clock.now()
    );
}
