//! A real single-host Slurm (Debian's slurm-wlm with four nodes n1..n4, started by
//! tests/slurm/cluster.sh), one at a time, stopped when dropped.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::CliSandbox;

pub const CLUSTER_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slurm/cluster.sh");
pub const RESTD_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slurm/restd.sh");
pub const TRAIN_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slurm/train.sh");

/// Runs a command as user nobody: a researcher without operator rights.
pub const AS_NOBODY: [&str; 4] = [
    "setpriv",
    "--reuid=nobody",
    "--regid=nogroup",
    "--clear-groups",
];

/// One cluster at a time: four slurmd, a controller and the jobs are heavy enough for a 2-core
/// machine, and a test that freezes a node's processes must not reach another cluster's.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Waits for the other tests' clusters to be gone; hold the guard while this test's runs.
pub fn one_at_a_time() -> MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Whether Slurm and `extra` programs are installed, or a reason to skip.
pub fn available(extra: &[&str]) -> bool {
    let mut programs = vec!["slurmctld", "slurmd", "sbatch", "setpriv"];
    programs.extend_from_slice(extra);
    let missing = super::missing_programs(&programs);
    super::available(
        missing.is_empty(),
        "RUNGUARD_REQUIRE_SLURM",
        &format!(
            "{missing:?} not installed (apt-get install slurmctld slurmd slurm-client slurmrestd)"
        ),
    )
}

/// A running Slurm, stopped when dropped.
/// The Slurm release the tests run on: `RUNGUARD_SLURM_RELEASE`, else 22.05 (the host's packages);
/// 24.11 runs from the Debian trixie root `tests/slurm/trixie-root.sh` builds.
pub fn release() -> String {
    std::env::var("RUNGUARD_SLURM_RELEASE").unwrap_or_else(|_| "22.05".to_string())
}

pub struct Cluster {
    pub dir: PathBuf,
    pub conf: PathBuf,
    /// Where this release's client commands are, when they are not the host's (`DIR/bin`).
    pub bin_dir: Option<PathBuf>,
    /// `PATH` for the cluster's client commands: `bin_dir` first, when there is one.
    pub path: std::ffi::OsString,
}

impl Cluster {
    pub fn start(dir: &Path) -> Self {
        Self::start_with(dir, 30)
    }

    /// A cluster that marks a node down after `slurmd_timeout` seconds without an answer.
    pub fn start_with(dir: &Path, slurmd_timeout: u32) -> Self {
        Self::start_configured(dir, slurmd_timeout, &[])
    }

    /// A cluster started with these `cluster.sh` settings (`RUNGUARD_SLURM_JWT_KEY`...) too.
    pub fn start_configured(dir: &Path, slurmd_timeout: u32, settings: &[(&str, &Path)]) -> Self {
        let release = release();
        // The jobs' scripts and logs live beside the cluster's directory, in the test's own.
        let binds = dir.parent().unwrap_or(dir);
        std::fs::create_dir_all(binds).unwrap();
        let output = Command::new("bash")
            .args([CLUSTER_SH, "start"])
            .arg(dir)
            .arg(&release)
            .env("RUNGUARD_SLURMD_TIMEOUT", slurmd_timeout.to_string())
            .env("RUNGUARD_SLURM_BINDS", binds)
            .envs(settings.iter().copied())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "slurm did not start: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let bin_dir = (release != "22.05").then(|| dir.join("bin"));
        let host_path = std::env::var_os("PATH").unwrap_or_default();
        let path = match &bin_dir {
            Some(bin) => {
                let mut path = bin.clone().into_os_string();
                path.push(":");
                path.push(host_path);
                path
            }
            None => host_path,
        };
        Self {
            dir: dir.to_path_buf(),
            conf: dir.join("slurm.conf"),
            bin_dir,
            path,
        }
    }

    /// A Slurm client command of the cluster's release, with its configuration.
    pub fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command
            .env("SLURM_CONF", &self.conf)
            .env("PATH", &self.path);
        command
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .args([CLUSTER_SH, "stop"])
            .arg(&self.dir)
            .status();
    }
}

/// `runguard status --json` in `sandbox` about `cluster`.
pub fn status(sandbox: &CliSandbox, cluster: &Cluster) -> Option<Value> {
    let output = sandbox
        .command()
        .args(["status", "--json"])
        .env("SLURM_CONF", &cluster.conf)
        .env("PATH", &cluster.path)
        .output()
        .ok()?;
    serde_json::from_slice(&output.stdout).ok()
}

/// The first workflow once it is completed, or as it is after `within`.
pub fn completed_workflow(sandbox: &CliSandbox, cluster: &Cluster, within: Duration) -> Value {
    let start = Instant::now();
    let mut workflow = Value::Null;
    while start.elapsed() < within {
        if let Some(status) = status(sandbox, cluster) {
            workflow = status["workflows"][0].clone();
            if workflow["status"] == "completed" {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    workflow
}
