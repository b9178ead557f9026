//! A real single-host Slurm (Debian's slurm-wlm with four nodes n1..n4, started by
//! tests/slurm/cluster.sh), one at a time, stopped when dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::CliSandbox;

pub const CLUSTER_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slurm/cluster.sh");
pub const RESTD_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slurm/restd.sh");
pub const TRAIN_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slurm/train.sh");
pub const DDP_SBATCH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slurm/ddp.sbatch");
pub const DDP_TRAIN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slurm/ddp_train.py");

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

/// The Slurm release the tests run on: `RUNGUARD_SLURM_RELEASE`, else 22.05 (the host's packages);
/// 24.11 runs from the Debian trixie root `tests/slurm/trixie-root.sh` builds.
pub fn release() -> String {
    std::env::var("RUNGUARD_SLURM_RELEASE").unwrap_or_else(|_| "22.05".to_string())
}

/// A running Slurm, stopped when dropped.
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

/// The Debian trixie root that release 24.11 runs from (`RUNGUARD_SLURM_ROOT`, as cluster.sh reads it).
pub fn trixie_root() -> PathBuf {
    std::env::var_os("RUNGUARD_SLURM_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/cache/runguard/trixie-root"))
}

/// Whether the job steps of this release's cluster can import torch, or a reason to skip: the host's
/// `/usr/bin/python3` on 22.05, the trixie root's on 24.11 (its job steps run inside the root).
pub fn torch_available() -> bool {
    let release = release();
    let (found, interpreter) = if release == "22.05" {
        let found = Command::new("/usr/bin/python3")
            .args([
                "-c",
                "import importlib.util, sys; sys.exit(importlib.util.find_spec('torch') is None)",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success());
        (
            found,
            "the host's /usr/bin/python3 (apt-get install python3-torch)".to_string(),
        )
    } else {
        let root = trixie_root();
        let found = root
            .join("usr/lib/python3/dist-packages/torch/__init__.py")
            .is_file();
        (
            found,
            format!(
                "Slurm {release}'s root {} (tests/slurm/trixie-root.sh builds it with python3-torch)",
                root.display()
            ),
        )
    };
    super::available(
        found,
        "RUNGUARD_REQUIRE_SLURM",
        &format!("torch cannot be imported by {interpreter}"),
    )
}

/// `runguard run --auto` in `sandbox` against `cluster` (through `launcher`, e.g. [`AS_NOBODY`]), its
/// stderr in `engine.err`; ended when dropped, also when a test fails half-way.
pub struct HeadlessEngine {
    child: Child,
}

impl HeadlessEngine {
    pub fn start(sandbox: &CliSandbox, cluster: &Cluster, launcher: &[&str]) -> Self {
        let child = sandbox
            .command_via(launcher)
            .current_dir(sandbox.path())
            .env("SLURM_CONF", &cluster.conf)
            .env("PATH", &cluster.path)
            .args(["run", "--auto"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(sandbox.path().join("engine.err")).unwrap())
            .spawn()
            .unwrap();
        Self { child }
    }

    /// Ends the engine (SIGKILL: it must survive that) and waits for it.
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HeadlessEngine {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The processes whose environment holds every one of `entries` (`KEY=VALUE`), this one aside. Clusters
/// of two test runs may be up at once (CI runs both releases side by side), so a caller names something
/// only its own test's processes hold.
pub fn processes_with_env(entries: &[&str]) -> Vec<u32> {
    let own = std::process::id();
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != own)
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ")).is_ok_and(|environ| {
                entries.iter().all(|entry| {
                    environ
                        .split(|byte| *byte == 0)
                        .any(|variable| variable == entry.as_bytes())
                })
            })
        })
        .collect()
}

/// When dropped (after the cluster, so declared before it), SIGKILLs every process whose environment
/// holds `entry`: what a test's jobs may have left behind (a stopped rank, a step that outlived its
/// slurmd), and nothing that the test did not start.
pub struct Leftovers {
    entry: String,
}

impl Leftovers {
    pub fn marked(entry: impl Into<String>) -> Self {
        Self {
            entry: entry.into(),
        }
    }
}

impl Drop for Leftovers {
    fn drop(&mut self) {
        let pids: Vec<String> = processes_with_env(&[&self.entry])
            .iter()
            .map(u32::to_string)
            .collect();
        if !pids.is_empty() {
            let _ = Command::new("kill").arg("-KILL").args(&pids).status();
        }
    }
}

/// The jobs `cluster` holds (by their owner, an administrator or a requeue-hold), one `ID STATE
/// REASON` line each.
pub fn held_jobs(cluster: &Cluster) -> Vec<String> {
    let output = cluster
        .command("squeue")
        .args(["--all", "--noheader", "--states=all", "--format=%i %T %r"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "squeue: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter(|line| line.to_ascii_lowercase().contains("held"))
        .map(str::to_string)
        .collect()
}

/// Every job log (`*.log`) in `dir`, for assertions and the message of a failed test.
pub fn job_logs(dir: &Path) -> String {
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

/// The strings of a JSON array (none for anything else).
pub fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|item| item.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}
