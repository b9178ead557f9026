//! `runguard capacity` over a seeded simulated month: every figure of the report is computed again
//! here from the generated records (jobs, listings, quarantines) and compared with what the command
//! printed; a shorter `--since` window; the Markdown and text renderings.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, TimeDelta, Timelike, Utc};
use serde_json::Value;

use runguard_engine::capacity::NodeUse;
use runguard_engine::capacity::simulated::{self, SimulatedMonth};
use runguard_engine::store::Store;

use crate::support::{CliSandbox, stderr, stdout};

const SEED: u64 = 2026;
const UNTIL: &str = "2026-03-04T00:00:00Z";

fn time(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .unwrap()
        .with_timezone(&Utc)
}

/// A sandbox whose store holds the month February 2 – March 4, 2026.
fn month_sandbox() -> (CliSandbox, SimulatedMonth) {
    let month = simulated::month(SEED, time("2026-02-02T00:00:00Z"), 30);
    assert_eq!(month.end, time(UNTIL));
    let sandbox = CliSandbox::default();
    let mut store = Store::open(&sandbox.db()).unwrap();
    month.store(&mut store).unwrap();
    (sandbox, month)
}

fn capacity_json(sandbox: &CliSandbox, since: &str) -> Value {
    let output = sandbox.run(&["capacity", "--since", since, "--until", UNTIL, "--json"]);
    assert!(output.status.success(), "{}", stderr(&output));
    serde_json::from_slice(&output.stdout).unwrap()
}

fn hours(delta: TimeDelta) -> f64 {
    delta.num_milliseconds() as f64 / 3_600_000.0
}

fn close(actual: &Value, expected: f64, what: &str) {
    let actual = actual
        .as_f64()
        .unwrap_or_else(|| panic!("{what}: {actual}"));
    assert!(
        (actual - expected).abs() <= 1e-6 * expected.abs().max(1.0),
        "{what}: printed {actual}, the history says {expected}"
    );
}

/// The smallest value with at least `q` of the values at or below it.
fn nearest_rank(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted[((q * sorted.len() as f64).ceil() as usize).max(1) - 1]
}

/// The figures of the window `[from, to)` worked out from the generated records.
struct Expected {
    waits: Vec<(String, u32, f64)>,
    /// Minutes the requeued attempts waited.
    requeued_waits: Vec<f64>,
    still_waiting: usize,
    lost_gpu_hours: f64,
    lost_spans: usize,
    saved_hours: f64,
    saved_gpu_hours: f64,
    recoveries: usize,
    idle_while_waiting: f64,
    peak_hours: BTreeSet<u32>,
    /// Per partition: the hours its jobs asked for more GPUs than its nodes had in service.
    partition_peak_hours: BTreeMap<String, BTreeSet<u32>>,
    reserve_nodes: u32,
    checkpoint_cost_minutes: f64,
    failures_per_node_hour: f64,
}

