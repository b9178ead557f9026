//! The `jobcomp/filetxt` file (`JobCompType=jobcomp/filetxt`): slurmctld appends a line each time an
//! attempt of a job ends, a history of attempts that needs no accounting database.
//!
//! What Slurm 22.05 writes, measured (see `tests/fixtures/slurm/jobcomp_22.05.txt`):
//! - a line with the final state when an attempt ends (`FAILED`, `COMPLETED`, `CANCELLED`, `NODE_FAIL`);
//! - a line with `JobState=PENDING` when the job is requeued (`scontrol requeue` or `requeuehold`). For a
//!   running job that line is the only record of the attempt's end; for a job that had already ended it
//!   repeats that attempt (same `StartTime`, `NodeCnt=0`) after the line of its real end;
//! - nothing more when Slurm requeues a job itself after `NODE_FAIL`: the `NODE_FAIL` line is the end;
//! - for a job cancelled while pending, `NodeList=(null)` and `StartTime` = `EndTime` = the cancel.
//!
//! The same `Key=Value` format as scontrol's, so the same splitting (see [`super::scontrol`]).

use chrono::{DateTime, Local, TimeZone, Utc};

use super::hostlist;
use super::scontrol::{Fields, exit_status, local_time, user_name};
use crate::model::JobState;

/// Keys `jobcomp/filetxt` writes (22.05; the array and heterogeneous-job keys only for such jobs).
const KEYS: &[&str] = &[
    "JobId",
    "UserId",
    "GroupId",
    "Name",
    "JobState",
    "Partition",
    "TimeLimit",
    "StartTime",
    "EndTime",
    "NodeList",
    "NodeCnt",
    "ProcCnt",
    "WorkDir",
    "ReservationName",
    "Tres",
    "Account",
    "QOS",
    "WcKey",
    "Cluster",
    "SubmitTime",
    "EligibleTime",
    "ArrayJobId",
    "ArrayTaskId",
    "HetJobId",
    "HetJobOffset",
    "DerivedExitCode",
    "ExitCode",
];

/// Values that are the user's words or paths: only a known key ends them.
const FREE_TEXT: &[&str] = &["Name", "WorkDir"];

/// The keys a record is read from, each written once a line.
const READ_KEYS: &[&str] = &[
    "JobId",
    "UserId",
    "Name",
    "JobState",
    "Partition",
    "NodeList",
    "NodeCnt",
    "SubmitTime",
    "StartTime",
    "EndTime",
    "ExitCode",
    "WorkDir",
];

/// One ended attempt of a job (or, from sacct, one row of its history).
#[derive(Debug, Clone, PartialEq)]
pub struct JobCompRecord {
    pub job_id: String,
    pub user: String,
    pub name: String,
    /// The state exactly as Slurm wrote it.
    pub state_raw: String,
    /// How the attempt ended; a requeue is [`JobState::Requeued`].
    pub state: JobState,
    pub partition: Option<String>,
    /// The nodes the attempt ran on (empty if it never started).
    pub nodes: Vec<String>,
    pub node_count: u32,
    pub submit_time: Option<DateTime<Utc>>,
    pub start_time: Option<DateTime<Utc>>,
    pub end_time: Option<DateTime<Utc>>,
    /// The exit code of the batch script (`3` of `ExitCode=3:0`).
    pub exit_code: Option<i32>,
    /// The signal that ended it (`15` of `ExitCode=0:15`), if any.
    pub signal: Option<i32>,
    pub work_dir: Option<String>,
    /// Slurm's reason code (sacct gives one; the jobcomp file does not).
    pub reason: Option<String>,
}

/// Reads the file with times in the local zone (slurmctld writes its own local time, so this is right
/// when runguard runs in the controller's zone).
///
/// Lines that cannot be read, and fields that cannot, are returned as warnings.
pub fn parse(text: &str) -> (Vec<JobCompRecord>, Vec<String>) {
    parse_in(text, &Local)
}

/// Reads the file with times that are local times of `zone`.
pub fn parse_in<Tz: TimeZone>(text: &str, zone: &Tz) -> (Vec<JobCompRecord>, Vec<String>) {
    let mut records = Vec::new();
    let mut warnings = Vec::new();
    for line in text.lines().map(str::trim).filter(|line| !line.is_empty()) {
        match record_from_line(line, zone, &mut warnings) {
            Ok(record) => records.push(record),
            Err(warning) => warnings.push(warning),
        }
    }
    (records, warnings)
}

/// The part of `text` that ends in a newline. A caller that reads only what was appended since last
/// time parses this and moves its offset by its length, so a line slurmctld is still writing is read
/// whole next time rather than half now.
pub fn complete_lines(text: &str) -> &str {
    text.rfind('\n').map_or("", |end| &text[..=end])
}

