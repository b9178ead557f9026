//! A job's history from `sacct`, where the cluster keeps accounting (slurmdbd), as the same records the
//! jobcomp file gives.
//!
//! Without slurmdbd, sacct answers "Slurm accounting storage is disabled" and exits 1: that is "no
//! history here", not a failure. sacct 22.05 has no `Restarts` field: with `--duplicates` each attempt of
//! a requeued job is a row of its own, so the attempts are counted from the rows.

use chrono::{Local, TimeZone};

use super::hostlist;
use super::jobcomp::JobCompRecord;
use super::scontrol::{exit_status, local_time};

/// The fields asked for, in the order of the columns read back. All are in the field list of sacct
/// 22.05 (`sacct --helpformat` itself needs slurmdbd; the list is in sacct(1) and the binary).
pub const FORMAT: [&str; 12] = [
    "JobID",
    "JobName",
    "User",
    "Partition",
    "State",
    "ExitCode",
    "NodeList",
    "NNodes",
    "Submit",
    "Start",
    "End",
    "Reason",
];

/// What sacct prints (to stderr) when the cluster keeps no accounting.
const ACCOUNTING_DISABLED: &str = "accounting storage is disabled";

/// What sacct prints when slurmdbd is configured but cannot be reached.
const DATABASE_UNREACHABLE: &str = "Problem talking to the database";

/// sacct ran but did not answer with a history.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SacctError {
    /// Accounting is configured but slurmdbd did not answer; worth asking again later.
    #[error("sacct could not reach the accounting database: {0}")]
    DatabaseUnreachable(String),
    #[error("sacct failed: {0}")]
    Failed(String),
}

/// A history read from sacct: the rows, and warnings for rows that could not be read.
pub type History = (Vec<JobCompRecord>, Vec<String>);

/// The command that lists every attempt of `job_id`: one `|`-separated row per attempt of the
/// allocation (`--allocations` leaves out the steps, `--duplicates` keeps the attempts before a requeue).
pub fn argv(job_id: &str) -> Vec<String> {
    [
        "sacct",
        "--parsable2",
        "--noheader",
        "--allocations",
        "--duplicates",
        "--jobs",
        job_id,
    ]
    .into_iter()
    .map(str::to_string)
    .chain([format!("--format={}", FORMAT.join(","))])
    .collect()
}

/// Reads what [`argv`] answered: `Ok(None)` when the cluster keeps no accounting, the history when it
/// does, an error when sacct failed otherwise.
pub fn read_answer(
    success: bool,
    stdout: &str,
    stderr: &str,
) -> Result<Option<History>, SacctError> {
    if stderr.contains(ACCOUNTING_DISABLED) || stdout.contains(ACCOUNTING_DISABLED) {
        return Ok(None);
    }
    if !success {
        let message = stderr.trim().to_string();
        return Err(if message.contains(DATABASE_UNREACHABLE) {
            SacctError::DatabaseUnreachable(message)
        } else {
            SacctError::Failed(message)
        });
    }
    Ok(Some(parse(stdout)))
}

/// Reads rows with times in the local zone (sacct prints the client's local time).
pub fn parse(text: &str) -> History {
    parse_in(text, &Local)
}

/// Reads rows whose times are local times of `zone`.
pub fn parse_in<Tz: TimeZone>(text: &str, zone: &Tz) -> History {
    let mut records = Vec::new();
    let mut warnings = Vec::new();
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        match record_from_row(line, zone, &mut warnings) {
            Ok(record) => records.push(record),
            Err(warning) => warnings.push(warning),
        }
    }
    (records, warnings)
}

fn record_from_row<Tz: TimeZone>(
    row: &str,
    zone: &Tz,
    warnings: &mut Vec<String>,
) -> Result<JobCompRecord, String> {
    let columns: Vec<&str> = row.split('|').collect();
    // A `|` in a job name or reason would shift every column after it; such a row is not guessed at.
    let [
        job_id,
        name,
        user,
        partition,
        state,
        exit_code,
        node_list,
        node_count,
        submit,
        start,
        end,
        reason,
    ] = columns[..]
    else {
        return Err(format!(
            "sacct: a row of {} columns where {} were asked for: {row:?}",
            columns.len(),
            FORMAT.len()
        ));
    };
    if job_id.is_empty() {
        return Err(format!("sacct: a row without a job id: {row:?}"));
    }
    let mut warn = |what: String| warnings.push(format!("sacct: job {job_id}: {what}"));
    let nodes = hostlist::expand(node_list).unwrap_or_else(|err| {
        warn(err.to_string());
        Vec::new()
    });
    let node_count = match node_count.parse::<u32>() {
        Ok(count) => count,
        Err(_) => {
            warn(format!("NNodes {node_count:?} is not a number"));
            nodes.len() as u32
        }
    };
    let mut time = |key: &str, raw: &str| {
        local_time(raw, zone).unwrap_or_else(|err| {
            warn(format!("{key}: {err}"));
            None
        })
    };
    let (submit_time, start_time, end_time) = (
        time("Submit", submit),
        time("Start", start),
        time("End", end),
    );
    let status = exit_status(exit_code);
    if status.is_none() && !exit_code.is_empty() {
        warn(format!("ExitCode {exit_code:?} is not `code:signal`"));
    }
    let optional = |text: &str| (!text.is_empty()).then(|| text.to_string());
    Ok(JobCompRecord {
        job_id: job_id.to_string(),
        user: user.to_string(),
        name: name.to_string(),
        state_raw: state.to_string(),
        state: super::words::job_state(state),
        partition: optional(partition),
        nodes,
        node_count,
        submit_time,
        start_time,
        end_time,
        exit_code: status.map(|(code, _)| code),
        signal: status
            .map(|(_, signal)| signal)
            .filter(|signal| *signal != 0),
        work_dir: None,
        reason: optional(reason).filter(|reason| reason != "None"),
    })
}

