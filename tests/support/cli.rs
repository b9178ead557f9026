//! The `runguard` binary in a sandbox: a temporary directory holding its config file, its store and
//! XDG directories of its own, so that nothing of the user's is read or written.

use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

pub const BIN: &str = env!("CARGO_BIN_EXE_runguard");
/// Real-time bound for [`CliSandbox::wait_for`]; generous for a loaded CI machine.
const DEADLINE: Duration = Duration::from_secs(120);

/// A `[detect]` section without the fatal-line rule, so that a scenario's job runs into its watchdog
/// and fails: at hundreds of times real time the rule's few seconds and a one-minute watchdog race,
/// and the tests of what follows a failed job (alerts, reports, metrics, the cockpit) need one path.
pub const WATCHDOG_ENDS_THE_JOB: &str = "[detect]\nfatal_confirm_max_secs = 0\n";

pub struct CliSandbox {
    dir: tempfile::TempDir,
    /// Set (`Some`) or removed (`None`) in every command's environment, after the sandbox's own.
    env: Vec<(OsString, Option<OsString>)>,
}

impl Default for CliSandbox {
    fn default() -> Self {
        Self::new("")
    }
}

impl CliSandbox {
    /// A sandbox whose config file says `config`.
    pub fn new(config: &str) -> Self {
        let sandbox = Self {
            dir: tempfile::tempdir().unwrap(),
            env: Vec::new(),
        };
        sandbox.write_config(config);
        sandbox
    }

    /// Every command gets `key=value` too.
    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), Some(value.into())));
        self
    }

    /// Every command runs without `key`.
    pub fn env_remove(mut self, key: impl Into<OsString>) -> Self {
        self.env.push((key.into(), None));
        self
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn config_path(&self) -> PathBuf {
        self.path().join("config.toml")
    }

    pub fn db(&self) -> PathBuf {
        self.path().join("runguard.sqlite")
    }

    pub fn write_config(&self, config: &str) {
        std::fs::write(self.config_path(), config).unwrap();
    }

    /// A `[sim]` section playing `scenario` (at `speed` times real time when given), its files in the
    /// sandbox.
    pub fn sim_section(&self, scenario: &str, speed: Option<u32>) -> String {
        let speed = speed.map(|speed| format!("speed = {speed}.0\n"));
        format!(
            "[sim]\nscenario = \"{scenario}\"\n{}dir = \"{}\"\n",
            speed.unwrap_or_default(),
            self.path().join("sim").display()
        )
    }

    fn xdg(&self) -> [(&'static str, PathBuf); 2] {
        [
            ("XDG_CONFIG_HOME", self.path().join("xdg-config")),
            ("XDG_DATA_HOME", self.path().join("xdg-data")),
        ]
    }

    /// `runguard --config FILE --db FILE`, for the caller's arguments.
    pub fn command(&self) -> Command {
        self.command_via(&[])
    }

    /// The same run through `launcher` (`setpriv --reuid=nobody ...`).
    pub fn command_via(&self, launcher: &[&str]) -> Command {
        let mut command = match launcher {
            [] => Command::new(BIN),
            [program, args @ ..] => {
                let mut command = Command::new(program);
                command.args(args).arg(BIN);
                command
            }
        };
        command
            .arg("--config")
            .arg(self.config_path())
            .arg("--db")
            .arg(self.db())
            .envs(self.xdg())
            .env_remove("RUNGUARD_CONFIG")
            .env_remove("RUNGUARD_DB");
        for (key, value) in &self.env {
            match value {
                Some(value) => command.env(key, value),
                None => command.env_remove(key),
            };
        }
        command
    }

    /// The same command as a line for `sh` (to run in a terminal), with `env` set too.
    pub fn shell_line(&self, env: &[(&str, &str)]) -> String {
        let mut line = String::from("env -u RUNGUARD_CONFIG -u RUNGUARD_DB");
        for (key, value) in self.xdg() {
            line.push_str(&format!(" {key}={}", value.display()));
        }
        for (key, value) in env {
            line.push_str(&format!(" {key}={value}"));
        }
        line.push_str(&format!(
            " {BIN} --config {} --db {}",
            self.config_path().display(),
            self.db().display()
        ));
        line
    }

    /// Runs `runguard ARGS` to its end.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command().args(args).output().unwrap()
    }

    /// Starts `runguard ARGS` with its output piped.
    pub fn spawn(&self, args: &[&str]) -> Child {
        self.spawn_with(args, Stdio::piped)
    }

    /// Starts `runguard ARGS` with its output thrown away.
    pub fn spawn_quiet(&self, args: &[&str]) -> Child {
        self.spawn_with(args, Stdio::null)
    }

    fn spawn_with(&self, args: &[&str], output: fn() -> Stdio) -> Child {
        self.command()
            .args(args)
            .stdout(output())
            .stderr(output())
            .spawn()
            .unwrap()
    }

    /// `status --json`, when it answers with JSON.
    pub fn status(&self) -> Option<Value> {
        let output = self.run(&["status", "--json"]);
        if !output.status.success() {
            return None;
        }
        serde_json::from_slice(&output.stdout).ok()
    }

    /// Polls `status --json` until `done` holds.
    pub fn wait_for(&self, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let start = Instant::now();
        while start.elapsed() < DEADLINE {
            if let Some(status) = self.status()
                && done(&status)
            {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("timed out waiting for {what}: {:#?}", self.status());
    }
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Stops a running `runguard` with SIGTERM (SIGKILL after 20 s); its exit and what it printed.
pub fn terminate(child: &mut Child) -> Output {
    let pid = child.id().to_string();
    Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let mut output = String::new();
    if let Some(mut out) = child.stdout.take() {
        let _ = out.read_to_string(&mut output);
    }
    let status = child.wait().unwrap();
    Output {
        status,
        stdout: output.into_bytes(),
        stderr: Vec::new(),
    }
}
