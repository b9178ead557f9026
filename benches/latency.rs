//! Detection latency: time from the log line that completes an anomaly (the fifth slow iteration of a
//! persistent throughput drop) to the engine raising it, with file events (inotify) and polling only.
//!
//! `cargo bench --bench latency`. Real clock, default 5 s poll interval; each round is a fresh engine.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use runguard_engine::attribute::Catalog;
use runguard_engine::backend::{ActionOutcome, Backend, BackendError, JobSnapshot};
use runguard_engine::clock::RealClock;
use runguard_engine::config::Config;
use runguard_engine::engine::{Engine, EngineEvent, EngineOptions};
use runguard_engine::model::{
    ActionKind, ActionParams, AnomalyKind, JobSpec, JobState, RecoveryLimits,
};
use runguard_engine::store::Store;

const ROUNDS: usize = 5;

/// One running job whose log the benchmark writes.
struct OneJob {
    log: PathBuf,
}

#[async_trait]
impl Backend for OneJob {
    fn kind(&self) -> runguard_engine::model::BackendKind {
        runguard_engine::model::BackendKind::Sim
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
        Ok(vec![JobSnapshot {
            job_id: "1".into(),
            name: "bench".into(),
            user: "bench".into(),
            state: JobState::Running,
            state_raw: "RUNNING".into(),
            reason: None,
            hold: None,
            nodes: vec!["node-01".into()],
            gpus: 8,
            submit_time: Some(chrono::Utc::now()),
            start_time: Some(chrono::Utc::now()),
            end_time: None,
            exit_code: None,
            restart_count: 0,
            excluded_nodes: vec![],
            log_path: Some(self.log.clone()),
            spec: JobSpec {
                name: "bench".into(),
                nodes: 1,
                gpus_per_node: 8,
                ..JobSpec::default()
            },
            limits: RecoveryLimits::default(),
            tag: None,
        }])
    }
    async fn job(&self, _: &str) -> Result<Option<JobSnapshot>, BackendError> {
        Ok(self.list_jobs().await?.pop())
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

fn iteration_line(iteration: u64, tflops: f64) -> String {
    format!(
        "  7: [{}] iteration {iteration:>8}/ 100000 | elapsed time per iteration (ms): 3000.0 | throughput per GPU (TFLOP/s/GPU): {tflops:.1} | lm loss: 2.0E+00 |\n",
        chrono::Utc::now().format("%Y-%m-%d %H:%M:%S")
    )
}

fn append(path: &Path, text: &str) {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .expect("log");
    file.write_all(text.as_bytes()).expect("write");
}

/// Seconds from the completing line to the anomaly.
async fn round(file_events: bool, round: u64) -> f64 {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("bench_1.log");
    let mut config = Config::default();
    config.engine.file_events = file_events;
    let mut engine = Engine::new(
        Store::open(&dir.path().join("db.sqlite")).expect("store"),
        Arc::new(OneJob { log: log.clone() }),
        Arc::new(RealClock),
        config,
        Catalog::builtin().expect("catalog"),
        EngineOptions { auto: true },
    );
    let mut events = engine.subscribe();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let running = tokio::spawn(async move {
        let _ = engine
            .run(
                async {
                    let _ = stopped.await;
                },
                false,
            )
            .await;
    });
    // Baseline, then all but the last slow sample.
    let mut iteration = 0;
    for _ in 0..8 {
        iteration += 10;
        append(&log, &iteration_line(iteration, 400.0));
    }
    for _ in 0..4 {
        iteration += 10;
        append(&log, &iteration_line(iteration, 250.0));
    }
    // Let the engine read those, and land the last line at a random point of the poll cycle.
    tokio::time::sleep(Duration::from_millis(5_500 + round * 1_000)).await;
    let written = Instant::now();
    append(&log, &iteration_line(iteration + 10, 250.0));
    let latency = loop {
        match tokio::time::timeout(Duration::from_secs(30), events.recv()).await {
            Ok(Ok(EngineEvent::AnomalyRaised {
                kind: AnomalyKind::ThroughputDrop,
                ..
            })) => break written.elapsed().as_secs_f64(),
            Ok(Ok(_)) | Ok(Err(tokio::sync::broadcast::error::RecvError::Lagged(_))) => {}
            _ => break f64::NAN,
        }
    };
    let _ = stop.send(());
    let _ = running.await;
    latency
}

fn summary(mut values: Vec<f64>) -> String {
    values.sort_by(f64::total_cmp);
    format!(
        "min {:.2} s, median {:.2} s, max {:.2} s",
        values[0],
        values[values.len() / 2],
        values[values.len() - 1]
    )
}

#[tokio::main]
async fn main() {
    for (label, file_events) in [
        ("file events (inotify)", true),
        ("polling only (5 s)", false),
    ] {
        let mut latencies = Vec::new();
        for n in 0..ROUNDS {
            latencies.push(round(file_events, n as u64).await);
        }
        println!(
            "{label}: anomaly raised after its line: {}",
            summary(latencies)
        );
    }
}
