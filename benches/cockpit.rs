//! The cockpit with 10 000 workflows (20 000 attempts): the time to read them from the store, the time
//! to draw a frame of the overview (search, sort and the table), the time of `runguard status --json`
//! over the same store, the cost of the cockpit's read once a second when nothing changed, and the
//! process's peak memory.
//!
//! `cargo bench --bench cockpit`. Goals: a frame in at most 10 ms, at most 150 MB.
//! `RUNGUARD_BENCH_ATTEMPTS=10 cargo bench --bench cockpit`: ten attempts a workflow (100 000).

use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use runguard::tui::app::{App, Column, RowOrder, UiAction};
use runguard::tui::panes;
use runguard::tui::snapshot::Snapshot;
use runguard::tui::theme::Theme;
use runguard_engine::config::Config;
use runguard_engine::model::{
    Attempt, Checkpoint, JobSpec, JobState, RecoveryLimits, ThroughputSample, Workflow,
    WorkflowStatus,
};
use runguard_engine::recover::Policy;
use runguard_engine::store::Store;

const WORKFLOWS: usize = 10_000;

/// Attempts per workflow: `RUNGUARD_BENCH_ATTEMPTS`, 2 by default.
fn attempts_per_workflow() -> u32 {
    std::env::var("RUNGUARD_BENCH_ATTEMPTS")
        .ok()
        .and_then(|value| value.parse().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(2)
}
const FRAMES: usize = 100;

fn fill(store: &mut Store, start: DateTime<Utc>) {
    store
        .write(|db| {
            for n in 0..WORKFLOWS {
                let id = db.insert_workflow(&Workflow {
                    id: 0,
                    name: format!("pretrain-{n:05}"),
                    backend: runguard_engine::model::BackendKind::Slurm,
                    spec: JobSpec {
                        name: format!("pretrain-{n:05}"),
                        user: format!("user{}", n % 40),
                        nodes: 4,
                        gpus_per_node: 8,
                        partition: Some("gpu".into()),
                        ..JobSpec::default()
                    },
                    limits: RecoveryLimits::default(),
                    status: WorkflowStatus::Enabled,
                    status_reason: None,
                    succeeded: false,
                    requeues_used: 1,
                    failures_since_checkpoint: 0,
                    created_at: start,
                    updated_at: start,
                })?;
                let attempts = attempts_per_workflow();
                for index in 0..attempts {
                    let began = start
                        + TimeDelta::seconds((n as i64 * 7 + i64::from(index) * 3600) % 86_400);
                    db.save_attempt(&Attempt {
                        workflow_id: id,
                        index,
                        job_id: (100_000 + n).to_string(),
                        restart_count: index,
                        nodes: (0..4)
                            .map(|k| format!("node-{:03}", (n + k) % 512))
                            .collect(),
                        gpus: 32,
                        state: if index + 1 < attempts {
                            JobState::Failed
                        } else {
                            JobState::Running
                        },
                        state_raw: if index + 1 < attempts {
                            "FAILED"
                        } else {
                            "RUNNING"
                        }
                        .into(),
                        reason: (index + 1 < attempts).then(|| "NonZeroExitCode".into()),
                        submit_time: Some(began),
                        start_time: Some(began + TimeDelta::seconds(30)),
                        end_time: (index + 1 < attempts).then(|| began + TimeDelta::seconds(3000)),
                        exit_code: (index + 1 < attempts).then_some(1),
                        excluded_nodes: Vec::new(),
                        log_path: None,
                        last_log_time: None,
                        last_iteration: Some(1000),
                        last_progress_time: None,
                        updated_at: began,
                    })?;
                    for k in 0..3u64 {
                        db.insert_checkpoint(&Checkpoint {
                            workflow_id: id,
                            attempt_index: index,
                            iteration: k * 100 + u64::from(index) * 1000,
                            time: began + TimeDelta::seconds(k as i64 * 600),
                            path: format!("/ckpt/{n}/iter_{k}"),
                        })?;
                    }
                    for k in 0..5u64 {
                        db.insert_throughput(&ThroughputSample {
                            workflow_id: id,
                            attempt_index: index,
                            time: began + TimeDelta::seconds(k as i64 * 60),
                            iteration: k * 10,
                            tflops_per_gpu: 400.0,
                            rank: None,
                            node: None,
                        })?;
                    }
                }
            }
            Ok(())
        })
        .expect("fill the store");
}

/// CPU seconds (user + system) this process has used: robust to other work on the machine, where
/// wall-clock times are not.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields
        .get(11..13)
        .map(|pair| pair.iter().filter_map(|f| f.parse::<f64>().ok()).sum())
        .unwrap_or_default();
    // Linux counts in ticks of 1/100 s.
    ticks / 100.0
}

/// Nanoseconds this thread has run on a CPU (/proc/thread-self/schedstat): a frame's cost whatever
/// else the machine runs.
fn thread_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|text| text.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn peak_memory_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

