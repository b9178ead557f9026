//! `squeue --json`, `scontrol show job --json` and slurmrestd's `/jobs` into job snapshots, whatever
//! data_parser version the answer declares (v0.0.38 of 22.05 to v0.0.43 of 25.05; the shapes are read
//! in [`super::json`]).
//!
//! Every field is optional and typed loosely: a field that does not parse is skipped rather than losing
//! the whole listing, and a job whose state cannot be read keeps the state `Unknown`, which the engine
//! never acts on.

use std::path::PathBuf;

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::comment::{self, Enrolment};
use super::hostlist;
use super::json::{DataParser, StateWords, exit_code, number, standard_output, state_words, text};
use crate::backend::JobSnapshot;
use crate::model::{JobSpec, JobState, RecoveryLimits};

/// An answer that is not a job listing.
#[derive(Debug, thiserror::Error)]
pub enum ListingError {
    #[error("squeue answered something that is not a job listing: {0}")]
    NotAListing(String),
    /// Slurm's own errors instead of the jobs: 22.05 answers so, with an empty list and a success
    /// exit code, when it cannot reach the controller. Not a listing of no job.
    #[error("squeue could not list the jobs: {0}")]
    Failed(String),
}

#[derive(Debug, Deserialize)]
struct Listing {
    #[serde(default)]
    jobs: Vec<serde_json::Value>,
    #[serde(default)]
    errors: Vec<serde_json::Value>,
    #[serde(default)]
    meta: serde_json::Value,
}

/// One job of the listing, with what the scheduler said about it.
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmJob {
    pub snapshot: JobSnapshot,
    /// How the comment enrols the job.
    pub enrolment: Enrolment,
    pub partition: Option<String>,
}

/// Parses a listing; jobs that cannot be read are returned as warnings.
pub fn parse(text: &str) -> Result<(Vec<SlurmJob>, Vec<String>), ListingError> {
    let listing: Listing =
        serde_json::from_str(text).map_err(|err| ListingError::NotAListing(err.to_string()))?;
    if !listing.errors.is_empty() {
        let words: Vec<String> = listing
            .errors
            .iter()
            .map(|error| {
                ["source", "description", "error"]
                    .iter()
                    .filter_map(|key| error[*key].as_str())
                    .filter(|word| !word.is_empty())
                    .collect::<Vec<_>>()
                    .join(": ")
            })
            .collect();
        return Err(ListingError::Failed(words.join("; ")));
    }
    let mut jobs = Vec::new();
    let mut warnings = Vec::new();
    let declared = DataParser::declared(&listing.meta);
    if let Some(version) = declared.filter(|version| !version.known()) {
        let than = if version > DataParser(43) {
            "newer"
        } else {
            "older"
        };
        warnings.push(format!(
            "the answer declares data_parser {version}, {than} than runguard knows (v0.0.38 to \
             v0.0.43): fields are read where their shape is known"
        ));
    }
    for value in listing.jobs {
        match job_from_value(&value) {
            Ok(job) => jobs.push(job),
            Err(warning) => warnings.push(warning),
        }
    }
    Ok((jobs, warnings))
}

fn time(value: &serde_json::Value, key: &str) -> Option<DateTime<Utc>> {
    number(value, key)
        .filter(|seconds| *seconds > 0)
        .and_then(|seconds| DateTime::from_timestamp(seconds, 0))
}

/// One value of a TRES string: `mem` of `cpu=4,mem=8G,node=2` is `8G`.
fn tres_value(tres: &str, key: &str) -> Option<String> {
    tres.split(',').find_map(|item| {
        let (name, value) = item.split_once('=')?;
        (name == key).then(|| value.to_string())
    })
}

/// GPUs from a TRES string: `cpu=4,mem=8G,node=2,gres/gpu=16`.
fn gpus(tres: &str) -> Option<u32> {
    tres.split(',').find_map(|item| {
        let (key, count) = item.split_once('=')?;
        (key == "gres/gpu").then(|| count.parse().ok()).flatten()
    })
}

/// GPUs per node from `tres_per_node`: `gres:gpu:2` (22.05), `gres/gpu:a100:2` (24.11).
fn gpus_per_node(tres: &str) -> Option<u32> {
    tres.split(',').find_map(|item| {
        let item = item
            .strip_prefix("gres:")
            .or_else(|| item.strip_prefix("gres/"))?;
        let mut parts = item.split(':');
        if parts.next()? != "gpu" {
            return None;
        }
        parts.next_back()?.parse().ok()
    })
}

/// `afterok:4201(unfulfilled)` → "4201".
fn upstream(dependency: &str) -> Option<String> {
    let (_, rest) = dependency.split_once(':')?;
    let id: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (!id.is_empty()).then_some(id)
}