fn expected(month: &SimulatedMonth, from: DateTime<Utc>, to: DateTime<Utc>) -> Expected {
    let inside = |t: DateTime<Utc>| from <= t && t < to;
    let overlap = |a: DateTime<Utc>, b: DateTime<Utc>| hours(b.min(to) - a.max(from)).max(0.0);

    let mut waits = Vec::new();
    let mut requeued_waits = Vec::new();
    let mut still_waiting = 0;
    let mut saved_hours = 0.0;
    let mut saved_gpu_hours = 0.0;
    let mut recoveries = 0;
    let mut loads = Vec::new();
    let mut node_hours = 0.0;
    for job in &month.jobs {
        for (index, attempt) in job.attempts.iter().enumerate() {
            if inside(attempt.submitted) {
                match attempt.started.filter(|s| *s < to) {
                    Some(start) => {
                        let minutes = hours(start - attempt.submitted) * 60.0;
                        waits.push((job.partition.clone(), attempt.submitted.hour(), minutes));
                        if index > 0 {
                            requeued_waits.push(minutes);
                        }
                    }
                    None => still_waiting += 1,
                }
            }
            if let Some(start) = attempt.started {
                node_hours += overlap(start, attempt.ended.unwrap_or(to)) * f64::from(job.nodes);
            }
            let (Some(ended), Some(failure)) = (attempt.ended, &attempt.failure) else {
                continue;
            };
            if !inside(ended) {
                continue;
            }
            recoveries += 1;
            let saved = (2.0 - hours(failure.requeued - ended)).max(0.0);
            saved_hours += saved;
            saved_gpu_hours += saved * f64::from(job.gpus());
            if let Some(next) = job.attempts.get(index + 1)
                && let (Some(start), Some(resumed)) = (next.started, next.resumed)
                && resumed <= to
            {
                loads.push(hours(resumed - start) * 60.0);
            }
        }
    }

    let mut lost_gpu_hours = 0.0;
    let mut lost_spans = 0;
    let mut started_spans = Vec::new();
    for span in &month.quarantines {
        let h = overlap(span.from, span.to.unwrap_or(to));
        if h > 0.0 {
            lost_spans += 1;
            lost_gpu_hours += h * f64::from(span.gpus);
        }
        if inside(span.from) {
            started_spans.push(hours(span.to.unwrap_or(to).min(to) - span.from));
        }
    }
    // Nodes out at once on average, and the 95th percentile of a Poisson count with that mean.
    let mu = started_spans.len() as f64 / hours(to - from) * started_spans.iter().sum::<f64>()
        / started_spans.len().max(1) as f64;
    let mut reserve_nodes = 0u32;
    let mut p = (-mu).exp();
    let mut cumulative = p;
    while cumulative < 0.95 {
        reserve_nodes += 1;
        p *= mu / f64::from(reserve_nodes);
        cumulative += p;
    }

    // Every listing here is 300 s, jobs and nodes at the same times.
    let mut idle_while_waiting = 0.0;
    let mut demand = [0.0; 24];
    let mut capacity = [0.0; 24];
    let mut listings = [0.0; 24];
    let mut partition_demand: BTreeMap<String, [f64; 24]> = BTreeMap::new();
    let mut partition_capacity: BTreeMap<String, [f64; 24]> = BTreeMap::new();
    let mut samples_at: BTreeMap<DateTime<Utc>, Vec<&runguard_engine::capacity::QueueSample>> =
        BTreeMap::new();
    for sample in &month.queue {
        samples_at.entry(sample.time).or_default().push(sample);
    }
    let mut nodes_at: BTreeMap<DateTime<Utc>, Vec<&runguard_engine::capacity::NodeSample>> =
        BTreeMap::new();
    for node in &month.node_samples {
        nodes_at.entry(node.time).or_default().push(node);
    }
    for instant in month.instants.iter().filter(|i| inside(i.time)) {
        let jobs = samples_at.get(&instant.time).cloned().unwrap_or_default();
        let nodes = &nodes_at[&instant.time];
        let hour = instant.time.hour() as usize;
        listings[hour] += 1.0;
        demand[hour] += jobs.iter().map(|j| f64::from(j.gpus)).sum::<f64>();
        for partition in ["train", "debug"] {
            partition_demand
                .entry(partition.to_string())
                .or_insert([0.0; 24])[hour] += jobs
                .iter()
                .filter(|j| j.partition.as_deref() == Some(partition))
                .map(|j| f64::from(j.gpus))
                .sum::<f64>();
            partition_capacity
                .entry(partition.to_string())
                .or_insert([0.0; 24])[hour] += nodes
                .iter()
                .filter(|n| n.partition.as_deref() == Some(partition))
                .filter(|n| !matches!(n.state, NodeUse::Drained | NodeUse::Down))
                .map(|n| f64::from(n.gpus))
                .sum::<f64>();
        }
        capacity[hour] += nodes
            .iter()
            .filter(|n| !matches!(n.state, NodeUse::Drained | NodeUse::Down))
            .map(|n| f64::from(n.gpus))
            .sum::<f64>();
        let waiting: BTreeSet<&str> = jobs
            .iter()
            .filter(|j| j.pending)
            .filter_map(|j| j.partition.as_deref())
            .collect();
        idle_while_waiting += nodes
            .iter()
            .filter(|n| n.state == NodeUse::Idle)
            .filter(|n| n.partition.as_deref().is_some_and(|p| waiting.contains(p)))
            .map(|n| f64::from(n.gpus - n.gpus_allocated))
            .sum::<f64>()
            * instant.seconds
            / 3600.0;
    }
    let peak_hours = (0..24u32)
        .filter(|h| demand[*h as usize] > capacity[*h as usize])
        .collect();
    let _ = listings;
    let partition_peak_hours = partition_demand
        .iter()
        .map(|(partition, demand)| {
            let capacity = &partition_capacity[partition];
            let hours = (0..24u32)
                .filter(|h| demand[*h as usize] > capacity[*h as usize])
                .collect();
            (partition.clone(), hours)
        })
        .collect();

    Expected {
        still_waiting,
        lost_gpu_hours,
        lost_spans,
        saved_hours,
        saved_gpu_hours,
        recoveries,
        idle_while_waiting,
        peak_hours,
        partition_peak_hours,
        reserve_nodes,
        checkpoint_cost_minutes: nearest_rank(&loads, 0.5),
        failures_per_node_hour: recoveries as f64 / node_hours,
        waits,
        requeued_waits,
    }
}

