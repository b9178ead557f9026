//! Recovery latency on the local Slurm (tests/slurm/cluster.sh): from the moment a job's batch script
//! exits with a failure (it writes the time just before it exits), to runguard's requeue decision (the
//! time in its journal), and to the new attempt running (the benchmark polls `squeue` every 100 ms).
//! Slurm makes an exit visible within milliseconds, so the first figure is the time from the failure
//! becoming visible to the decision, plus that.
//!
//! `cargo bench --bench slurm_recovery` (22.05, Debian's slurm-wlm; prints a notice and exits without
//! it); `RUNGUARD_SLURM_RELEASE=24.11 cargo bench --bench slurm_recovery` on the Debian trixie root.
//! Each round is a fresh `runguard run --auto` on a fresh store.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_runguard");
const CLUSTER_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slurm/cluster.sh");
const ROUNDS: usize = 5;

/// Fails with an NCCL timeout two seconds in on its first run, trains briefly on a restart.
const JOB: &str = r#"#!/bin/bash
#SBATCH --comment='{"APS": {"auto_resume_mode": "requeue", "max_requeue_times": 3}}'
#SBATCH -N 2
#SBATCH -o LOGDIR/%x_%j.log
if [ "${SLURM_RESTART_COUNT:-0}" = "0" ]; then
  srun -l bash -c 'sleep 2; if [ "$SLURM_PROCID" = 1 ]; then echo "$SLURMD_NODENAME:4242:4243 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<1234> with status=12 opcode=0 len=0 vendor err 129 (Recv)"; fi; echo "[Rank $SLURM_PROCID] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600050 milliseconds before timing out."; exit 1'
  date +%s.%N > LOGDIR/failed_at
  exit 1
fi
srun -l bash -c 'sleep 3'
"#;

struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .args([CLUSTER_SH, "stop"])
            .arg(&self.dir)
            .status();
    }
}

/// One recovery, timed.
struct Round {
    /// Job failed → requeue decided.
    decision: f64,
    /// Job failed → new attempt running.
    running: f64,
    /// Job failed → runguard's hold released (runguard's part ends here), from slurmctld's log.
    released: Option<f64>,
    /// Hold released → job allocated by Slurm's scheduler, from slurmctld's log.
    scheduled: Option<f64>,
}

/// When slurmctld's log says it released `job_id`'s hold and then allocated the job: Slurm's share
/// of the recovery (its main scheduler runs at most once every `batch_sched_delay`, 3 s by default,
/// after the last run).
fn release_and_allocation(log: &Path, job_id: &str) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
    let text = std::fs::read_to_string(log).ok()?;
    let time = |line: &str| {
        let stamp = line.strip_prefix('[')?.split(']').next()?;
        chrono::NaiveDateTime::parse_from_str(stamp, "%Y-%m-%dT%H:%M:%S%.3f")
            .ok()?
            .and_local_timezone(chrono::Local)
            .single()
            .map(|time| time.with_timezone(&Utc))
    };
    let job = format!("JobId={job_id} ");
    let released = text
        .lines()
        .rfind(|line| line.contains("release hold on") && line.contains(&job))
        .and_then(time)?;
    let allocated = text
        .lines()
        .filter(|line| {
            (line.contains("sched: Allocate") || line.contains("_start_job: Started"))
                && line.contains(&job)
        })
        .filter_map(time)
        .find(|at| *at >= released)?;
    Some((released, allocated))
}

fn slurm(conf: &Path, program: &str) -> Command {
    let mut command = Command::new(program);
    command.env("SLURM_CONF", conf);
    // A release in its own root (24.11) has its client commands in the cluster's bin directory.
    if let Some(dir) = conf.parent() {
        let bin = dir.join("bin");
        if bin.is_dir() {
            let mut path = bin.into_os_string();
            path.push(":");
            path.push(std::env::var_os("PATH").unwrap_or_default());
            command.env("PATH", path);
        }
    }
    command
}

/// The job's state and restart count as `squeue --json` shows them now.
fn job_state(conf: &Path, job_id: &str) -> Option<(String, i64)> {
    let output = slurm(conf, "squeue")
        .args(["--all", "--json"])
        .output()
        .ok()?;
    let listing: Value = serde_json::from_slice(&output.stdout).ok()?;
    let job = listing["jobs"]
        .as_array()?
        .iter()
        .find(|job| job["job_id"].as_i64().map(|id| id.to_string()).as_deref() == Some(job_id))?;
    // A word up to 23.11, a list of flags (`["RUNNING"]`) from data_parser v0.0.40 on.
    let state = match &job["job_state"] {
        Value::String(word) => word.clone(),
        Value::Array(words) => words.first()?.as_str()?.to_string(),
        _ => return None,
    };
    let restarts = match &job["restart_cnt"] {
        Value::Object(wrapped) => wrapped.get("number").and_then(Value::as_i64),
        plain => plain.as_i64(),
    };
    Some((state, restarts.unwrap_or(0)))
}

