//! The cockpit end to end in a real terminal (tmux): the real binary on the simulated cluster, driven
//! with `send-keys` and read with `capture-pane`. Skipped with a message where tmux is missing; CI
//! installs it and sets RUNGUARD_REQUIRE_TMUX=1 so that a skip fails there.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{CliSandbox, WATCHDOG_ENDS_THE_JOB, available};

fn tmux_available() -> bool {
    let found = Command::new("tmux")
        .arg("-V")
        .output()
        .is_ok_and(|o| o.status.success());
    available(
        found,
        "RUNGUARD_REQUIRE_TMUX",
        "tmux is not installed (apt-get install tmux)",
    )
}

/// A tmux server of the test's own (its own socket), killed when dropped.
struct Tmux {
    socket: PathBuf,
}

impl Tmux {
    fn command(&self) -> Command {
        let mut command = Command::new("tmux");
        command.arg("-S").arg(&self.socket);
        command
    }

    /// Starts `shell_command` in a new 132x36 session called `name` (wide enough for every tab's full
    /// name).
    fn start(&self, name: &str, shell_command: &str) {
        let status = self
            .command()
            .args([
                "new-session",
                "-d",
                "-x",
                "132",
                "-y",
                "36",
                "-s",
                name,
                shell_command,
            ])
            .status()
            .unwrap();
        assert!(status.success());
    }

    fn keys(&self, name: &str, keys: &[&str]) {
        for key in keys {
            let status = self
                .command()
                .args(["send-keys", "-t", name, key])
                .status()
                .unwrap();
            assert!(status.success());
            std::thread::sleep(Duration::from_millis(150));
        }
    }

    fn screen(&self, name: &str) -> String {
        let output = self
            .command()
            .args(["capture-pane", "-p", "-t", name])
            .output()
            .unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// Waits until the screen shows `text`; the screen then.
    fn wait_for(&self, name: &str, text: &str, within: Duration) -> String {
        let start = Instant::now();
        loop {
            let screen = self.screen(name);
            if screen.contains(text) {
                return screen;
            }
            if start.elapsed() > within {
                panic!("{text:?} never appeared; the screen:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.command().arg("kill-server").status();
    }
}

/// The cockpit of alice in the sandbox; the shell stays once it ends.
fn cockpit_command(sandbox: &CliSandbox) -> String {
    format!(
        "{}; echo COCKPIT-EXITED; sleep 600",
        sandbox.shell_line(&[("USER", "alice")])
    )
}

#[test]
fn navigate_search_sort_approve_detach_and_attach_again() {
    if !tmux_available() {
        return;
    }
    // Fast simulated time: the job fails about 5 s in.
    let sandbox = CliSandbox::new(&format!("[sim]\nspeed = 300.0\n{WATCHDOG_ENDS_THE_JOB}"));
    let tmux = Tmux {
        socket: sandbox.path().join("tmux.sock"),
    };
    tmux.start("first", &cockpit_command(&sandbox));
    tmux.wait_for("first", "llama3-8b-pretrain", Duration::from_secs(20));
    assert!(tmux.screen("first").contains("engine here"));

    // The failure is attributed and its recovery proposed.
    let screen = tmux.wait_for("first", "Approvals (2)", Duration::from_secs(60));
    assert!(screen.contains("FAILED ▲"), "{screen}");

    // Search, then clear it.
    tmux.keys("first", &["/", "z", "z", "z"]);
    tmux.wait_for("first", "0 of 1 attempts", Duration::from_secs(5));
    tmux.keys("first", &["Escape"]);
    tmux.wait_for("first", "1 of 1 attempts", Duration::from_secs(5));

    // Sort by a column, from the command line.
    tmux.keys(
        "first",
        &[
            ":", "s", "o", "r", "t", " ", "d", "u", "r", "a", "t", "i", "o", "n", "Enter",
        ],
    );
    tmux.wait_for("first", "DURATION▲", Duration::from_secs(5));

    // Details of the focused attempt.
    tmux.keys("first", &["Enter"]);
    let details = tmux.wait_for("first", "Anomalies & attribution", Duration::from_secs(5));
    assert!(details.contains("nccl_timeout"), "{details}");
    assert!(details.contains("4201 (attempt 0)"), "{details}");

    // Approve the requeue and see it executed.
    tmux.keys("first", &["5"]);
    tmux.wait_for("first", "Waiting for approval · 2", Duration::from_secs(5));
    tmux.keys("first", &["a"]);
    let results = tmux.wait_for("first", "done     requeue", Duration::from_secs(30));
    assert!(results.contains("excluding node-07"), "{results}");
    tmux.keys("first", &["1"]);
    tmux.wait_for("first", "4201.1", Duration::from_secs(30));

    // The workflow's charts and its attempts timeline.
    tmux.keys("first", &["3"]);
    tmux.wait_for("first", "TFLOP/s/GPU", Duration::from_secs(5));
    tmux.keys("first", &["4"]);
    let timeline = tmux.wait_for("first", "attempts timeline", Duration::from_secs(5));
    assert!(timeline.contains("goodput"), "{timeline}");
    assert!(timeline.contains("attempt 0 FAILED"), "{timeline}");
    tmux.keys("first", &["1"]);
    tmux.wait_for("first", "4201.1", Duration::from_secs(5));

    // Detach: the engine goes on headless and the cockpit ends.
    tmux.keys("first", &["D"]);
    let screen = tmux.wait_for("first", "COCKPIT-EXITED", Duration::from_secs(60));
    assert!(
        screen.contains("the engine goes on headless (pid"),
        "{screen}"
    );
    let pid: u32 = screen
        .split("(pid ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|pid| pid.trim().parse().ok())
        .unwrap_or_else(|| panic!("no pid in {screen}"));

    // A later cockpit finds that engine and attaches as a viewer.
    tmux.start("second", &cockpit_command(&sandbox));
    let screen = tmux.wait_for("second", "viewer", Duration::from_secs(20));
    assert!(screen.contains("4201.1"), "{screen}");
    // The detached engine finishes the run.
    tmux.wait_for("second", "COMPLETED", Duration::from_secs(90));
    tmux.keys("second", &["q"]);
    tmux.wait_for("second", "COCKPIT-EXITED", Duration::from_secs(10));

    let _ = Command::new("kill").arg(pid.to_string()).status();
}