/// The records of `job_id`, in the order Slurm wrote them, one per attempt.
///
/// The line a requeue writes for an attempt that had already ended (same start as the line before it)
/// is left out, so each attempt appears once. The last record may have no nodes: the job was cancelled
/// while it waited.
pub fn attempts_of<'r>(records: &'r [JobCompRecord], job_id: &str) -> Vec<&'r JobCompRecord> {
    let mut attempts: Vec<&JobCompRecord> = Vec::new();
    for record in records.iter().filter(|record| record.job_id == job_id) {
        let repeats_last = record.state == JobState::Requeued
            && record.start_time.is_some()
            && attempts
                .last()
                .is_some_and(|last| last.start_time == record.start_time);
        if !repeats_last {
            attempts.push(record);
        }
    }
    attempts
}

fn record_from_line<Tz: TimeZone>(
    line: &str,
    zone: &Tz,
    warnings: &mut Vec<String>,
) -> Result<JobCompRecord, String> {
    let fields = Fields::split(line, KEYS, FREE_TEXT);
    let job_id = match fields.first() {
        Some(("JobId", id)) if !id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()) => id,
        _ => {
            let excerpt: String = line.chars().take(80).collect();
            return Err(format!("jobcomp: not a job record: {excerpt:?}"));
        }
    };
    // A key twice comes from a job name or a work dir holding ` Key=`: not read rather than misread.
    if let Some(key) = fields.repeated(READ_KEYS) {
        return Err(format!(
            "jobcomp: job {job_id}: {key} appears twice (a value holds \" {key}=\"); not read"
        ));
    }
    let mut warn = |what: String| warnings.push(format!("jobcomp: job {job_id}: {what}"));
    let state_raw = fields.value("JobState").unwrap_or("UNKNOWN");
    // The file only gets a line when an attempt ends, so PENDING there means "put back in the queue".
    let state = match super::words::job_state(state_raw) {
        JobState::Pending => JobState::Requeued,
        state => state,
    };
    let nodes = match fields.value("NodeList").map(hostlist::expand) {
        Some(Ok(nodes)) => nodes,
        Some(Err(err)) => {
            warn(err.to_string());
            Vec::new()
        }
        None => Vec::new(),
    };
    let node_count = match fields.value("NodeCnt") {
        Some(raw) => raw.parse().unwrap_or_else(|_| {
            warn(format!("NodeCnt {raw:?} is not a number"));
            nodes.len() as u32
        }),
        None => nodes.len() as u32,
    };
    let mut time = |key: &str| match fields.value(key).map(|raw| local_time(raw, zone)) {
        Some(Ok(time)) => time,
        Some(Err(err)) => {
            warn(format!("{key}: {err}"));
            None
        }
        None => None,
    };
    let (submit_time, start_time, end_time) =
        (time("SubmitTime"), time("StartTime"), time("EndTime"));
    let status = fields.value("ExitCode").and_then(|raw| {
        let status = exit_status(raw);
        if status.is_none() {
            warn(format!("ExitCode {raw:?} is not `code:signal`"));
        }
        status
    });
    Ok(JobCompRecord {
        job_id: job_id.to_string(),
        user: fields
            .value("UserId")
            .and_then(user_name)
            .unwrap_or("")
            .to_string(),
        name: fields.value("Name").unwrap_or("").to_string(),
        state_raw: state_raw.to_string(),
        state,
        partition: fields.value("Partition").map(str::to_string),
        nodes,
        node_count,
        submit_time,
        start_time,
        end_time,
        exit_code: status.map(|(code, _)| code),
        signal: status
            .map(|(_, signal)| signal)
            .filter(|signal| *signal != 0),
        work_dir: fields.value("WorkDir").map(str::to_string),
        reason: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured on a machine whose clock runs in UTC.
    fn captured() -> (Vec<JobCompRecord>, Vec<String>) {
        let text = std::fs::read_to_string("../tests/fixtures/slurm/jobcomp_22.05.txt").unwrap();
        parse_in(&text, &Utc)
    }

    fn utc(text: &str) -> DateTime<Utc> {
        local_time(text, &Utc).unwrap().unwrap()
    }

    fn states(attempts: &[&JobCompRecord]) -> Vec<JobState> {
        attempts.iter().map(|attempt| attempt.state).collect()
    }

    #[test]
    fn every_line_of_the_real_file_reads() {
        let (records, warnings) = captured();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(records.len(), 15);
        let first = &records[0];
        assert_eq!(first.job_id, "1");
        assert_eq!(first.user, "root");
        assert_eq!(first.name, "llama3-8b-pretrain");
        assert_eq!(first.state_raw, "FAILED");
        assert_eq!(first.state, JobState::Failed);
        assert_eq!(first.partition.as_deref(), Some("gpu"));
        assert_eq!(first.nodes, ["n1", "n2"]);
        assert_eq!(first.node_count, 2);
        assert_eq!(first.exit_code, Some(3));
        assert_eq!(first.signal, None);
        assert_eq!(first.submit_time, Some(utc("2026-11-23T12:31:32")));
        assert_eq!(first.start_time, Some(utc("2026-11-23T12:31:32")));
        assert_eq!(first.end_time, Some(utc("2026-11-23T12:31:35")));
        assert_eq!(first.work_dir.as_deref(), Some("/tmp/parsers-jobs"));
    }

    #[test]
    fn a_failed_job_requeued_with_an_exclusion_has_two_attempts_on_different_nodes() {
        let (records, _) = captured();
        // Slurm wrote three lines: FAILED, then PENDING for the requeue of that ended attempt, then FAILED.
        let lines: Vec<_> = records.iter().filter(|r| r.job_id == "1").collect();
        assert_eq!(
            lines
                .iter()
                .map(|r| r.state_raw.as_str())
                .collect::<Vec<_>>(),
            ["FAILED", "PENDING", "FAILED"]
        );
        assert_eq!(lines[1].node_count, 0);
        let attempts = attempts_of(&records, "1");
        assert_eq!(states(&attempts), [JobState::Failed, JobState::Failed]);
        assert_eq!(attempts[0].nodes, ["n1", "n2"]);
        assert_eq!(attempts[1].nodes, ["n3", "n4"]);
        assert!(attempts.iter().all(|attempt| attempt.exit_code == Some(3)));
    }

    #[test]
    fn a_running_job_requeued_ends_its_attempt_with_the_pending_line() {
        let (records, _) = captured();
        let attempts = attempts_of(&records, "6");
        assert_eq!(states(&attempts), [JobState::Requeued, JobState::Completed]);
        assert_eq!(attempts[0].state_raw, "PENDING");
        assert_eq!(attempts[0].end_time, Some(utc("2026-11-23T12:32:02")));
        assert_eq!(attempts[1].start_time, Some(utc("2026-11-23T12:32:12")));
    }

    #[test]
    fn a_node_failure_is_its_own_attempt_before_the_rerun() {
        let (records, _) = captured();
        let attempts = attempts_of(&records, "7");
        assert_eq!(states(&attempts), [JobState::NodeFail, JobState::Completed]);
        assert_eq!(attempts[0].nodes, ["n1", "n2"]);
        assert_eq!(attempts[1].nodes, ["n3", "n4"]);
    }

    #[test]
    fn a_job_cancelled_while_waiting_ends_without_nodes() {
        let (records, _) = captured();
        let attempts = attempts_of(&records, "10");
        assert_eq!(states(&attempts), [JobState::Requeued, JobState::Cancelled]);
        assert!(attempts[1].nodes.is_empty(), "NodeList=(null)");
        assert_eq!(attempts[1].node_count, 0);
        let held = attempts_of(&records, "5");
        assert_eq!(states(&held), [JobState::Cancelled]);
    }

    #[test]
    fn names_and_work_dirs_with_spaces_stay_whole() {
        let (records, _) = captured();
        let eval = attempts_of(&records, "2")[0];
        assert_eq!(eval.name, "eval run");
        assert_eq!(eval.user, "cloudsdk");
        assert_eq!(eval.work_dir.as_deref(), Some("/tmp/parsers-jobs/run dir"));
        assert_eq!(eval.state, JobState::Completed);
    }

    #[test]
    fn garbled_lines_are_warnings() {
        let text = "garbage\n\
                    JobId= UserId=root(0)\n\
                    JobId=3 UserId=root(0) Name=x JobState=FAILED NodeList=n[1- NodeCnt=two \
                    StartTime=soon EndTime=Unknown ExitCode=3\n";
        let (records, warnings) = parse_in(text, &Utc);
        assert_eq!(warnings.len(), 6, "{warnings:?}");
        assert_eq!(records.len(), 1);
        let kept = &records[0];
        assert_eq!(kept.state, JobState::Failed);
        assert!(kept.nodes.is_empty());
        assert_eq!(
            (kept.start_time, kept.end_time, kept.exit_code),
            (None, None, None)
        );
    }

    #[test]
    fn a_node_list_inside_a_job_name_makes_the_record_unreadable_not_misread() {
        let line = "JobId=9 UserId=a(1) GroupId=a(1) Name=x NodeList=evil1 JobState=NODE_FAIL \
                    Partition=gpu TimeLimit=10 StartTime=2026-11-23T12:00:00 \
                    EndTime=2026-11-23T12:05:00 NodeList=n1 NodeCnt=1 ProcCnt=8 WorkDir=/w\n";
        let (records, warnings) = parse_in(line, &Utc);
        assert!(records.is_empty(), "{records:?}");
        assert!(
            warnings[0].contains("job 9: NodeList appears twice"),
            "{warnings:?}"
        );
    }

    #[test]
    fn only_complete_lines_are_taken_from_a_growing_file() {
        assert_eq!(complete_lines("JobId=1 a\nJobId=2 b"), "JobId=1 a\n");
        assert_eq!(complete_lines("JobId=1 a\n"), "JobId=1 a\n");
        assert_eq!(complete_lines("JobId=1 half"), "");
    }
}
