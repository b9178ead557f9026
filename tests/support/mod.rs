//! What the integration tests share: a scripted scheduler and a builder of the job snapshots it
//! reports ([`backend`], [`job`]), an engine on a manual clock around them ([`rig`]), a sandbox for
//! the `runguard` binary ([`cli`]), and a real single-host Slurm ([`slurm`]).

pub mod backend;
#[cfg(feature = "sim")]
pub mod chaos;
pub mod cli;
pub mod job;
pub mod rig;
#[cfg(feature = "slurm")]
pub mod slurm;

use std::path::Path;
use std::process::Command;

use chrono::{DateTime, Utc};
use serde_json::Value;

pub use backend::Script;
pub use cli::{CliSandbox, WATCHDOG_ENDS_THE_JOB, stderr, stdout, terminate};
pub use job::{job, queued_again};
pub use rig::EngineRig;

/// The nodes of the fake Kubernetes cluster's fixtures, in name order, with their Ready status.
pub const FIXTURE_NODE_STATUSES: [(&str, &str); 6] = [
    ("gpu-node-1", "Ready"),
    ("gpu-node-2", "Ready"),
    ("gpu-node-3", "NotReady"),
    ("gpu-node-4", "NotReady"),
    ("gpu-node-5", "Ready"),
    ("gpu-spot-1", "Ready"),
];

/// Appends `text` to the file at `path`, creating it: a job writing its log.
pub fn append(path: &Path, text: &str) {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .unwrap();
    file.write_all(text.as_bytes()).unwrap();
}

/// When every test's manual clock starts, and when its scripted jobs were submitted.
pub fn start_time() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-05T08:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

/// A TCP port of 127.0.0.1 that nothing listens on now.
pub fn free_port() -> u16 {
    // Below Linux's ephemeral range (32768 and up): a port the kernel may hand out as a connection's
    // source port can connect to itself when nothing listens on it, and the client then reads its own
    // request as the answer. Each call takes the next port (tests of one binary run at once), from a
    // start spread by the process id (test binaries run at once too).
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let start = std::process::id() % 12_000;
    (0..12_000)
        .map(|_| {
            let taken = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            20_000 + ((start + taken) % 12_000) as u16
        })
        .find(|&port| std::net::TcpListener::bind(("127.0.0.1", port)).is_ok())
        .expect("a free port below the ephemeral range")
}

/// Whether something a test needs from the machine is there. Where it is not, the test prints why it
/// skips, unless `require_var` is `1` (CI), where that is a failure.
pub fn available(found: bool, require_var: &str, missing: &str) -> bool {
    if !found {
        if std::env::var(require_var).as_deref() == Ok("1") {
            panic!("{missing}, but {require_var}=1 requires it");
        }
        eprintln!("SKIPPED: {missing}");
    }
    found
}

/// The programs of `programs` that are not on PATH.
pub fn missing_programs<'a>(programs: &[&'a str]) -> Vec<&'a str> {
    programs
        .iter()
        .copied()
        .filter(|program| {
            !Command::new("sh")
                .args(["-c", &format!("command -v {program}")])
                .output()
                .is_ok_and(|output| output.status.success())
        })
        .collect()
}

/// The JSON lines a local server recorded (what it received), skipping a line cut short.
pub fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .collect()
}
