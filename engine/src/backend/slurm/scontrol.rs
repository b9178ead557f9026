//! `scontrol show job -o --details` into the same [`SlurmJob`] as `squeue --json`: the fallback when the
//! JSON plugin is missing (older Slurm) or broken.
//!
//! scontrol prints one line per job of `Key=Value` pairs separated by spaces, and escapes nothing: the
//! comment's JSON, job names, paths and reasons may hold spaces and `=`. A line is therefore cut only
//! before a key scontrol is known to print (and, outside free-text values, before anything shaped like a
//! key). The fields are then laid out in the v0.0.38 JSON shape, so that one mapping serves both listings.
//!
//! Times are the client's local time (`2026-11-23T12:31:32`); run scontrol with `SLURM_TIME_FORMAT`
//! unset or `standard`, since other formats are not read.
//!
//! The splitting and the value conventions (`(null)`, `Unknown`, `3:0`, `alice(1000)`) are shared with
//! `jobcomp/filetxt` and sacct, which write the same way.

use chrono::{DateTime, Local, NaiveDateTime, TimeZone, Utc};
use serde_json::{Map, Value};

use super::squeue::{self, SlurmJob};

/// Keys `scontrol show job -o --details` prints: every key of Slurm 22.05's output, including the ones
/// it prints only for array, heterogeneous, reserved, federated or GPU jobs, and keys of newer versions.
const KEYS: &[&str] = &[
    "JobId",
    "ArrayJobId",
    "ArrayTaskId",
    "ArrayTaskThrottle",
    "HetJobId",
    "HetJobOffset",
    "HetJobIdSet",
    "JobName",
    "UserId",
    "GroupId",
    "MCS_label",
    "Priority",
    "Nice",
    "Account",
    "QOS",
    "WCKey",
    "JobState",
    "Reason",
    "Dependency",
    "Requeue",
    "Restarts",
    "BatchFlag",
    "Reboot",
    "ExitCode",
    "DerivedExitCode",
    "RunTime",
    "TimeLimit",
    "TimeMin",
    "SubmitTime",
    "EligibleTime",
    "AccrueTime",
    "StartTime",
    "EndTime",
    "Deadline",
    "PreemptEligibleTime",
    "PreemptTime",
    "ResizeTime",
    "SuspendTime",
    "SecsPreSuspend",
    "LastSchedEval",
    "Scheduler",
    "Partition",
    "AllocNode:Sid",
    "ReqNodeList",
    "ExcNodeList",
    "NodeList",
    "SchedNodeList",
    "BatchHost",
    "NumNodes",
    "NumCPUs",
    "NumTasks",
    "CPUs/Task",
    "ReqB:S:C:T",
    "TRES",
    "ReqTRES",
    "AllocTRES",
    "Socks/Node",
    "NtasksPerN:B:S:C",
    "CoreSpec",
    "ThreadSpec",
    "JOB_GRES",
    "Nodes",
    "CPU_IDs",
    "Mem",
    "GRES",
    "MinCPUsNode",
    "MinMemoryNode",
    "MinMemoryCPU",
    "MinTmpDiskNode",
    "Features",
    "ClusterFeatures",
    "DelayBoot",
    "Reservation",
    "OverSubscribe",
    "Contiguous",
    "Licenses",
    "Network",
    "Command",
    "WorkDir",
    "AdminComment",
    "SystemComment",
    "Comment",
    "StdErr",
    "StdIn",
    "StdOut",
    "BurstBuffer",
    "BurstBufferState",
    "CpuFreqMin",
    "CpuFreqMax",
    "CpuFreqGov",
    "Power",
    "CpusPerTres",
    "MemPerTres",
    "TresBind",
    "TresFreq",
    "TresPerJob",
    "TresPerNode",
    "TresPerSocket",
    "TresPerTask",
    "NtasksPerTRES",
    "MailUser",
    "MailType",
    "Switches",
    "Wait-for-Switch",
    "FedOrigin",
    "FedViableSiblings",
    "FedActiveSiblings",
    "ResvPorts",
    "Container",
    "ContainerID",
    "Extra",
    "CrontabSpec",
    "SelinuxContext",
];