/// The tag runguard put in the comment of a job it submitted: `{"APS": {...}, "runguard": "TAG"}`.
fn runguard_tag(comment: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(comment.trim()).ok()?;
    value.get("runguard")?.as_str().map(str::to_string)
}

/// Slurm gives the output path as the user wrote it (`%x_%j.log`); the file on disk has the fields
/// filled in: `%j` job id, `%x` job name, `%u` user, `%%` a percent sign.
pub fn expand_output(pattern: &str, job_id: &str, name: &str, user: &str) -> String {
    let mut out = String::with_capacity(pattern.len() + 16);
    let mut chars = pattern.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('j') | Some('A') => out.push_str(job_id),
            Some('x') => out.push_str(name),
            Some('u') => out.push_str(user),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Tasks a node: the job's `--ntasks-per-node`, else its tasks spread over its nodes in blocks.
fn tasks_per_node(value: &serde_json::Value, node_count: u32) -> u32 {
    let per_node = number(value, "tasks_per_node").unwrap_or(0);
    if per_node > 0 {
        return u32::try_from(per_node).unwrap_or(0);
    }
    let tasks = u32::try_from(number(value, "tasks").unwrap_or(0)).unwrap_or(0);
    if node_count == 0 {
        return 0;
    }
    tasks.div_ceil(node_count)
}

/// Maps one job in the v0.0.38 shape to a [`SlurmJob`]; `scontrol` builds this shape too, so both
/// ways of listing jobs share one mapping.
pub(crate) fn job_from_value(value: &serde_json::Value) -> Result<SlurmJob, String> {
    let job_id = number(value, "job_id")
        .ok_or("a job without a job_id")?
        .to_string();
    let words = state_words(value);
    let state_raw = words
        .as_ref()
        .map_or_else(|| "UNKNOWN".to_string(), StateWords::raw);
    let nodes = match text(value, "nodes") {
        Some(list) => hostlist::expand(list).map_err(|err| format!("job {job_id}: {err}"))?,
        None => Vec::new(),
    };
    let excluded_nodes = match text(value, "excluded_nodes") {
        Some(list) => hostlist::expand(list).map_err(|err| format!("job {job_id}: {err}"))?,
        None => Vec::new(),
    };
    let node_count = number(value, "node_count")
        .unwrap_or(nodes.len() as i64)
        .max(0) as u32;
    // A cluster that does not account GPUs as a TRES still says what each node was asked for.
    let gpus_total = text(value, "tres_alloc_str")
        .or_else(|| text(value, "tres_req_str"))
        .and_then(gpus)
        .or_else(|| {
            let per_node = text(value, "tres_per_node").and_then(gpus_per_node)?;
            per_node.checked_mul(node_count.max(1))
        })
        .unwrap_or(0);
    let enrolment = comment::parse(text(value, "comment").unwrap_or(""));
    let limits = match &enrolment {
        Enrolment::Enrolled { limits, .. } => limits.clone(),
        _ => RecoveryLimits::default(),
    };
    let name = text(value, "name").unwrap_or("").to_string();
    let user = text(value, "user_name").unwrap_or("").to_string();
    let reason = text(value, "state_reason")
        .filter(|reason| *reason != "None")
        .map(str::to_string);
    let state = words.as_ref().map_or(JobState::Unknown, |words| {
        super::words::job_state(words.word())
    });
    let hold = if state == JobState::Pending {
        reason
            .as_deref()
            .and_then(|reason| super::words::hold(reason, text(value, "state_description")))
    } else {
        None
    };
    let (name_for_path, user_for_path) = (name.clone(), user.clone());
    let snapshot = JobSnapshot {
        job_id: job_id.clone(),
        name: name.clone(),
        user: user.clone(),
        state,
        state_raw,
        reason,
        hold,
        nodes,
        gpus: gpus_total,
        submit_time: time(value, "submit_time"),
        start_time: time(value, "start_time"),
        end_time: time(value, "end_time"),
        exit_code: state.is_terminal().then(|| exit_code(value)).flatten(),
        restart_count: number(value, "restart_cnt").unwrap_or(0).max(0) as u32,
        excluded_nodes,
        log_path: standard_output(value).map(|pattern| {
            PathBuf::from(expand_output(
                pattern,
                &job_id,
                &name_for_path,
                &user_for_path,
            ))
        }),
        spec: JobSpec {
            name,
            user,
            nodes: node_count,
            gpus_per_node: gpus_total.checked_div(node_count).unwrap_or(0),
            tasks_per_node: tasks_per_node(value, node_count),
            partition: text(value, "partition").map(str::to_string),
            command: text(value, "command").map(str::to_string),
            work_dir: text(value, "current_working_directory").map(str::to_string),
            dependency: text(value, "dependency").and_then(upstream),
            cluster: text(value, "cluster").map(str::to_string),
            reservation: text(value, "resv_name").map(str::to_string),
            cpus: number(value, "cpus").unwrap_or(0).max(0) as u32,
            memory: text(value, "tres_alloc_str")
                .or_else(|| text(value, "tres_req_str"))
                .and_then(|tres| tres_value(tres, "mem")),
            included_nodes: text(value, "required_nodes")
                .and_then(|list| hostlist::expand(list).ok())
                .unwrap_or_default(),
        },
        limits,
        tag: text(value, "comment").and_then(runguard_tag),
    };
    Ok(SlurmJob {
        snapshot,
        enrolment,
        partition: text(value, "partition").map(str::to_string),
    })
}

#[cfg(test)]
mod fixtures;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Hold;

    #[test]
    fn ranks_map_to_nodes_by_the_task_layout() {
        use serde_json::json;
        // --ntasks-per-node=2 (as 24.11 wraps it), four tasks on two nodes, one task a node.
        let wrapped = json!({"tasks_per_node": {"set": true, "infinite": false, "number": 2}});
        assert_eq!(tasks_per_node(&wrapped, 2), 2);
        assert_eq!(
            tasks_per_node(&json!({"tasks_per_node": 0, "tasks": 4}), 2),
            2
        );
        assert_eq!(tasks_per_node(&json!({"tasks": 5}), 2), 3);
        assert_eq!(tasks_per_node(&json!({"tasks": 2}), 0), 0);
        assert_eq!(tasks_per_node(&json!({}), 2), 0);
    }

    fn fixture() -> String {
        std::fs::read_to_string("../tests/fixtures/slurm/squeue_22.05.json").unwrap()
    }

    #[test]
    fn a_requeued_failed_job_reads_with_nodes_exclusions_exit_code_and_limits() {
        let (jobs, warnings) = parse(&fixture()).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let job = &jobs[0].snapshot;
        assert_eq!(job.job_id, "4201");
        assert_eq!(job.state, JobState::Failed);
        assert_eq!(job.reason.as_deref(), Some("NonZeroExitCode"));
        assert_eq!(job.nodes, ["n3", "n4"]);
        assert_eq!(job.excluded_nodes, ["n2"]);
        assert_eq!(job.exit_code, Some(3));
        assert_eq!(job.restart_count, 1);
        assert_eq!(job.gpus, 16);
        assert_eq!(job.spec.gpus_per_node, 8);
        assert_eq!(job.limits.max_requeue_times, Some(3));
        assert!(matches!(jobs[0].enrolment, Enrolment::Enrolled { .. }));
    }

    #[test]
    fn a_pending_dependent_job_names_its_upstream_and_is_not_enrolled_by_a_plain_comment() {
        let (jobs, _) = parse(&fixture()).unwrap();
        let job = &jobs[1];
        assert_eq!(job.snapshot.state, JobState::Pending);
        assert_eq!(job.snapshot.spec.dependency.as_deref(), Some("4201"));
        assert_eq!(job.snapshot.gpus, 8);
        assert_eq!(job.snapshot.exit_code, None);
        assert_eq!(job.enrolment, Enrolment::NotMentioned);
    }

    #[test]
    fn a_broken_enrolment_comment_is_reported_on_its_job() {
        let (jobs, _) = parse(&fixture()).unwrap();
        assert!(matches!(jobs[2].enrolment, Enrolment::Invalid(_)));
    }

    #[test]
    fn the_output_pattern_is_filled_in() {
        assert_eq!(
            expand_output("/logs/%x_%j.log", "7", "train", "alice"),
            "/logs/train_7.log"
        );
        assert_eq!(
            expand_output("/logs/%u/100%%-%j", "7", "t", "alice"),
            "/logs/alice/100%-7"
        );
    }

    #[test]
    fn nonsense_is_an_error_and_a_bad_job_is_a_warning() {
        assert!(parse("slurm_load_jobs error: Unable to contact slurm controller").is_err());
        let (jobs, warnings) =
            parse(r#"{"jobs": [{"name": "no id"}, {"job_id": 7, "job_state": "RUNNING", "nodes": "n[1-"}]}"#)
                .unwrap();
        assert!(jobs.is_empty());
        assert_eq!(warnings.len(), 2);
    }
    #[test]
    fn slurm_s_errors_in_place_of_the_jobs_are_no_listing_of_no_job() {
        // What 22.05's `squeue --json` prints, exit code 0, while slurmctld is down.
        let answer = r#"{"meta": {}, "errors": [{"description": "Failed while looking for jobs",
            "error_number": -1, "error": "Unspecified error", "source": "slurm_load_jobs"}], "jobs": []}"#;
        match parse(answer) {
            Err(ListingError::Failed(words)) => assert_eq!(
                words,
                "slurm_load_jobs: Failed while looking for jobs: Unspecified error"
            ),
            other => panic!("{other:?}"),
        }
    }

    /// A v0.0.42 listing as Slurm 24.11 writes it (shapes from `tests/fixtures/slurm/data_parser.md`).
    fn v42(jobs: serde_json::Value) -> String {
        serde_json::json!({
            "jobs": jobs,
            "meta": {"plugin": {"type": "", "name": "", "data_parser": "data_parser/v0.0.42", "accounting_storage": ""}},
            "errors": [], "warnings": []
        })
        .to_string()
    }

    fn noval(number: i64) -> serde_json::Value {
        serde_json::json!({"set": true, "infinite": false, "number": number})
    }

    #[test]
    fn a_v0_0_42_listing_reads_its_lists_wrapped_numbers_and_exit_objects() {
        let text = v42(serde_json::json!([
            {"job_id": 7, "name": "train", "user_name": "alice", "job_state": ["FAILED"],
             "state_reason": "NonZeroExitCode", "state_description": "", "nodes": "n[1-2]",
             "excluded_nodes": "", "restart_cnt": 1, "node_count": noval(2),
             "submit_time": noval(1_764_000_000), "start_time": noval(1_764_000_010),
             "end_time": noval(1_764_000_100),
             "exit_code": {"status": ["ERROR"], "return_code": noval(3),
                           "signal": {"id": {"set": false, "infinite": false, "number": 0}, "name": ""}},
             "standard_output": "/lab/train_7.log", "comment": "", "partition": "gpu",
             "tres_alloc_str": "cpu=4,node=2,billing=4,gres/gpu=16"},
            {"job_id": 8, "name": "train", "user_name": "alice", "job_state": ["PENDING"],
             "state_reason": "JobHeldUser", "state_description": "job requeued in held state",
             "nodes": "", "restart_cnt": 2},
            {"job_id": 9, "name": "train", "user_name": "alice", "job_state": ["PENDING"],
             "state_reason": "JobHeldUser", "state_description": "", "nodes": "", "restart_cnt": 0},
            {"job_id": 10, "name": "train", "user_name": "alice", "job_state": ["PENDING", "REQUEUED"],
             "state_reason": "BeginTime", "nodes": "", "restart_cnt": 1},
            {"job_id": 11, "name": "train", "user_name": "alice", "job_state": {"odd": true}, "nodes": ""}
        ]));
        let (jobs, warnings) = parse(&text).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        let by_id = |id: &str| {
            jobs.iter()
                .map(|job| &job.snapshot)
                .find(|job| job.job_id == id)
                .unwrap()
        };
        let failed = by_id("7");
        assert_eq!(failed.state, JobState::Failed);
        assert_eq!(failed.exit_code, Some(3));
        assert_eq!(failed.nodes, ["n1", "n2"]);
        assert_eq!(failed.gpus, 16);
        assert_eq!(failed.spec.gpus_per_node, 8);
        assert_eq!(failed.restart_count, 1);
        assert_eq!(failed.end_time.map(|t| t.timestamp()), Some(1_764_000_100));
        assert_eq!(
            failed.log_path.as_deref(),
            Some(std::path::Path::new("/lab/train_7.log"))
        );
        assert_eq!(by_id("8").hold, Some(Hold::Requeue));
        assert_eq!(by_id("9").hold, Some(Hold::User));
        let requeued = by_id("10");
        assert_eq!(requeued.state, JobState::Requeued);
        assert_eq!(requeued.state_raw, "PENDING,REQUEUED");
        assert_eq!(by_id("11").state, JobState::Unknown, "never guessed");
    }

    #[test]
    fn a_newer_data_parser_than_known_is_said_once() {
        let text = v42(serde_json::json!([])).replace("v0.0.42", "v0.0.44");
        let (_, warnings) = parse(&text).unwrap();
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("v0.0.44"), "{warnings:?}");
    }

    #[test]
    fn gpus_per_node_when_the_cluster_does_not_account_them() {
        assert_eq!(gpus_per_node("gres:gpu:2"), Some(2));
        assert_eq!(gpus_per_node("gres/gpu:a100:4"), Some(4));
        assert_eq!(gpus_per_node("gres/shard:2,gres/gpu:1"), Some(1));
        assert_eq!(gpus_per_node(""), None);
    }
}