fn main() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut store = Store::open(&dir.path().join("runguard.sqlite")).expect("store");
    let start = DateTime::parse_from_rfc3339("2026-01-05T08:00:00Z")
        .expect("time")
        .with_timezone(&Utc);
    let filled = Instant::now();
    fill(&mut store, start);
    println!(
        "cockpit benchmark: {WORKFLOWS} workflows, {} attempts (store filled in {:.1} s)",
        WORKFLOWS * attempts_per_workflow() as usize,
        filled.elapsed().as_secs_f64()
    );
    if let Some(peak) = peak_memory_mb() {
        println!("peak memory after filling the store (VmHWM): {peak:.0} MB");
    }
    let policy = Policy::from_config(&Config::default().recovery, true);
    let now = start + TimeDelta::days(1);
    let (loaded, cpu) = (Instant::now(), cpu_seconds());
    let mut snapshot = Snapshot::load(&store.db(), &policy, None).expect("snapshot");
    println!(
        "read the store (the cockpit does it once a second): {:.0} ms ({:.0} ms of CPU)",
        loaded.elapsed().as_secs_f64() * 1000.0,
        (cpu_seconds() - cpu) * 1000.0
    );
    let theme = Theme::load("dark", None).expect("theme");
    let mut app = App::new("user1".into(), true);
    let mut terminal = Terminal::new(TestBackend::new(200, 60)).expect("terminal");
    let mut cases: Vec<(&str, Vec<Duration>, Vec<Duration>, Duration)> = Vec::new();
    for (label, sort) in [
        ("grouped by workflow", None),
        ("sorted by duration", Some((Column::Duration, true))),
    ] {
        app.sort = sort;
        let mut frames = Vec::with_capacity(FRAMES);
        let mut after_read = Vec::new();
        let mut on_cpu = 0;
        for frame in 0..FRAMES {
            // Once a second the cockpit reads the store again: a new snapshot, whose rows are sorted
            // again by the first frame.
            let fresh = frame % 10 == 0;
            if fresh {
                snapshot.order = RowOrder::default();
            }
            app.update(
                if frame % 10 == 9 {
                    UiAction::PageDown
                } else {
                    UiAction::Down
                },
                &snapshot,
                now,
            );
            let (began, cpu_before) = (Instant::now(), thread_cpu_ns());
            // As the cockpit does after each key: read the newly focused workflow, then draw.
            if let Some(id) = app.focused(&snapshot, now).map(|row| row.workflow_id) {
                snapshot
                    .ensure_detail(&store.db(), &policy, id)
                    .expect("detail");
            }
            terminal
                .draw(|f| panes::draw(f, &app, &snapshot, &theme, now))
                .expect("draw");
            frames.push(began.elapsed());
            on_cpu += thread_cpu_ns().saturating_sub(cpu_before);
            if fresh {
                after_read.push(began.elapsed());
            }
        }
        let on_cpu = Duration::from_nanos(on_cpu / FRAMES as u64);
        cases.push((label, frames, after_read, on_cpu));
    }
    for (label, mut frames, after_read, on_cpu) in cases {
        frames.sort();
        let mean = frames.iter().sum::<Duration>() / frames.len() as u32;
        let first = after_read.iter().sum::<Duration>() / after_read.len().max(1) as u32;
        println!(
            "overview frame, {label}: mean {:.2} ms ({:.2} ms of CPU), p95 {:.2} ms, max {:.2} ms; the first after a store read (it sorts) {:.2} ms",
            mean.as_secs_f64() * 1000.0,
            on_cpu.as_secs_f64() * 1000.0,
            frames[frames.len() * 95 / 100].as_secs_f64() * 1000.0,
            frames[frames.len() - 1].as_secs_f64() * 1000.0,
            first.as_secs_f64() * 1000.0
        );
    }
    if let Some(peak) = peak_memory_mb() {
        println!("peak memory of the cockpit's work (VmHWM): {peak:.0} MB");
    }
    // The snapshot read again below takes its place.
    drop(snapshot);
    // The cockpit's read once a second: skipped while the store is unchanged, whole after a change.
    let mut reread = Snapshot::load(&store.db(), &policy, None).expect("snapshot");
    reread.reload(&store, &policy, None).expect("first reload");
    let began = Instant::now();
    let read = reread.reload(&store, &policy, None).expect("reload");
    println!(
        "read again, store unchanged: {:.3} ms (read: {read})",
        began.elapsed().as_secs_f64() * 1000.0
    );
    store
        .write(|db| {
            let mut attempt = db.attempts(1)?.pop().expect("an attempt");
            attempt.last_iteration = Some(1001);
            db.save_attempt(&attempt)
        })
        .expect("a change");
    let (began, cpu) = (Instant::now(), cpu_seconds());
    let read = reread.reload(&store, &policy, None).expect("reload");
    println!(
        "read again after one attempt changed: {:.0} ms, {:.0} ms of CPU (read: {read})",
        began.elapsed().as_secs_f64() * 1000.0,
        (cpu_seconds() - cpu) * 1000.0
    );
    drop(reread);
    let (began, cpu) = (Instant::now(), cpu_seconds());
    let report = runguard::status::report(&store.db(), "bench", &policy, None).expect("status");
    let json = serde_json::to_string(&report).expect("json");
    println!(
        "status --json over the whole store: {:.2} s, {:.2} s of CPU ({:.0} MB of JSON)",
        began.elapsed().as_secs_f64(),
        cpu_seconds() - cpu,
        json.len() as f64 / 1e6
    );
    if let Some(peak) = peak_memory_mb() {
        println!("peak memory with status --json too (VmHWM): {peak:.0} MB");
    }
}
