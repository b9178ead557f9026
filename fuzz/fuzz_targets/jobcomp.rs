//! The `jobcomp/filetxt` file: one line per ended attempt, read back into attempts per job.
#![no_main]

use chrono::Utc;
use libfuzzer_sys::fuzz_target;
use runguard_engine::backend::slurm::jobcomp;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let complete = jobcomp::complete_lines(&text);
    assert!(text.starts_with(complete) && (complete.is_empty() || complete.ends_with('\n')));
    let (records, warnings) = jobcomp::parse_in(&text, &Utc);
    let lines = text.lines().filter(|line| !line.trim().is_empty()).count();
    assert!(records.len() <= lines && records.len() + warnings.len() >= lines);
    for record in &records {
        let attempts = jobcomp::attempts_of(&records, &record.job_id);
        assert!(!attempts.is_empty());
    }
});
