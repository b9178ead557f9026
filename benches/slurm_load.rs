//! runguard's load on the Slurm controller and on its own machine: 100 watched jobs on the local Slurm
//! (tests/slurm/cluster.sh), each writing a line a second to its own log, and `runguard run --auto`
//! following them. The controller's RPCs are counted by `sdiag` over one minute (by message type; the
//! count of `sdiag` itself left out), runguard's CPU from /proc over the same minute.
//!
//! `cargo bench --bench slurm_load` (Slurm 22.05, the host's packages);
//! `RUNGUARD_SLURM_RELEASE=24.11 cargo bench --bench slurm_load` (the Debian trixie root of
//! tests/slurm/trixie-root.sh). `RUNGUARD_LOAD_JOBS` changes the number of jobs (default 100; the
//! nodes get CPUs enough to run them all at once), `RUNGUARD_LOAD_INTERVAL` the seconds between two
//! lines of a job (default 1, fractions accepted): `RUNGUARD_LOAD_JOBS=1000 cargo bench --bench
//! slurm_load`; `RUNGUARD_LOAD_WINDOW` the seconds measured (default 60). runguard's peak memory is
//! reported too.

#[path = "lab.rs"]
mod lab;

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use lab::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_runguard");

/// A job that writes a line every INTERVAL seconds, 3,600 of them, enrolled by its comment.
const JOB: &str = r#"#!/bin/bash
#SBATCH --comment='{"APS": {"auto_resume_mode": "requeue"}}'
#SBATCH -N 1 -n 1
#SBATCH -o LOGDIR/%x_%j.log
for i in $(seq 1 3600); do echo "iteration $i/3600 | elapsed time per iteration (ms): 1000.0"; sleep INTERVAL; done
"#;

trait Rpcs {
    fn rpcs(&self) -> BTreeMap<String, u64>;
}

impl Rpcs for Cluster {
    /// RPCs by message type since the last reset, `sdiag`'s own left out.
    fn rpcs(&self) -> BTreeMap<String, u64> {
        let Ok(output) = self.command("sdiag").output() else {
            return BTreeMap::new();
        };
        let text = String::from_utf8_lossy(&output.stdout);
        let mut counts = BTreeMap::new();
        let mut in_types = false;
        for line in text.lines() {
            if line.contains("by message type") {
                in_types = true;
                continue;
            }
            if line.contains("by user") {
                break;
            }
            if !in_types {
                continue;
            }
            let mut words = line.split_whitespace();
            let (Some(name), Some(count)) = (
                words.next(),
                line.split("count:")
                    .nth(1)
                    .and_then(|rest| rest.split_whitespace().next()),
            ) else {
                continue;
            };
            // sdiag's own, and what slurmd and the jobs' steps send (a job ending, an epilog done).
            if name == "REQUEST_STATS_INFO" || !from_a_client(name) {
                continue;
            }
            if let Ok(count) = count.parse() {
                counts.insert(name.to_string(), count);
            }
        }
        counts
    }
}

/// Whether a message type is a client's request (runguard's commands), not the daemons' traffic.
fn from_a_client(name: &str) -> bool {
    name.starts_with("REQUEST_")
        && !name.starts_with("REQUEST_COMPLETE_")
        && !name.starts_with("REQUEST_STEP_COMPLETE")
        && !name.starts_with("REQUEST_JOB_STEP_CREATE")
        && name != "REQUEST_NODE_REGISTRATION_STATUS"
}

/// CPU seconds (user + system) a process has used, from /proc/PID/stat.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    Some(ticks / 100.0)
}

/// The peak resident memory of a process, in MB.
fn peak_memory_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn running_jobs(cluster: &Cluster) -> usize {
    cluster
        .command("squeue")
        .args(["--noheader", "--states=RUNNING", "--format=%i"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).lines().count())
        .unwrap_or(0)
}