/// Keys whose values are free text (the user's or an admin's words, paths): only a known key ends them,
/// so a comment such as `step Foo=1` stays whole.
/// The keys a job is read from, each printed once a line.
const READ_KEYS: &[&str] = &[
    "JobId",
    "JobName",
    "JobState",
    "Reason",
    "NodeList",
    "ExcNodeList",
    "ReqNodeList",
    "Comment",
    "Partition",
    "Command",
    "WorkDir",
    "Dependency",
    "Reservation",
    "UserId",
    "StdOut",
    "TRES",
    "AllocTRES",
    "ReqTRES",
    "NumNodes",
    "Restarts",
    "NumCPUs",
    "SubmitTime",
    "StartTime",
    "EndTime",
    "ExitCode",
];

const FREE_TEXT: &[&str] = &[
    "JobName",
    "Reason",
    "Command",
    "WorkDir",
    "AdminComment",
    "SystemComment",
    "Comment",
    "StdErr",
    "StdIn",
    "StdOut",
    "BurstBuffer",
    "Container",
    "Extra",
];

/// Reads a listing with times in the local zone (scontrol prints the client's local time).
///
/// Lines that cannot be read, and fields of a job that cannot, are returned as warnings; a job with an
/// unreadable field is still returned without that field.
pub fn parse(text: &str) -> (Vec<SlurmJob>, Vec<String>) {
    parse_in(text, &Local)
}

/// Reads a listing whose times are local times of `zone`.
pub fn parse_in<Tz: TimeZone>(text: &str, zone: &Tz) -> (Vec<SlurmJob>, Vec<String>) {
    let mut jobs = Vec::new();
    let mut warnings = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        // What scontrol prints instead of a listing when the controller holds no job.
        if line.is_empty() || line == "No jobs in the system" {
            continue;
        }
        match job_from_line(line, zone, &mut warnings) {
            Ok(job) => jobs.push(job),
            Err(warning) => warnings.push(warning),
        }
    }
    (jobs, warnings)
}

fn job_from_line<Tz: TimeZone>(
    line: &str,
    zone: &Tz,
    warnings: &mut Vec<String>,
) -> Result<SlurmJob, String> {
    let fields = Fields::split(line, KEYS, FREE_TEXT);
    let job_id: u64 = match fields.first() {
        Some(("JobId", id)) => id
            .parse()
            .map_err(|_| format!("scontrol: job id {id:?} is not a number"))?,
        _ => return Err(format!("scontrol: not a job line: {:?}", excerpt(line))),
    };
    // `sbatch -J "x NodeList=n9"` must not move the job onto n9: an ambiguous job is not read.
    if let Some(key) = fields.repeated(READ_KEYS) {
        return Err(format!(
            "scontrol: job {job_id}: {key} appears twice (a value holds \" {key}=\"), so which \
             one scontrol wrote cannot be told; the job is not read"
        ));
    }
    let mut json = Map::new();
    json.insert("job_id".into(), job_id.into());
    let mut put_text = |key: &str, field: &str| {
        if let Some(value) = fields.value(field) {
            json.insert(key.into(), value.into());
        }
    };
    put_text("name", "JobName");
    put_text("job_state", "JobState");
    put_text("state_reason", "Reason");
    put_text("nodes", "NodeList");
    put_text("excluded_nodes", "ExcNodeList");
    put_text("comment", "Comment");
    put_text("partition", "Partition");
    put_text("command", "Command");
    put_text("current_working_directory", "WorkDir");
    put_text("dependency", "Dependency");
    put_text("resv_name", "Reservation");
    put_text("required_nodes", "ReqNodeList");
    if let Some(user) = fields.value("UserId").and_then(user_name) {
        json.insert("user_name".into(), user.into());
    }
    // scontrol has already filled in `%j` and friends; doubling `%` keeps the mapping's own expansion
    // from changing a path that holds a literal percent sign.
    if let Some(path) = fields.value("StdOut") {
        json.insert("standard_output".into(), path.replace('%', "%%").into());
    }
    // 22.05 prints one TRES: what was allocated once the job has nodes, what was asked for before.
    // Newer versions print both under their own names.
    let tres = fields.value("TRES");
    let (allocated, requested) = match fields.value("NodeList") {
        Some(_) => (tres, None),
        None => (None, tres),
    };
    if let Some(tres) = fields.value("AllocTRES").or(allocated) {
        json.insert("tres_alloc_str".into(), tres.into());
    }
    if let Some(tres) = fields.value("ReqTRES").or(requested) {
        json.insert("tres_req_str".into(), tres.into());
    }

    // `N/A` until the job is laid out: the layout is then unknown, which is no error.
    if let Some(tasks) = fields.value("NumTasks").and_then(leading_number) {
        json.insert("tasks".into(), tasks.into());
    }
    let mut warn = |what: String| warnings.push(format!("scontrol: job {job_id}: {what}"));
    for (key, field) in [
        ("node_count", "NumNodes"),
        ("restart_cnt", "Restarts"),
        ("cpus", "NumCPUs"),
    ] {
        if let Some(raw) = fields.value(field) {
            match leading_number(raw) {
                Some(number) => {
                    json.insert(key.into(), number.into());
                }
                None => warn(format!("{field} {raw:?} is not a number")),
            }
        }
    }
    for (key, field) in [
        ("submit_time", "SubmitTime"),
        ("start_time", "StartTime"),
        ("end_time", "EndTime"),
    ] {
        match fields.value(field).map(|raw| local_time(raw, zone)) {
            Some(Ok(Some(time))) => {
                json.insert(key.into(), time.timestamp().into());
            }
            Some(Err(err)) => warn(format!("{field}: {err}")),
            Some(Ok(None)) | None => {}
        }
    }
    if let Some(raw) = fields.value("ExitCode") {
        match exit_status(raw) {
            // The JSON carries a wait status (exit code in the high byte, signal in the low one).
            Some((code, signal)) => {
                json.insert("exit_code".into(), ((code << 8) | signal).into());
            }
            None => warn(format!("ExitCode {raw:?} is not `code:signal`")),
        }
    }
    squeue::job_from_value(&Value::Object(json)).map_err(|err| format!("scontrol: {err}"))
}

