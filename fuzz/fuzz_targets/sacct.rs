//! sacct's parsable answer for every attempt of a job, and its failures.
#![no_main]

use chrono::Utc;
use libfuzzer_sys::fuzz_target;
use runguard_engine::backend::slurm::sacct;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (records, _warnings) = sacct::parse_in(&text, &Utc);
    assert!(records.len() <= text.lines().count());
    // The same bytes as stderr of a failed run, and as stdout of a good one.
    let _ = sacct::read_answer(false, "", &text);
    let _ = sacct::read_answer(true, &text, "");
});
