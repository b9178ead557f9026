//! Job listings in Slurm's JSON of every data_parser version: `squeue --json`, `scontrol show job
//! --json` and slurmrestd's `/jobs`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use runguard_engine::backend::slurm::json::DataParser;
use runguard_engine::backend::slurm::squeue;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok((jobs, _warnings)) = squeue::parse(text) {
        for job in &jobs {
            // A job runguard reads has an id to act on.
            assert!(!job.snapshot.job_id.is_empty());
        }
    }
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(text) {
        let _ = DataParser::declared(&value);
    }
    let _ = DataParser::parse(text);
    let _ = squeue::expand_output(text, "4242", "train", "alice");
});