fn main() {
    let release = lab::release();
    let jobs = lab::count_from_env("RUNGUARD_LOAD_JOBS", 100);
    // A longer window evens out what other work on the machine does to a fraction of a percent.
    let window_length = Duration::from_secs(lab::count_from_env("RUNGUARD_LOAD_WINDOW", 60) as u64);
    let interval = std::env::var("RUNGUARD_LOAD_INTERVAL")
        .ok()
        .and_then(|text| text.parse::<f64>().ok())
        .filter(|seconds| *seconds >= 0.01)
        .unwrap_or(1.0);
    // One CPU a job, on four nodes: 32 each at least (the 100 jobs of the default run).
    let cpus = jobs.div_ceil(4).max(32).to_string();
    if !lab::installed(&release, &["slurmctld", "sdiag"]) {
        println!(
            "slurm_load: skipped, Slurm is not installed (apt-get install slurmctld slurmd slurm-client)"
        );
        return;
    }
    let Ok(work) = tempfile::tempdir() else {
        eprintln!("slurm_load: no temporary directory");
        return;
    };
    let cluster = match Cluster::start(
        &work.path().join("slurm"),
        &release,
        work.path(),
        &[("RUNGUARD_SLURM_CPUS", cpus.as_str())],
    ) {
        Ok(cluster) => cluster,
        Err(err) => {
            eprintln!("slurm_load: the local Slurm {release} did not start: {err}");
            return;
        }
    };
    let logs = work.path().join("logs");
    let _ = std::fs::create_dir_all(&logs);
    let script = work.path().join("tick.sbatch");
    let _ = std::fs::write(
        &script,
        JOB.replace("LOGDIR", &logs.display().to_string())
            .replace("INTERVAL", &interval.to_string()),
    );
    for _ in 0..jobs {
        let _ = cluster
            .command("sbatch")
            .args(["--parsable", "-J", "tick"])
            .arg(&script)
            .stdout(Stdio::null())
            .status();
    }
    let started = Instant::now();
    let patience = Duration::from_secs(120 + jobs as u64 / 4);
    while running_jobs(&cluster) < jobs && started.elapsed() < patience {
        std::thread::sleep(Duration::from_secs(1));
    }
    let running = running_jobs(&cluster);
    let config = work.path().join("config.toml");
    let _ = std::fs::write(&config, "[backend]\nkind = \"slurm\"\n");
    let mut engine: Child = match cluster
        .command(BIN)
        .arg("--config")
        .arg(&config)
        .arg("--db")
        .arg(work.path().join("runguard.sqlite"))
        .args(["run", "--auto"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(err) => {
            eprintln!("slurm_load: runguard did not start: {err}");
            return;
        }
    };
    // Enrolment and the first reads of every log are done before the window opens.
    std::thread::sleep(Duration::from_secs(15 + jobs as u64 / 50));
    let _ = cluster.command("sdiag").arg("--reset").status();
    let cpu_before = cpu_seconds(engine.id()).unwrap_or(0.0);
    let window = Instant::now();
    std::thread::sleep(window_length);
    let cpu = cpu_seconds(engine.id()).unwrap_or(0.0) - cpu_before;
    let elapsed = window.elapsed().as_secs_f64();
    let rpcs = cluster.rpcs();
    let peak = peak_memory_mb(engine.id());
    let _ = engine.kill();
    let _ = engine.wait();
    let per_minute = |count: u64| count as f64 * 60.0 / elapsed;
    let total: u64 = rpcs.values().sum();
    println!(
        "runguard on Slurm {release}: {running} watched jobs running, each writing a line every {interval} s; {elapsed:.0} s window"
    );
    println!(
        "controller RPCs a minute from clients (runguard's commands): {:.1}  ({})",
        per_minute(total),
        rpcs.iter()
            .map(|(name, count)| format!("{name} {:.1}", per_minute(*count)))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!("runguard CPU: {:.2} % of a core", cpu / elapsed * 100.0);
    println!("runguard peak memory (VmHWM): {peak:.0} MB");
    // What runguard counted as wrong meanwhile (a slow controller is asked less often, and says so).
    if let Ok(store) = runguard_engine::store::Store::open(&work.path().join("runguard.sqlite"))
        && let Ok(warnings) = store.db().warnings()
    {
        for (kind, count, last) in warnings {
            println!("runguard warning {kind}: {count} (last: {last})");
        }
    }
}
