//! The readers of `squeue`/`scontrol`/slurmrestd on the answers of real Slurm releases recorded by `tests/slurm/capture.sh` (22.05
//! and 24.11: `squeue --json`, `squeue --states=all --json`, `scontrol show job --json`, slurmrestd
//! v0.0.36 to v0.0.42) and on the v0.0.39 and v0.0.43 listings built from Slurm's sources.

use std::path::PathBuf;

use super::*;
use crate::backend::Hold;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/slurm")
}

/// Every recorded job listing, by file name.
fn listings() -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = std::fs::read_dir(fixtures())
        .unwrap()
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            let listing = name.ends_with(".json")
                && (name.starts_with("squeue")
                    || name.starts_with("scontrol-json")
                    || (name.starts_with("slurmrestd-") && name.contains("-jobs_")));
            listing.then(|| {
                let text = std::fs::read_to_string(fixtures().join(&name)).unwrap();
                (name, text)
            })
        })
        .collect();
    found.sort();
    found
}

fn jobs_of(name: &str) -> Vec<JobSnapshot> {
    let text = std::fs::read_to_string(fixtures().join(name)).unwrap();
    let (jobs, warnings) = parse(&text).unwrap();
    assert!(warnings.is_empty(), "{name}: {warnings:?}");
    jobs.into_iter().map(|job| job.snapshot).collect()
}

fn job<'a>(jobs: &'a [JobSnapshot], id: &str) -> &'a JobSnapshot {
    jobs.iter().find(|job| job.job_id == id).unwrap()
}

#[test]
fn every_recorded_listing_of_every_version_reads_with_every_state_understood() {
    let listings = listings();
    assert!(listings.len() >= 60, "{} listings", listings.len());
    for (name, text) in listings {
        let (jobs, warnings) = parse(&text).unwrap_or_else(|err| panic!("{name}: {err}"));
        // 22.05's slurmrestd still serves v0.0.36 and v0.0.37, which runguard does not ask for.
        let older = name.contains("-v0.0.36-") || name.contains("-v0.0.37-");
        if older {
            assert!(
                warnings.len() == 1 && warnings[0].contains("older"),
                "{name}: {warnings:?}"
            );
        } else {
            assert!(warnings.is_empty(), "{name}: {warnings:?}");
        }
        for job in jobs {
            assert_ne!(
                job.snapshot.state,
                JobState::Unknown,
                "{name}: {:?}",
                job.snapshot
            );
            assert!(
                !job.snapshot.name.is_empty(),
                "{name}: job {}",
                job.snapshot.job_id
            );
        }
    }
}

#[test]
fn a_requeues_hold_a_users_and_an_administrators_are_told_apart_on_both_releases() {
    for name in [
        "squeue-states-all_22.05_held.json",
        "squeue-states-all_24.11_held.json",
        "scontrol-json_24.11_held.json",
        "slurmrestd-v0.0.42-jobs_24.11_held.json",
    ] {
        let jobs = jobs_of(name);
        assert_eq!(job(&jobs, "1").hold, Some(Hold::Requeue), "{name}");
        assert_eq!(job(&jobs, "2").hold, Some(Hold::User), "{name}");
        assert_eq!(job(&jobs, "3").hold, Some(Hold::Admin), "{name}");
        assert_eq!(job(&jobs, "1").restart_count, 1, "{name}");
    }
}

#[test]
fn a_failed_job_reads_with_its_exit_code_nodes_and_log_on_both_releases() {
    for name in [
        "squeue-states-all_22.05_failed.json",
        "squeue-states-all_24.11_failed.json",
        "scontrol-json_24.11_failed.json",
        "slurmrestd-v0.0.40-jobs_24.11_failed.json",
        "slurmrestd-v0.0.41-jobs_24.11_failed.json",
        "slurmrestd-v0.0.42-jobs_24.11_failed.json",
    ] {
        let jobs = jobs_of(name);
        let failed = job(&jobs, "1");
        assert_eq!(failed.state, JobState::Failed, "{name}");
        assert_eq!(failed.exit_code, Some(3), "{name}");
        assert!(!failed.nodes.is_empty(), "{name}");
        assert!(failed.end_time.is_some(), "{name}");
        let log = failed
            .log_path
            .as_ref()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        assert!(log.ends_with("train_1.log"), "{name}: {log}");
    }
}

#[test]
fn without_states_all_a_24_11_listing_has_no_ended_job() {
    let jobs = jobs_of("squeue_24.11_failed.json");
    assert!(jobs.iter().all(|job| job.job_id != "1"), "{jobs:?}");
}

#[test]
fn the_listings_built_from_the_v0_0_39_and_v0_0_43_sources_read() {
    for name in [
        "squeue_v0.0.39_from_spec.json",
        "squeue_v0.0.43_from_spec.json",
    ] {
        let jobs = jobs_of(name);
        assert!(!jobs.is_empty(), "{name}");
        for job in &jobs {
            assert_ne!(job.state, JobState::Unknown, "{name}: {job:?}");
            if let Some(log) = &job.log_path {
                assert!(
                    !log.to_string_lossy().contains('%'),
                    "{name}: {log:?} is expanded"
                );
            }
        }
    }
}

#[test]
fn the_scontrol_text_of_24_11_reads_as_its_json_does() {
    let text = |name: &str| std::fs::read_to_string(fixtures().join(name)).unwrap();
    let (held, warnings) = crate::backend::slurm::scontrol::parse(&text("scontrol_24.11_held.txt"));
    assert!(warnings.is_empty(), "{warnings:?}");
    let held: Vec<JobSnapshot> = held.into_iter().map(|job| job.snapshot).collect();
    assert_eq!(job(&held, "1").hold, Some(Hold::Requeue));
    assert_eq!(job(&held, "2").hold, Some(Hold::User));
    assert_eq!(job(&held, "3").hold, Some(Hold::Admin));
    let (failed, _) = crate::backend::slurm::scontrol::parse(&text("scontrol_24.11_failed.txt"));
    let failed: Vec<JobSnapshot> = failed.into_iter().map(|job| job.snapshot).collect();
    assert_eq!(job(&failed, "1").state, JobState::Failed);
    assert_eq!(job(&failed, "1").exit_code, Some(3));
}