/// The start of a line, for a warning.
fn excerpt(line: &str) -> String {
    line.chars().take(80).collect()
}

/// The `Key=Value` pairs of one line, in order; a key may repeat (`--details` prints `Nodes=`, `CPU_IDs=`
/// and `Mem=` once per group of nodes).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Fields<'l> {
    pairs: Vec<(&'l str, &'l str)>,
}

impl<'l> Fields<'l> {
    /// Cuts `line` before each key of `known`, and before any other key-shaped word unless the value
    /// being read is one of `free_text`. A line that does not start with a key has no pairs.
    pub(crate) fn split(line: &'l str, known: &[&str], free_text: &[&str]) -> Self {
        let line = line.trim();
        let mut pairs = Vec::new();
        let Some((mut key, mut value_start)) = key_at(line, 0) else {
            return Self { pairs };
        };
        let bytes = line.as_bytes();
        let mut at = value_start;
        while at < bytes.len() {
            // A key starts a word: right after a space that is not followed by another space.
            let word_starts = bytes[at] == b' ' && bytes.get(at + 1).is_some_and(|b| *b != b' ');
            if word_starts
                && let Some((next_key, next_value)) = key_at(line, at + 1)
                && (known.contains(&next_key) || !free_text.contains(&key))
            {
                pairs.push((key, line[value_start..at].trim_end()));
                (key, value_start, at) = (next_key, next_value, next_value);
                continue;
            }
            at += 1;
        }
        pairs.push((key, line[value_start..].trim_end()));
        Self { pairs }
    }

    /// The first pair of the line.
    pub(crate) fn first(&self) -> Option<(&'l str, &'l str)> {
        self.pairs.first().copied()
    }

