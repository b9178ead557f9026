//! What the integration tests share: a scripted scheduler and a builder of the job snapshots it
//! reports ([`backend`], [`job`]), an engine on a manual clock around them ([`rig`]), and a real
//! single-host Slurm ([`slurm`]).

pub mod backend;
pub mod job;
pub mod rig;
#[cfg(feature = "slurm")]
pub mod slurm;

use std::process::Command;

use chrono::{DateTime, Utc};

pub use backend::Script;
pub use job::job;
pub use rig::EngineRig;

/// When every test's manual clock starts, and when its scripted jobs were submitted.
pub fn start_time() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-01-05T08:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
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
