//! A node that dies under a running job, on the local Slurm (tests/slurm/cluster.sh): a 2-node job
//! (`srun -l`, two ranks a node, each writing a line a second) runs on two of the four nodes; the
//! second one's slurmd and the job's processes on it are stopped (SIGSTOP), as on a node that hangs.
//! Timed from the freeze to the run going on off that node (the job, or the job runguard submitted in
//! its place, RUNNING on other nodes), with `runguard run --auto` and without runguard (Slurm alone:
//! `SlurmdTimeout=30` here, then NODE_FAIL, then its own requeue and `BeginTime`).
//!
//! `cargo bench --bench slurm_node_death`; `RUNGUARD_SLURM_RELEASE=24.11 cargo bench --bench
//! slurm_node_death` on the Debian trixie root. `RUNGUARD_DEATH_ROUNDS` rounds (default 3).

#[path = "lab.rs"]
mod lab;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use lab::Cluster;

const BIN: &str = env!("CARGO_BIN_EXE_runguard");
/// Longest a round waits for the run to go on.
const GIVE_UP: Duration = Duration::from_secs(240);

const JOB: &str = r#"#!/bin/bash
#SBATCH --comment='{"APS": {"auto_resume_mode": "requeue", "max_requeue_times": 3}}'
#SBATCH -N 2 --ntasks-per-node=2
#SBATCH -o LOGDIR/%x_%j.log
srun -l bash -c 'for i in $(seq 1 3600); do echo "step $i loss 1.0"; sleep 1; done'
"#;

trait Jobs {
    fn jobs(&self) -> Vec<(String, String, String)>;
}

impl Jobs for Cluster {
    /// (job id, state, nodes) of every job the controller lists.
    fn jobs(&self) -> Vec<(String, String, String)> {
        let Ok(output) = self
            .command("squeue")
            .args(["--noheader", "--states=all", "--format=%i|%T|%N"])
            .output()
        else {
            return Vec::new();
        };
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| {
                let mut fields = line.split('|');
                Some((
                    fields.next()?.trim().to_string(),
                    fields.next()?.trim().to_string(),
                    fields.next()?.trim().to_string(),
                ))
            })
            .collect()
    }
}

/// The processes of this cluster's jobs on `node`: they carry its SLURM_CONF and the node's name.
fn job_processes(conf: &str, node: &str) -> Vec<u32> {
    let wanted = [
        format!("SLURMD_NODENAME={node}"),
        format!("SLURM_CONF={conf}"),
    ];
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                let vars: Vec<&[u8]> = environ.split(|b| *b == 0).collect();
                wanted.iter().all(|want| vars.contains(&want.as_bytes()))
            })
        })
        .collect()
}

fn signal(pids: &[u32], name: &str) {
    for pid in pids {
        let _ = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(pid.to_string())
            .status();
    }
}

