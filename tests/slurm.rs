//! The Slurm backend against a real single-host Slurm (Debian's slurm-wlm, started by
//! tests/slurm/cluster.sh). Skipped with a message where Slurm is not installed; CI sets
//! RUNGUARD_REQUIRE_SLURM=1 so that a skip fails there instead.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_runguard");

static CLUSTER: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn slurm_available() -> bool {
    let found = Command::new("sh")
        .args([
            "-c",
            "command -v slurmctld && command -v slurmd && command -v sbatch",
        ])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !found {
        if std::env::var("RUNGUARD_REQUIRE_SLURM").as_deref() == Ok("1") {
            panic!("Slurm is required here (RUNGUARD_REQUIRE_SLURM=1) but not installed");
        }
        eprintln!(
            "SKIPPED: Slurm is not installed (apt-get install slurmctld slurmd slurm-client)"
        );
    }
    found
}

/// A running Slurm, stopped when dropped.
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
}

impl Cluster {
    fn start(dir: &Path) -> Self {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slurm/cluster.sh");
        let output = Command::new("bash")
            .args([script, "start"])
            .arg(dir)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "slurm did not start: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        Self {
            dir: dir.to_path_buf(),
            conf: dir.join("slurm.conf"),
        }
    }

    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.env("SLURM_CONF", &self.conf);
        command
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slurm/cluster.sh");
        let _ = Command::new("bash")
            .args([script, "stop"])
            .arg(&self.dir)
            .status();
    }
}

/// A job that fails on its first run with NCCL errors from the node of rank 1, and trains on a restart.
const JOB: &str = r#"#!/bin/bash
#SBATCH --comment='{"APS": {"auto_resume_mode": "requeue", "max_requeue_times": 3}}'
#SBATCH -N 2
#SBATCH -o LOGDIR/%x_%j.log
if [ "${SLURM_RESTART_COUNT:-0}" = "0" ]; then
  srun -l bash -c 'if [ "$SLURM_PROCID" = 1 ]; then echo "$SLURMD_NODENAME:4242:4243 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<1234> with status=12 opcode=0 len=0 vendor err 129 (Recv)"; fi; sleep 1; echo "[Rank $SLURM_PROCID] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600050 milliseconds before timing out."; exit 1'
  exit 1
fi
srun -l bash -c 'for i in 10 20 30; do [ "$SLURM_PROCID" = 1 ] && echo " iteration       $i/      30 | elapsed time per iteration (ms): 100.0 | throughput per GPU (TFLOP/s/GPU): 400.0 | lm loss: 2.000000E+00 |"; sleep 0.3; done'
"#;

fn status(sandbox: &Path, conf: &Path) -> Option<Value> {
    let output = Command::new(BIN)
        .arg("--config")
        .arg(sandbox.join("config.toml"))
        .arg("--db")
        .arg(sandbox.join("runguard.sqlite"))
        .args(["status", "--json"])
        .env("SLURM_CONF", conf)
        .output()
        .ok()?;
    serde_json::from_slice(&output.stdout).ok()
}

/// Runs the headless engine against the cluster with `script` submitted, until the workflow completes.
fn run_job(script_text: &str, whitelist: &str) -> Value {
    run_job_with(script_text, whitelist, "").0
}

