//! The local Slurm of the benchmarks (tests/slurm/cluster.sh) on either release: started in a
//! directory, its client commands run with the exports `start` printed, stopped when dropped.

// Each benchmark that includes this module uses a part of it.
#![allow(dead_code)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

pub const CLUSTER_SH: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/slurm/cluster.sh");

/// The release of `RUNGUARD_SLURM_RELEASE`, else 22.05 (the host's packages).
pub fn release() -> String {
    std::env::var("RUNGUARD_SLURM_RELEASE").unwrap_or_else(|_| "22.05".to_string())
}

/// A count from the environment variable `name`, else `default`.
pub fn count_from_env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

/// Whether the host has the commands of `release`: 24.11 brings its own in the trixie root, 22.05
/// needs Debian's packages (each of `programs`) on the host.
pub fn installed(release: &str, programs: &[&str]) -> bool {
    release != "22.05"
        || programs.iter().all(|program| {
            // The program's name is an argument of the shell, never part of its script.
            Command::new("sh")
                .args(["-c", "command -v \"$0\"", program])
                .output()
                .is_ok_and(|o| o.status.success())
        })
}

pub struct Cluster {
    pub dir: PathBuf,
    env: Vec<(String, String)>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self.command("scancel").args(["--user", "root"]).status();
        let _ = Command::new("bash")
            .args([CLUSTER_SH, "stop"])
            .arg(&self.dir)
            .status();
    }
}

impl Cluster {
    /// Starts `release` in `dir`; the jobs see `binds` at the same path. `settings` are cluster.sh's
    /// environment variables (`RUNGUARD_SLURM_CPUS`...).
    pub fn start(
        dir: &Path,
        release: &str,
        binds: &Path,
        settings: &[(&str, &str)],
    ) -> Result<Self, String> {
        let output = Command::new("bash")
            .args([CLUSTER_SH, "start"])
            .arg(dir)
            .arg(release)
            .env("RUNGUARD_SLURM_BINDS", binds)
            .envs(settings.iter().copied())
            .output()
            .map_err(|e| e.to_string())?;
        if !output.status.success() {
            return Err(String::from_utf8_lossy(&output.stderr).into_owned());
        }
        // The exports start prints (SLURM_CONF, and PATH for a release in its own root).
        let path = std::env::var("PATH").unwrap_or_default();
        let env = String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| line.strip_prefix("export "))
            .filter_map(|pair| pair.split_once('='))
            .map(|(key, value)| {
                (
                    key.to_string(),
                    value.trim_matches('"').replace("$PATH", &path),
                )
            })
            .collect();
        Ok(Self {
            dir: dir.to_path_buf(),
            env,
        })
    }

    /// A command of the cluster's release, with its configuration.
    pub fn command(&self, program: impl Into<OsString>) -> Command {
        let mut command = Command::new(program.into());
        command.envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        command
    }

    /// The exports `start` printed (`SLURM_CONF`, and `PATH` for a release in its own root).
    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// `cluster.sh VERB DIR`: `stop-ctld`, `start-ctld`.
    pub fn control(&self, verb: &str) -> Result<(), String> {
        let output = Command::new("bash")
            .args([CLUSTER_SH, verb])
            .arg(&self.dir)
            .output()
            .map_err(|e| e.to_string())?;
        if output.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&output.stderr).into_owned())
        }
    }

    /// The cluster's `SLURM_CONF`.
    pub fn conf(&self) -> String {
        self.env
            .iter()
            .find(|(key, _)| key == "SLURM_CONF")
            .map(|(_, value)| value.clone())
            .unwrap_or_default()
    }

    /// The host names of a Slurm host list (`n[1,3-4]`).
    pub fn hosts(&self, list: &str) -> Vec<String> {
        self.command("scontrol")
            .args(["show", "hostnames", list])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }
}