    /// The value of the first `key`, as written (possibly empty or `(null)`).
    pub(crate) fn raw(&self, key: &str) -> Option<&'l str> {
        self.pairs
            .iter()
            .find(|(name, _)| *name == key)
            .map(|(_, value)| *value)
    }

    /// The value of the first `key`, unless Slurm wrote it as empty or `(null)`.
    pub(crate) fn value(&self, key: &str) -> Option<&'l str> {
        self.raw(key).filter(|value| !is_null(value))
    }

    /// The first of `keys` that the line holds more than once. Slurm prints each of them once, so a
    /// second one comes from a value holding ` Key=` (a job name, a comment, a path the user chose),
    /// and which of the two Slurm wrote cannot be told.
    pub(crate) fn repeated(&self, keys: &[&'l str]) -> Option<&'l str> {
        keys.iter().copied().find(|key| {
            self.pairs
                .iter()
                .filter(|(name, _)| name == key)
                .nth(1)
                .is_some()
        })
    }
}

/// Slurm's ways of writing "nothing".
fn is_null(value: &str) -> bool {
    value.is_empty() || value == "(null)"
}

/// A key (`NodeList`, `AllocNode:Sid`, `CPUs/Task`, `Wait-for-Switch`) starting at `start` and directly
/// followed by `=`: the key and where its value starts.
fn key_at(line: &str, start: usize) -> Option<(&str, usize)> {
    let rest = line.get(start..)?;
    let length = rest
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b':' | b'/' | b'-'))
        .count();
    let key = &rest[..length];
    let shaped = key.starts_with(|c: char| c.is_ascii_uppercase());
    (shaped && rest.as_bytes().get(length) == Some(&b'=')).then_some((key, start + length + 1))
}

/// The user name of `alice(1000)`.
pub(crate) fn user_name(value: &str) -> Option<&str> {
    let name = value.rsplit_once('(').map_or(value, |(name, _)| name);
    (!is_null(name)).then_some(name)
}

/// The digits a count starts with: `2`, or the minimum of a range such as `1-2`.
fn leading_number(value: &str) -> Option<i64> {
    let digits = value.len() - value.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    value[..digits].parse().ok()
}

/// `3:0` (exit code 3, no signal) or `0:15` (killed by signal 15) as (code, signal).
pub(crate) fn exit_status(value: &str) -> Option<(i32, i32)> {
    let (code, signal) = value.split_once(':')?;
    let (code, signal) = (code.parse().ok()?, signal.parse().ok()?);
    ((0..=255).contains(&code) && (0..=255).contains(&signal)).then_some((code, signal))
}

