//! `scontrol show job -o --details` text, one job per line, read into the JSON listing's jobs.
#![no_main]

use chrono::Utc;
use libfuzzer_sys::fuzz_target;
use runguard_engine::backend::slurm::scontrol;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (jobs, _warnings) = scontrol::parse_in(&text, &Utc);
    assert!(jobs.len() <= text.lines().count());
});