/// [`run_job`] with extra config lines for the `[engine]` section; also returns the job logs.
fn run_job_with(script_text: &str, whitelist: &str, engine_extra: &str) -> (Value, String) {
    // One cluster at a time: jobs and nodes are heavy enough for a 2-core machine.
    let _one_at_a_time = CLUSTER
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let cluster = Cluster::start(&dir.path().join("slurm"));
    std::fs::write(
        dir.path().join("config.toml"),
        format!(
            "[engine]\npoll_interval_secs = 0.5\n{engine_extra}\n[backend]\nkind = \"slurm\"\n\n[recovery]\nwhitelist = {whitelist}\n"
        ),
    )
    .unwrap();
    let script = dir.path().join("train.sbatch");
    std::fs::write(
        &script,
        script_text.replace("LOGDIR", &dir.path().display().to_string()),
    )
    .unwrap();
    let mut engine: Child = Command::new(BIN)
        .arg("--config")
        .arg(dir.path().join("config.toml"))
        .arg("--db")
        .arg(dir.path().join("runguard.sqlite"))
        .args(["run", "--auto"])
        .env("SLURM_CONF", &cluster.conf)
        .env("XDG_CONFIG_HOME", dir.path().join("xdg"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let submitted = cluster
        .command("sbatch")
        .args(["--parsable", "-J", "llama-test"])
        .arg(&script)
        .output()
        .unwrap();
    assert!(
        submitted.status.success(),
        "{}",
        String::from_utf8_lossy(&submitted.stderr)
    );
    let start = Instant::now();
    let mut last = None;
    while start.elapsed() < Duration::from_secs(120) {
        if let Some(status) = status(dir.path(), &cluster.conf)
            && status["workflows"][0]["status"] == "completed"
        {
            last = Some(status);
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let _ = engine.kill();
    let _ = engine.wait();
    let logs = job_logs(dir.path());
    let status = last.unwrap_or_else(|| {
        panic!(
            "did not complete: {:#?}\n{}",
            status(dir.path(), &cluster.conf),
            logs
        )
    });
    (status, logs)
}

/// Every job log in `dir`, for the message of a failed test.
fn job_logs(dir: &Path) -> String {
    let mut out = String::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|ext| ext == "log") {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            out.push_str(&format!("--- {}\n{text}\n", path.display()));
        }
    }
    out
}

#[test]
fn a_failed_slurm_job_is_requeued_without_its_culprit_node_and_completes() {
    if !slurm_available() {
        return;
    }
    let status = run_job(JOB, r#"["requeue", "cancel"]"#);
    let workflow = &status["workflows"][0];
    assert_eq!(workflow["succeeded"], true, "{workflow:#}");
    let attempts = workflow["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{workflow:#}");
    assert_eq!(attempts[0]["job_id"], attempts[1]["job_id"]);
    let culprit = workflow["attributions"][0]["culprit"]["node"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(workflow["attributions"][0]["category"], "nccl_timeout");
    assert!(
        attempts[0]["nodes"]
            .as_array()
            .unwrap()
            .contains(&Value::from(culprit.clone()))
    );
    assert!(
        attempts[1]["excluded_nodes"]
            .as_array()
            .unwrap()
            .contains(&Value::from(culprit.clone()))
    );
    assert!(
        !attempts[1]["nodes"]
            .as_array()
            .unwrap()
            .contains(&Value::from(culprit))
    );
    assert_eq!(workflow["requeues_used"], 1);
}

/// A job whose code raises on every run.
const APP_BUG: &str = r#"#!/bin/bash
#SBATCH --comment='{"APS": {"auto_resume_mode": "requeue", "max_requeue_times": 3}}'
#SBATCH -N 1
#SBATCH -o LOGDIR/%x_%j.log
srun -l bash -c 'printf "Traceback (most recent call last):\n  File \"/workspace/pretrain_gpt.py\", line 245, in <module>\n    mask = batch[\"attention_mask\"]\nKeyError: '"'"'attention_mask'"'"'\n"; exit 1'
"#;

#[test]
fn a_python_exception_on_slurm_is_not_requeued() {
    if !slurm_available() {
        return;
    }
    let status = run_job(APP_BUG, r#"["requeue", "cancel"]"#);
    let workflow = &status["workflows"][0];
    assert_eq!(workflow["succeeded"], false, "{workflow:#}");
    assert_eq!(workflow["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(workflow["requeues_used"], 0);
    assert_eq!(workflow["attributions"][0]["category"], "app_exception");
    assert!(
        workflow["status_reason"]
            .as_str()
            .unwrap()
            .contains("not recoverable")
    );
}

/// A job that fails with an NCCL timeout on every run, allowed one requeue.
const ALWAYS_FAILS: &str = r#"#!/bin/bash
#SBATCH --comment='{"APS": {"auto_resume_mode": "requeue", "max_requeue_times": 1}}'
#SBATCH -N 1
#SBATCH -o LOGDIR/%x_%j.log
srun -l bash -c 'echo "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE) ran for 600050 milliseconds before timing out."; exit 1'
"#;

#[test]
fn max_requeue_times_from_the_comment_stops_the_recovery() {
    if !slurm_available() {
        return;
    }
    let status = run_job(ALWAYS_FAILS, r#"["requeue", "cancel"]"#);
    let workflow = &status["workflows"][0];
    assert_eq!(
        workflow["attempts"].as_array().unwrap().len(),
        2,
        "{workflow:#}"
    );
    assert_eq!(workflow["requeues_used"], 1);
    assert!(
        workflow["status_reason"]
            .as_str()
            .unwrap()
            .contains("requeue limit reached: 1 of 1"),
        "{workflow:#}"
    );
}

/// A job that goes silent on its first run, and trains on a restart.
const GOES_SILENT: &str = r#"#!/bin/bash
#SBATCH --comment='{"APS": {"auto_resume_mode": "requeue", "max_requeue_times": 3}}'
#SBATCH -N 1
#SBATCH -o LOGDIR/%x_%j.log
if [ "${SLURM_RESTART_COUNT:-0}" = "0" ]; then
  srun -l bash -c 'echo " iteration       10/      30 | elapsed time per iteration (ms): 100.0 | throughput per GPU (TFLOP/s/GPU): 400.0 | lm loss: 2.000000E+00 |"; sleep 600'
  exit 0
fi
srun -l bash -c 'echo " iteration       30/      30 | elapsed time per iteration (ms): 100.0 | throughput per GPU (TFLOP/s/GPU): 400.0 | lm loss: 2.000000E+00 |"'
"#;

#[test]
fn a_silent_slurm_job_is_detected_as_hung_and_requeued() {
    if !slurm_available() {
        return;
    }
    let (status, logs) = run_job_with(
        GOES_SILENT,
        r#"["requeue", "cancel"]"#,
        "heartbeat_timeout_secs = 10",
    );
    let workflow = &status["workflows"][0];
    assert_eq!(workflow["succeeded"], true, "{workflow:#}");
    assert_eq!(workflow["anomalies"][0]["kind"], "hang");
    assert_eq!(
        workflow["attempts"].as_array().unwrap().len(),
        2,
        "{workflow:#}\n{logs}"
    );
    assert_eq!(workflow["attempts"][0]["state"], "requeued");
}