#[cfg(test)]
mod tests {
    use chrono::{DateTime, Utc};

    use super::*;
    use crate::backend::slurm::jobcomp::attempts_of;
    use crate::model::JobState;

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(format!("../tests/fixtures/slurm/{name}")).unwrap()
    }

    fn utc(text: &str) -> DateTime<Utc> {
        local_time(text, &Utc).unwrap().unwrap()
    }

    #[test]
    fn the_command_asks_for_every_attempt_of_one_allocation() {
        assert_eq!(
            argv("4201"),
            [
                "sacct",
                "--parsable2",
                "--noheader",
                "--allocations",
                "--duplicates",
                "--jobs",
                "4201",
                "--format=JobID,JobName,User,Partition,State,ExitCode,NodeList,NNodes,Submit,Start,End,Reason",
            ]
        );
    }

    #[test]
    fn a_cluster_without_accounting_has_no_history_and_that_is_not_an_error() {
        let stderr = fixture("sacct_22.05_accounting_disabled.stderr");
        assert_eq!(read_answer(false, "", &stderr), Ok(None));
    }

    #[test]
    fn an_unreachable_database_is_an_error_worth_retrying() {
        let stderr = fixture("sacct_22.05_slurmdbd_unreachable.stderr");
        assert!(matches!(
            read_answer(false, "", &stderr),
            Err(SacctError::DatabaseUnreachable(_))
        ));
        assert!(matches!(
            read_answer(
                false,
                "",
                "sacct: error: Invalid field requested: \"Restarts\""
            ),
            Err(SacctError::Failed(_))
        ));
    }

    #[test]
    fn an_unknown_job_is_an_empty_history() {
        assert_eq!(
            read_answer(true, "", ""),
            Ok(Some((Vec::new(), Vec::new())))
        );
    }

    #[test]
    fn every_attempt_of_a_requeued_job_is_a_row() {
        let (records, warnings) = parse_in(&fixture("sacct_handwritten.txt"), &Utc);
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(records.len(), 9);
        let failed = attempts_of(&records, "1");
        assert_eq!(failed.len(), 2);
        assert_eq!(failed[0].state, JobState::Failed);
        assert_eq!(failed[0].nodes, ["n1", "n2"]);
        assert_eq!(failed[1].nodes, ["n3", "n4"]);
        assert_eq!(failed[1].exit_code, Some(3));
        assert_eq!(failed[1].reason.as_deref(), Some("NonZeroExitCode"));
        assert_eq!(failed[1].start_time, Some(utc("2026-11-23T12:31:47")));
        let requeued = attempts_of(&records, "6");
        assert_eq!(requeued[0].state, JobState::Requeued);
        assert_eq!(requeued[1].state, JobState::Completed);
        assert_eq!(requeued[1].reason, None, "Reason=None");
        let node_fail = attempts_of(&records, "7");
        assert_eq!(node_fail[0].state, JobState::NodeFail);
    }

    #[test]
    fn cancelled_running_and_pending_rows_read() {
        let (records, _) = parse_in(&fixture("sacct_handwritten.txt"), &Utc);
        let cancelled = attempts_of(&records, "9")[0];
        assert_eq!(cancelled.state_raw, "CANCELLED by 0");
        assert_eq!(cancelled.state, JobState::Cancelled);
        assert_eq!(cancelled.signal, Some(15));
        let running = attempts_of(&records, "11")[0];
        assert_eq!(running.state, JobState::Running);
        assert_eq!(running.name, "eval run");
        assert_eq!(running.end_time, None, "End=Unknown");
        let pending = attempts_of(&records, "12")[0];
        assert_eq!(pending.state, JobState::Pending);
        assert!(pending.nodes.is_empty(), "None assigned");
        assert_eq!(pending.start_time, None);
        assert_eq!(pending.reason.as_deref(), Some("Dependency"));
    }

    #[test]
    fn rows_with_the_wrong_shape_are_warnings() {
        let text = "1|a|root\n\
                    |x|root|gpu|FAILED|3:0|n1|1|Unknown|Unknown|Unknown|None\n\
                    2|a|b|c|FAILED|three|n[1-|x|yesterday|Unknown|Unknown|None\n";
        let (records, warnings) = parse_in(text, &Utc);
        assert_eq!(warnings.len(), 6, "{warnings:?}");
        assert_eq!(records.len(), 1);
        assert_eq!(records[0].state, JobState::Failed);
        assert_eq!(records[0].exit_code, None);
    }
}