/// A time as Slurm prints it, read in `zone`: `Ok(None)` for the words Slurm uses for "no time"
/// (`Unknown`, `None`, `N/A`), an error for anything else that is not a time.
pub(crate) fn local_time<Tz: TimeZone>(
    value: &str,
    zone: &Tz,
) -> Result<Option<DateTime<Utc>>, String> {
    if is_null(value)
        || ["unknown", "none", "n/a"]
            .iter()
            .any(|word| value.eq_ignore_ascii_case(word))
    {
        return Ok(None);
    }
    let naive = NaiveDateTime::parse_from_str(value, "%Y-%m-%dT%H:%M:%S")
        .map_err(|_| format!("{value:?} is not a time (YYYY-MM-DDTHH:MM:SS)"))?;
    // A time that falls in a daylight-saving change: the earlier reading of an ambiguous one; one that
    // does not exist locally is reported.
    zone.from_local_datetime(&naive)
        .earliest()
        .map(|time| Some(time.with_timezone(&Utc)))
        .ok_or_else(|| format!("{value:?} does not exist in the local time zone"))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::backend::slurm::comment::Enrolment;
    use crate::model::JobState;

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(format!("../tests/fixtures/slurm/{name}")).unwrap()
    }

    /// The fixtures were captured on a machine whose clock runs in UTC.
    fn captured(name: &str) -> (Vec<SlurmJob>, Vec<String>) {
        parse_in(&fixture(name), &Utc)
    }

    fn utc(text: &str) -> DateTime<Utc> {
        local_time(text, &Utc).unwrap().unwrap()
    }

    fn job<'j>(jobs: &'j [SlurmJob], id: &str) -> &'j SlurmJob {
        jobs.iter().find(|job| job.snapshot.job_id == id).unwrap()
    }

    #[test]
    fn a_failed_job_requeued_with_an_exclusion_reads_whole() {
        let (jobs, warnings) = captured("scontrol_22.05.txt");
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(jobs.len(), 6);
        let failed = job(&jobs, "1");
        let snapshot = &failed.snapshot;
        assert_eq!(snapshot.name, "llama3-8b-pretrain");
        assert_eq!(snapshot.user, "root");
        assert_eq!(snapshot.state, JobState::Failed);
        assert_eq!(snapshot.reason.as_deref(), Some("NonZeroExitCode"));
        assert_eq!(snapshot.exit_code, Some(3));
        assert_eq!(snapshot.restart_count, 1);
        assert_eq!(snapshot.nodes, ["n3", "n4"]);
        assert_eq!(snapshot.excluded_nodes, ["n2"]);
        assert_eq!(snapshot.spec.nodes, 2);
        assert_eq!(snapshot.submit_time, Some(utc("2026-11-23T12:31:46")));
        assert_eq!(snapshot.start_time, Some(utc("2026-11-23T12:31:47")));
        assert_eq!(snapshot.end_time, Some(utc("2026-11-23T12:31:50")));
        assert_eq!(
            snapshot.log_path.as_deref(),
            Some(Path::new("/tmp/parsers-jobs/llama3-8b-pretrain_1.log"))
        );
        assert_eq!(failed.partition.as_deref(), Some("gpu"));
        assert_eq!(snapshot.limits.max_requeue_times, Some(3));
        assert!(matches!(failed.enrolment, Enrolment::Enrolled { .. }));
    }

    #[test]
    fn a_comment_with_spaces_and_equals_signs_stays_whole() {
        let (jobs, _) = captured("scontrol_22.05.txt");
        let running = job(&jobs, "3");
        assert_eq!(running.snapshot.state, JobState::Running);
        assert_eq!(running.snapshot.nodes, ["n1", "n2"]);
        assert_eq!(running.snapshot.end_time, None, "EndTime=Unknown");
        assert_eq!(running.snapshot.exit_code, None, "still running");
        assert_eq!(running.enrolment, Enrolment::NotMentioned);
        let line = fixture("scontrol_22.05.txt");
        let fields = Fields::split(
            line.lines().find(|l| l.starts_with("JobId=3 ")).unwrap(),
            KEYS,
            FREE_TEXT,
        );
        assert_eq!(fields.value("Comment"), Some("note: lr=3e-4 bs=8 (sweep)"));
        assert_eq!(
            fields.value("StdOut"),
            Some("/tmp/parsers-jobs/slurm-3.out")
        );
    }

    #[test]
    fn a_name_and_a_work_dir_with_spaces_stay_whole() {
        let (jobs, _) = captured("scontrol_22.05.txt");
        let completed = &job(&jobs, "2").snapshot;
        assert_eq!(completed.name, "eval run");
        assert_eq!(completed.user, "cloudsdk");
        assert_eq!(completed.state, JobState::Completed);
        assert_eq!(completed.exit_code, Some(0));
        assert_eq!(
            completed.spec.work_dir.as_deref(),
            Some("/tmp/parsers-jobs/run dir")
        );
        assert_eq!(
            completed.log_path.as_deref(),
            Some(Path::new("/tmp/parsers-jobs/run dir/eval run_2.log"))
        );
    }

    #[test]
    fn pending_jobs_have_no_nodes_and_name_their_upstream() {
        let (jobs, _) = captured("scontrol_22.05.txt");
        let dependent = &job(&jobs, "4").snapshot;
        assert_eq!(dependent.state, JobState::Pending);
        assert_eq!(dependent.reason.as_deref(), Some("Dependency"));
        assert_eq!(dependent.spec.dependency.as_deref(), Some("3"));
        assert!(dependent.nodes.is_empty(), "NodeList= is empty");
        assert_eq!(dependent.start_time, None, "StartTime=Unknown");
        let held = &job(&jobs, "5").snapshot;
        assert_eq!(held.reason.as_deref(), Some("JobHeldUser"));
        assert_eq!(held.spec.command, None, "Command=(null) for --wrap");
    }

    #[test]
    fn a_job_requeued_after_a_node_failure_waits_on_begin_time() {
        let (jobs, warnings) = captured("scontrol_22.05_after_node_fail.txt");
        assert!(warnings.is_empty(), "{warnings:?}");
        let victim = job(&jobs, "7");
        assert_eq!(victim.snapshot.state, JobState::Pending);
        assert_eq!(victim.snapshot.reason.as_deref(), Some("BeginTime"));
        assert_eq!(victim.snapshot.restart_count, 1);
        assert!(victim.snapshot.nodes.is_empty());
        // For a pending job Slurm gives the earliest start it expects.
        assert_eq!(victim.snapshot.start_time, Some(utc("2026-11-23T12:34:52")));
    }

    #[test]
    fn a_job_killed_by_a_signal_reports_the_signal_as_the_json_would() {
        let (jobs, warnings) = captured("scontrol_22.05_all_ended.txt");
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(jobs.len(), 10);
        let cancelled = &job(&jobs, "9").snapshot;
        assert_eq!(cancelled.state, JobState::Cancelled);
        assert_eq!(cancelled.exit_code, Some(15), "ExitCode=0:15");
        let requeued = &job(&jobs, "10").snapshot;
        assert_eq!(requeued.excluded_nodes, ["n1"]);
        assert_eq!(requeued.restart_count, 1);
    }

    #[test]
    fn scontrol_and_squeue_json_agree_on_the_same_jobs() {
        let (from_scontrol, _) = captured("scontrol_22.05.txt");
        let (from_json, _) = squeue::parse(&fixture("squeue_22.05_beside_scontrol.json")).unwrap();
        assert_eq!(from_scontrol.len(), from_json.len());
        for (text, json) in from_scontrol.iter().zip(&from_json) {
            let (mut text, mut json) = (text.clone(), json.clone());
            // Known differences: the JSON gives a running job's end as start + time limit, where
            // scontrol says Unknown; and it leaves out the default output path that scontrol prints.
            if json.snapshot.state == JobState::Running {
                json.snapshot.end_time = None;
            }
            if json.snapshot.log_path.is_none() {
                text.snapshot.log_path = None;
            }
            // scontrol show job does not name the cluster.
            text.snapshot
                .spec
                .cluster
                .clone_from(&json.snapshot.spec.cluster);
            assert_eq!(text, json, "job {}", text.snapshot.job_id);
        }
    }

    #[test]
    fn no_jobs_is_an_empty_listing() {
        let (jobs, warnings) = captured("scontrol_22.05_no_jobs.txt");
        assert!(jobs.is_empty());
        assert!(warnings.is_empty());
    }

    #[test]
    fn garbled_lines_are_warnings_and_do_not_hide_the_good_ones() {
        let listing = fixture("scontrol_22.05.txt");
        let good = listing.lines().next().unwrap();
        let text = [
            "slurm_load_jobs error: Invalid job id specified",
            "JobId=abc JobName=x JobState=RUNNING",
            "JobId=8 JobName=bad-nodes JobState=RUNNING NodeList=n[1-",
            // Cut short before its paths.
            &good[..good.find(" Command=").unwrap()],
            good,
        ]
        .join("\n");
        let (jobs, warnings) = parse_in(&text, &Utc);
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        // A line cut short is still a job, with what it has.
        assert_eq!(jobs.len(), 2);
        assert!(jobs.iter().all(|job| job.snapshot.job_id == "1"));
        assert!(jobs[1].snapshot.log_path.is_some());
        assert!(jobs[0].snapshot.log_path.is_none());
    }

    #[test]
    fn an_unreadable_field_is_a_warning_on_a_job_that_is_kept() {
        let (jobs, warnings) = parse_in(
            "JobId=9 JobName=x UserId=bob(1001) JobState=FAILED Restarts=many ExitCode=3 \
             SubmitTime=yesterday StartTime=None EndTime=2026-11-23T12:00:00",
            &Utc,
        );
        assert_eq!(warnings.len(), 3, "{warnings:?}");
        let job = &jobs[0].snapshot;
        assert_eq!(job.user, "bob");
        assert_eq!(job.restart_count, 0);
        assert_eq!(job.exit_code, None);
        assert_eq!(job.submit_time, None);
        assert_eq!(job.end_time, Some(utc("2026-11-23T12:00:00")));
    }

    #[test]
    fn a_key_written_inside_a_job_name_or_comment_makes_the_job_unreadable_not_misread() {
        let line = "JobId=7 JobName=x NodeList=evil[1-2] UserId=a(1) JobState=RUNNING \
                    NodeList=n[1-2] Comment=hi StdOut=/etc/shadow WorkDir=/w StdOut=/w/real.log";
        let (jobs, warnings) = parse_in(line, &Utc);
        assert!(jobs.is_empty(), "{jobs:?}");
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].contains("job 7: NodeList appears twice"),
            "{warnings:?}"
        );
        let comment_only = "JobId=8 JobName=x NodeList=n[1-2] Comment=see StdOut=/etc/shadow \
                            StdOut=/w/real.log";
        let (jobs, warnings) = parse_in(comment_only, &Utc);
        assert!(jobs.is_empty() && warnings[0].contains("StdOut appears twice"));
    }

    #[test]
    fn values_are_cut_only_before_keys() {
        let fields = Fields::split(
            "JobId=1 JobName=a b=c Reason=waiting on Foo=1 Dependency=(null) \
             NewKey=x y Comment={\"k\": \"v w\"} Odd=1  StdOut=/p/100% done.log Power= ",
            KEYS,
            FREE_TEXT,
        );
        assert_eq!(fields.value("JobName"), Some("a b=c"));
        assert_eq!(fields.value("Reason"), Some("waiting on Foo=1"));
        assert_eq!(fields.raw("Dependency"), Some("(null)"));
        assert_eq!(fields.value("Dependency"), None);
        // An unknown key outside free text still gets a pair of its own.
        assert_eq!(fields.value("NewKey"), Some("x y"));
        assert_eq!(fields.value("Comment"), Some("{\"k\": \"v w\"} Odd=1"));
        assert_eq!(fields.value("StdOut"), Some("/p/100% done.log"));
        assert_eq!(fields.raw("Power"), Some(""));
    }

    #[test]
    fn gpus_come_from_the_tres_allocated_or_asked_for() {
        // The test cluster has no GPUs; these lines are the captured ones with a GPU TRES written in.
        let (jobs, warnings) = parse_in(
            "JobId=1 JobName=a JobState=RUNNING NodeList=n[1-2] NumNodes=2 \
             TRES=cpu=4,node=2,billing=4,gres/gpu=16 Socks/Node=*\n\
             JobId=2 JobName=b JobState=PENDING NodeList= NumNodes=1 \
             TRES=cpu=1,mem=1M,node=1,billing=1,gres/gpu=8 Socks/Node=*",
            &Utc,
        );
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(jobs[0].snapshot.gpus, 16);
        assert_eq!(jobs[0].snapshot.spec.gpus_per_node, 8);
        assert_eq!(jobs[1].snapshot.gpus, 8);
    }

    #[test]
    fn a_percent_sign_in_an_expanded_path_survives() {
        let (jobs, _) = parse_in(
            "JobId=5 JobName=x JobState=RUNNING StdOut=/logs/100%x_5.log",
            &Utc,
        );
        assert_eq!(
            jobs[0].snapshot.log_path.as_deref(),
            Some(Path::new("/logs/100%x_5.log"))
        );
    }

    #[test]
    fn slurm_value_conventions() {
        assert_eq!(user_name("alice(1000)"), Some("alice"));
        assert_eq!(user_name("(null)(1234)"), None);
        assert_eq!(user_name("bob"), Some("bob"));
        assert_eq!(exit_status("3:0"), Some((3, 0)));
        assert_eq!(exit_status("0:15"), Some((0, 15)));
        assert_eq!(exit_status("3"), None);
        assert_eq!(exit_status("-1:0"), None);
        assert_eq!(leading_number("1-2"), Some(1));
        assert_eq!(leading_number("x"), None);
        for none in ["Unknown", "unknown", "None", "N/A", "", "(null)"] {
            assert_eq!(local_time(none, &Utc), Ok(None), "{none}");
        }
        assert!(local_time("2026-13-01T00:00:00", &Utc).is_err());
        let berlin = chrono::FixedOffset::east_opt(3600).unwrap();
        assert_eq!(
            local_time("2026-11-23T13:31:32", &berlin),
            Ok(Some(utc("2026-11-23T12:31:32")))
        );
    }
}