/// Seconds from the freeze of the job's second node to the run going on without it; `None` when it did not within
/// [`GIVE_UP`].
fn round(release: &str, with_runguard: bool, index: usize) -> Result<Option<f64>, String> {
    let work = tempfile::tempdir().map_err(|e| e.to_string())?;
    let cluster = Cluster::start(&work.path().join("slurm"), release, work.path(), &[])?;
    let logs = work.path().join("logs");
    std::fs::create_dir_all(&logs).map_err(|e| e.to_string())?;
    let script = work.path().join("ranks.sbatch");
    std::fs::write(&script, JOB.replace("LOGDIR", &logs.display().to_string()))
        .map_err(|e| e.to_string())?;
    let submitted = cluster
        .command("sbatch")
        .args(["--parsable", "-J", "ranks"])
        .arg(&script)
        .output()
        .map_err(|e| e.to_string())?;
    let job_id = String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .to_string();
    let mut engine: Option<Child> = None;
    if with_runguard {
        let config = work.path().join("config.toml");
        std::fs::write(&config, "[backend]\nkind = \"slurm\"\n").map_err(|e| e.to_string())?;
        engine = Some(
            cluster
                .command(BIN)
                .arg("--config")
                .arg(&config)
                .arg("--db")
                .arg(work.path().join("runguard.sqlite"))
                .args(["run", "--auto"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| e.to_string())?,
        );
    }
    // The job runs and has written for a while (the ranks' usual cadence is learned).
    let started = Instant::now();
    while !cluster
        .jobs()
        .iter()
        .any(|(id, state, _)| *id == job_id && state == "RUNNING")
    {
        if started.elapsed() > Duration::from_secs(60) {
            return Err(format!("job {job_id} did not start"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // The node to freeze: the job's second (no node is required of the job, so that Slurm alone may
    // run it elsewhere too).
    let victim = cluster
        .jobs()
        .into_iter()
        .find(|(id, _, _)| *id == job_id)
        .and_then(|(_, _, nodes)| cluster.hosts(&nodes).get(1).cloned())
        .ok_or_else(|| format!("job {job_id} has no second node"))?;
    std::thread::sleep(Duration::from_secs(50));
    let slurmd: u32 = std::fs::read_to_string(cluster.dir.join(format!("slurmd-{victim}.pid")))
        .map_err(|e| e.to_string())?
        .trim()
        .parse()
        .map_err(|_| format!("slurmd-{victim}.pid"))?;
    let mut frozen = vec![slurmd];
    frozen.extend(job_processes(&cluster.conf(), &victim));
    signal(&frozen, "STOP");
    let frozen_at = Instant::now();
    let mut result = None;
    while frozen_at.elapsed() < GIVE_UP {
        let going_on = cluster.jobs().iter().any(|(_, state, nodes)| {
            state == "RUNNING" && !nodes.is_empty() && !cluster.hosts(nodes).contains(&victim)
        });
        if going_on {
            result = Some(frozen_at.elapsed().as_secs_f64());
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if let Some(mut engine) = engine {
        let _ = engine.kill();
        let _ = engine.wait();
        // What runguard decided, and why, for the report.
        if let Ok(output) = cluster
            .command(BIN)
            .arg("--db")
            .arg(work.path().join("runguard.sqlite"))
            .args(["status", "--json"])
            .output()
            && let Ok(status) = serde_json::from_slice::<serde_json::Value>(&output.stdout)
        {
            let decisions = status["workflows"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|w| w["journal"].as_array().cloned().unwrap_or_default())
                .filter_map(|entry| entry["decision"].as_str().map(str::to_string));
            for decision in decisions {
                eprintln!("  {decision}");
            }
        }
    }
    signal(&frozen, "KILL");
    let _ = cluster.command("scancel").args(["--user", "root"]).status();
    eprintln!(
        "round {index} ({}): {}",
        if with_runguard {
            "runguard"
        } else {
            "Slurm alone"
        },
        result.map_or("did not go on".to_string(), |s| format!("{s:.1} s"))
    );
    Ok(result)
}

fn summary(values: &[f64]) -> String {
    if values.is_empty() {
        return "no round went on".to_string();
    }
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    format!(
        "median {:5.1} s   min {:5.1} s   max {:5.1} s",
        sorted[sorted.len() / 2],
        sorted[0],
        sorted[sorted.len() - 1]
    )
}

fn main() {
    let release = lab::release();
    let rounds = lab::count_from_env("RUNGUARD_DEATH_ROUNDS", 3);
    if !lab::installed(&release, &["slurmctld"]) {
        println!("slurm_node_death: skipped, Slurm is not installed");
        return;
    }
    println!(
        "Slurm {release}: a node freezes under a running 2-node job (SlurmdTimeout=30); freeze → the run going on without it, {rounds} rounds"
    );
    for with_runguard in [true, false] {
        let mut times = Vec::new();
        let mut stuck = 0;
        for index in 0..rounds {
            match round(&release, with_runguard, index) {
                Ok(Some(seconds)) => times.push(seconds),
                Ok(None) => stuck += 1,
                Err(err) => eprintln!("round {index}: {err}"),
            }
        }
        println!(
            "{:<12} {}{}",
            if with_runguard {
                "runguard"
            } else {
                "Slurm alone"
            },
            summary(&times),
            if stuck > 0 {
                format!("   ({stuck} did not go on within {} s)", GIVE_UP.as_secs())
            } else {
                String::new()
            }
        );
    }
}