fn round(cluster: &Cluster, work: &Path, poll_secs: f64, index: usize) -> Result<Round, String> {
    let dir = work.join(format!("round-{poll_secs}-{index}"));
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::write(
        dir.join("config.toml"),
        format!("[engine]\npoll_interval_secs = {poll_secs}\n\n[backend]\nkind = \"slurm\"\n"),
    )
    .map_err(|e| e.to_string())?;
    std::fs::write(
        dir.join("train.sbatch"),
        JOB.replace("LOGDIR", &dir.display().to_string()),
    )
    .map_err(|e| e.to_string())?;
    let runguard = |args: &[&str]| {
        let mut command = slurm(&cluster.conf, BIN);
        command
            .arg("--config")
            .arg(dir.join("config.toml"))
            .arg("--db")
            .arg(dir.join("runguard.sqlite"))
            .args(args);
        command
    };
    let mut engine: Child = runguard(&["run", "--auto"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| e.to_string())?;
    let submitted = slurm(&cluster.conf, "sbatch")
        .args(["--parsable", "-J", "bench"])
        .arg(dir.join("train.sbatch"))
        .output()
        .map_err(|e| e.to_string())?;
    let job_id = String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .to_string();
    let start = Instant::now();
    let mut running = None::<DateTime<Utc>>;
    while start.elapsed() < Duration::from_secs(90) && running.is_none() {
        if let Some((state, restarts)) = job_state(&cluster.conf, &job_id)
            && restarts >= 1
            && state == "RUNNING"
        {
            running = Some(Utc::now());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = engine.kill();
    let _ = engine.wait();
    let output = runguard(&["status", "--json"])
        .output()
        .map_err(|e| e.to_string())?;
    let status: Value = serde_json::from_slice(&output.stdout).map_err(|e| e.to_string())?;
    // The engine also enrols the earlier rounds' jobs, which Slurm still lists.
    let workflow = status["workflows"]
        .as_array()
        .and_then(|workflows| {
            workflows
                .iter()
                .find(|w| w["attempts"][0]["job_id"].as_str() == Some(job_id.as_str()))
        })
        .ok_or_else(|| format!("job {job_id} was not enrolled"))?;
    let decided = workflow["journal"]
        .as_array()
        .ok_or("no journal")?
        .iter()
        .find(|entry| {
            entry["decision"]
                .as_str()
                .is_some_and(|d| d.starts_with("action ") && d.contains(" requeue: "))
        })
        .and_then(|entry| entry["time"].as_str())
        .and_then(|time| DateTime::parse_from_rfc3339(time).ok())
        .ok_or_else(|| format!("no requeue in the journal: {workflow:#}"))?
        .with_timezone(&Utc);
    let failed: f64 = std::fs::read_to_string(dir.join("failed_at"))
        .map_err(|e| format!("the job did not record its failure: {e}"))?
        .trim()
        .parse()
        .map_err(|e| format!("failed_at: {e}"))?;
    let failed = DateTime::from_timestamp_micros((failed * 1e6) as i64).ok_or("failed_at")?;
    let running = running.ok_or("the new attempt never ran")?;
    let seconds =
        |from: DateTime<Utc>, to: DateTime<Utc>| (to - from).num_milliseconds() as f64 / 1000.0;
    let slurm = release_and_allocation(&cluster.dir.join("log/slurmctld.log"), &job_id);
    Ok(Round {
        decision: seconds(failed, decided),
        running: seconds(failed, running),
        released: slurm.map(|(released, _)| seconds(failed, released)),
        scheduled: slurm.map(|(released, allocated)| seconds(released, allocated)),
    })
}

fn summary(values: &[f64]) -> String {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    format!(
        "median {median:5.2} s   min {:5.2} s   max {:5.2} s",
        sorted[0],
        sorted[sorted.len() - 1]
    )
}

fn main() {
    let installed = Command::new("sh")
        .args(["-c", "command -v slurmctld && command -v slurmd"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !installed {
        println!(
            "slurm_recovery: skipped, Slurm is not installed (apt-get install slurmctld slurmd slurm-client)"
        );
        return;
    }
    let Ok(work) = tempfile::tempdir() else {
        eprintln!("slurm_recovery: no temporary directory");
        return;
    };
    let dir = work.path().join("slurm");
    let release = std::env::var("RUNGUARD_SLURM_RELEASE").unwrap_or_else(|_| "22.05".to_string());
    let started = Command::new("bash")
        .args([CLUSTER_SH, "start"])
        .arg(&dir)
        .arg(&release)
        .env("RUNGUARD_SLURM_BINDS", work.path())
        .output();
    if !started.is_ok_and(|o| o.status.success()) {
        eprintln!("slurm_recovery: the local Slurm did not start");
        return;
    }
    let cluster = Cluster {
        conf: dir.join("slurm.conf"),
        dir,
    };
    println!("recovery latency on the local Slurm {release}, {ROUNDS} rounds per poll interval");
    println!(
        "(t0 = the batch script exits with the failure; 4 nodes, a 2-node job failing on its first run)"
    );
    for poll in [5.0, 1.0] {
        let rounds: Vec<Round> = (0..ROUNDS)
            .filter_map(|index| {
                round(&cluster, work.path(), poll, index)
                    .map_err(|err| eprintln!("poll {poll} s round {index}: {err}"))
                    .ok()
            })
            .collect();
        if rounds.is_empty() {
            println!("poll {poll} s: no round completed");
            continue;
        }
        let decisions: Vec<f64> = rounds.iter().map(|r| r.decision).collect();
        let running: Vec<f64> = rounds.iter().map(|r| r.running).collect();
        println!(
            "poll {poll:>3} s  t0 → requeue decided:   {}   ({} rounds)",
            summary(&decisions),
            rounds.len()
        );
        println!(
            "poll {poll:>3} s  t0 → new attempt running: {}",
            summary(&running)
        );
        let released: Vec<f64> = rounds.iter().filter_map(|r| r.released).collect();
        let scheduled: Vec<f64> = rounds.iter().filter_map(|r| r.scheduled).collect();
        if !released.is_empty() && !scheduled.is_empty() {
            println!(
                "poll {poll:>3} s  t0 → hold released (runguard's part): {}",
                summary(&released)
            );
            println!(
                "poll {poll:>3} s  released → allocated (Slurm's scheduler): {}",
                summary(&scheduled)
            );
        }
    }
}