fn check_waits(report: &Value, expected: &Expected) {
    let minutes: Vec<f64> = expected.waits.iter().map(|w| w.2).collect();
    let all = &report["waits"]["all"];
    assert_eq!(all["started"], minutes.len());
    assert_eq!(all["still_waiting"], expected.still_waiting);
    close(
        &all["mean_minutes"],
        minutes.iter().sum::<f64>() / minutes.len() as f64,
        "mean wait",
    );
    close(
        &all["median_minutes"],
        nearest_rank(&minutes, 0.5),
        "median wait",
    );
    close(&all["p90_minutes"], nearest_rank(&minutes, 0.9), "p90 wait");
    let requeued = &report["waits"]["requeued"];
    assert_eq!(requeued["started"], expected.requeued_waits.len());
    if !expected.requeued_waits.is_empty() {
        close(
            &requeued["median_minutes"],
            nearest_rank(&expected.requeued_waits, 0.5),
            "median wait of requeued attempts",
        );
    }
    for partition in ["train", "debug"] {
        let of: Vec<&(String, u32, f64)> =
            expected.waits.iter().filter(|w| w.0 == partition).collect();
        let printed = report["waits"]["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["partition"] == partition)
            .unwrap();
        assert_eq!(printed["started"], of.len(), "{partition}");
        for hour in 0..24u32 {
            let at: Vec<f64> = of.iter().filter(|w| w.1 == hour).map(|w| w.2).collect();
            let cell = &printed["by_hour"][hour as usize];
            if at.is_empty() {
                assert!(cell.is_null(), "{partition} {hour}: {cell}");
            } else {
                close(
                    cell,
                    at.iter().sum::<f64>() / at.len() as f64,
                    &format!("{partition} wait at {hour:02}:00"),
                );
            }
        }
    }
}

/// The hours of the peak windows of a report's (or a partition's) peaks.
fn peak_hours(peaks: &Value) -> BTreeSet<u32> {
    peaks["windows"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|w| {
            let start = w["hours"]["start"].as_u64().unwrap() as u32;
            let end = w["hours"]["end"].as_u64().unwrap() as u32;
            let len = (end + 24 - start) % 24;
            (0..len).map(move |i| (start + i) % 24)
        })
        .collect()
}

fn check(report: &Value, expected: &Expected) {
    check_waits(report, expected);
    assert_eq!(report["lost"]["spans"], expected.lost_spans);
    close(
        &report["lost"]["gpu_hours"],
        expected.lost_gpu_hours,
        "lost GPU-hours",
    );
    assert_eq!(report["saved"]["recoveries"], expected.recoveries);
    close(
        &report["saved"]["saved_hours"],
        expected.saved_hours,
        "saved hours",
    );
    close(
        &report["saved"]["saved_gpu_hours"],
        expected.saved_gpu_hours,
        "saved GPU-hours",
    );
    close(
        &report["idle"]["idle_while_waiting_gpu_hours"],
        expected.idle_while_waiting,
        "GPUs idle while jobs wait",
    );
    assert_eq!(peak_hours(&report["peaks"]), expected.peak_hours);
    for partition in report["peaks"]["partitions"].as_array().unwrap() {
        let name = partition["partition"].as_str().unwrap();
        assert_eq!(
            peak_hours(partition),
            expected.partition_peak_hours[name],
            "{name}"
        );
    }
    let recommendations = &report["recommendations"];
    assert_eq!(
        recommendations["reserve_pool"]["nodes"],
        expected.reserve_nodes
    );
    close(
        &recommendations["checkpoints"]["cost_minutes"],
        expected.checkpoint_cost_minutes,
        "checkpoint cost",
    );
    close(
        &recommendations["checkpoints"]["failures_per_node_hour"],
        expected.failures_per_node_hour,
        "failure rate",
    );
    for size in recommendations["checkpoints"]["by_size"]
        .as_array()
        .unwrap()
    {
        let nodes = size["nodes"].as_f64().unwrap();
        let mtbf = 1.0 / (expected.failures_per_node_hour * nodes);
        close(&size["mtbf_hours"], mtbf, "MTBF");
        close(
            &size["interval_minutes"],
            (2.0 * expected.checkpoint_cost_minutes * mtbf * 60.0).sqrt(),
            "Young–Daly interval",
        );
    }
}

#[test]
fn capacity_over_a_simulated_month_matches_the_history_it_came_from() {
    let (sandbox, month) = month_sandbox();
    let report = capacity_json(&sandbox, "30d");
    let expected = expected(&month, month.start, month.end);
    // The month is busy enough for every part of the report to say something.
    assert!(
        expected.recoveries >= 5,
        "{} recoveries",
        expected.recoveries
    );
    assert!(expected.lost_spans >= 5);
    assert!(!expected.requeued_waits.is_empty());
    assert!(expected.idle_while_waiting > 0.0);
    assert!(!expected.peak_hours.is_empty());
    // The train partition peaks longer than the cluster as a whole: debug nodes sit idle meanwhile.
    assert!(expected.partition_peak_hours["train"].len() > expected.peak_hours.len());
    check(&report, &expected);
    assert_eq!(report["window"]["from"], "2026-02-02T00:00:00Z");
}

#[test]
fn capacity_since_a_week_counts_only_that_week() {
    let (sandbox, month) = month_sandbox();
    let report = capacity_json(&sandbox, "7d");
    let to = time(UNTIL);
    let expected = expected(&month, to - TimeDelta::days(7), to);
    check(&report, &expected);
    let whole = capacity_json(&sandbox, "30d");
    assert!(report["waits"]["all"]["started"].as_u64() < whole["waits"]["all"]["started"].as_u64());
}

#[test]
fn capacity_in_markdown_and_text_carries_the_same_figures() {
    let (sandbox, month) = month_sandbox();
    let expected = expected(&month, month.start, month.end);
    let markdown = sandbox.run(&["capacity", "--until", UNTIL, "--markdown"]);
    assert!(markdown.status.success(), "{}", stderr(&markdown));
    let markdown = stdout(&markdown);
    assert!(markdown.starts_with("# Capacity 2026-02-02 00:00 UTC – 2026-03-04 00:00 UTC"));
    assert!(markdown.contains("| partition | started | still waiting | mean | median | p90 |"));
    // A row a partition and one an hour of the day.
    assert!(markdown.matches("\n| ").count() >= 3 + 24, "{markdown}");
    let reserve = match expected.reserve_nodes {
        0 => "no spare node is needed".to_string(),
        1 => "keep 1 node spare".to_string(),
        n => format!("keep {n} nodes spare"),
    };
    assert!(markdown.contains(&reserve), "{markdown}");
    let saved = format!(
        "{:.1} h of downtime saved, {:.0} GPU-hours",
        expected.saved_hours, expected.saved_gpu_hours
    );
    assert!(markdown.contains(&saved), "{markdown}");
    let text = sandbox.run(&["capacity", "--until", UNTIL]);
    assert!(text.status.success(), "{}", stderr(&text));
    let text = stdout(&text);
    assert!(text.contains(&saved), "{text}");
    assert!(text.contains(&format!(
        "{:.0} GPU-hours free",
        expected.idle_while_waiting
    )));
    assert!(text.contains("Young–Daly"), "{text}");
}

#[test]
fn the_simulated_flag_reports_the_same_month_without_a_store() {
    let (sandbox, _month) = month_sandbox();
    let stored = capacity_json(&sandbox, "30d");
    let bare = CliSandbox::default();
    let output = bare.run(&[
        "capacity",
        "--simulated",
        &SEED.to_string(),
        "--until",
        UNTIL,
        "--json",
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let simulated: Value = serde_json::from_slice(&output.stdout).unwrap();
    for part in [
        "window",
        "waits",
        "peaks",
        "idle",
        "lost",
        "saved",
        "recommendations",
    ] {
        assert_eq!(simulated[part], stored[part], "{part}");
    }
    assert!(!bare.db().exists());
}

#[test]
fn capacity_refuses_a_window_it_cannot_read() {
    let sandbox = CliSandbox::default();
    let missing = sandbox.run(&["capacity"]);
    assert!(!missing.status.success());
    assert!(
        stderr(&missing).contains("no store at"),
        "{}",
        stderr(&missing)
    );
    Store::open(&sandbox.db()).unwrap();
    let bad = sandbox.run(&["capacity", "--since", "30"]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("has no unit"), "{}", stderr(&bad));
    // An empty store: a report with nothing in it, not an error.
    let empty = sandbox.run(&["capacity", "--json"]);
    assert!(empty.status.success(), "{}", stderr(&empty));
    let report: Value = serde_json::from_slice(&empty.stdout).unwrap();
    assert_eq!(report["waits"]["all"]["started"], 0);
    assert!(report["recommendations"]["reserve_pool"].is_null());
}

/// A real Slurm whose four nodes have 2 GPUs each: a job holds three nodes, a second one asks for two
/// and waits with n4's GPUs free. The engine's first record of the listing (which stands for five
/// minutes) shows exactly that.
#[cfg(feature = "slurm")]
#[test]
fn capacity_on_a_real_slurm_counts_the_gpus_left_idle_while_a_job_waits() {
    use crate::support::slurm::{Cluster, HeadlessEngine, available, one_at_a_time};

    let _one_at_a_time = one_at_a_time();
    if !available(&[]) {
        return;
    }
    let sandbox = CliSandbox::default();
    let cluster = Cluster::start_configured(
        &sandbox.path().join("slurm"),
        30,
        &[("RUNGUARD_SLURM_GPUS", std::path::Path::new("2"))],
    );
    sandbox.write_config(
        "[engine]\npoll_interval_secs = 0.5\n\n[backend]\nkind = \"slurm\"\n\n[slurm]\npartitions = [\"gpu\"]\n",
    );
    let submit = |nodes: &str| {
        let output = cluster
            .command("sbatch")
            .current_dir(sandbox.path())
            .args(["--parsable", "-N", nodes, "--gres=gpu:2", "-o", "/dev/null"])
            .args(["--wrap", "sleep 600"])
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", stderr(&output));
        stdout(&output).trim().to_string()
    };
    let running = submit("3");
    let waiting = submit("2");
    let states = || {
        let output = cluster
            .command("squeue")
            .args(["--noheader", "--format=%i %T %r"])
            .output()
            .unwrap();
        stdout(&output)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !(states().contains(&format!("{running} RUNNING"))
        && states().contains(&format!("{waiting} PENDING Resources")))
    {
        assert!(std::time::Instant::now() < deadline, "{}", states());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let mut engine = HeadlessEngine::start(&sandbox, &cluster, &[]);
    let recorded = |report: &Value| {
        report["idle"]["gpu_hours_by_state"]
            .as_array()
            .is_some_and(|states| states.iter().any(|s| s["gpu_hours"].as_f64() > Some(0.0)))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let report = loop {
        let output = sandbox.run(&["capacity", "--since", "1h", "--json"]);
        if output.status.success() {
            let report: Value = serde_json::from_slice(&output.stdout).unwrap();
            if recorded(&report) {
                break report;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no listing recorded: {}",
            std::fs::read_to_string(sandbox.path().join("engine.err")).unwrap_or_default()
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    };
    engine.stop();
    // The first record stands for 300 s: 6 GPUs allocated, n4's 2 idle while the second job waited.
    let hours = 300.0 / 3600.0;
    let by_state = |state: &str| {
        report["idle"]["gpu_hours_by_state"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["state"] == state)
            .unwrap()["gpu_hours"]
            .clone()
    };
    close(&by_state("allocated"), 6.0 * hours, "allocated GPU-hours");
    close(&by_state("idle"), 2.0 * hours, "idle GPU-hours");
    close(
        &report["idle"]["idle_while_waiting_gpu_hours"],
        2.0 * hours,
        "GPUs idle while the job waited",
    );
    assert_eq!(report["waits"]["reasons"][0]["reason"], "Resources");
    close(
        &report["waits"]["reasons"][0]["job_hours"],
        hours,
        "pending job-hours",
    );
    let demand: f64 = report["peaks"]["demand_by_hour"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_f64().unwrap())
        .sum();
    close(&Value::from(demand), 6.0 + 4.0, "GPUs asked for");
    assert_eq!(report["waits"]["all"]["still_waiting"], 1, "{report:#}");
}
