//! Slurm through its command-line tools: `squeue --json` (or `scontrol show job -o` where that is not
//! available) to read, `scontrol`/`sbatch`/`scancel` to act. Every command is argv, never a shell
//! string, and has a timeout.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use super::api::{Operation, SlurmApi};
use super::jobcomp::{self, JobCompRecord};
use super::squeue::{self, SlurmJob};
use super::{hostlist, sacct, scontrol};
use crate::backend::{BackendError, NodeCapacity};
use crate::sync::lock;
use crate::telemetry::tail::read_end;

pub use crate::config::Listing;

/// The command-line tools of the Slurm the environment points to (`SLURM_CONF`, `PATH`).
pub struct SlurmCli {
    timeout: Duration,
    listing: Listing,
    /// `squeue --json` failed as unsupported once: use `scontrol` from then on.
    json_unsupported: AtomicBool,
    /// sacct said the cluster keeps no accounting: not asked again.
    no_accounting: AtomicBool,
    /// The jobcomp file: configured, or found in `scontrol show config` on first use (`Some(None)`: none).
    jobcomp: Mutex<Option<Option<PathBuf>>>,
    /// `SLURM_CONF` for every command, when not the environment's.
    slurm_conf: Option<PathBuf>,
    /// Where the client commands are, when not on `PATH`.
    bin_dir: Option<PathBuf>,
}

/// The most of the jobcomp file read for one job's history: its end, where recent attempts are.
const JOBCOMP_TAIL_BYTES: u64 = 16 << 20;

impl SlurmCli {
    pub fn new(timeout: Duration, listing: Listing) -> Self {
        Self {
            timeout: if timeout.is_zero() {
                Duration::from_secs(30)
            } else {
                timeout
            },
            listing,
            json_unsupported: AtomicBool::new(false),
            no_accounting: AtomicBool::new(false),
            jobcomp: Mutex::new(None),
            slurm_conf: None,
            bin_dir: None,
        }
    }

    /// Runs every command with `SLURM_CONF` set to this file (another cluster than the environment's).
    pub fn with_slurm_conf(mut self, conf: Option<PathBuf>) -> Self {
        self.slurm_conf = conf;
        self
    }

    /// Runs the client commands from this directory instead of finding them on `PATH` (a site whose
    /// Slurm is installed apart, or a second release beside the usual one).
    pub fn with_bin_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.bin_dir = dir;
        self
    }

    /// Reads history from this jobcomp file instead of the one `scontrol show config` names.
    pub fn with_jobcomp(self, path: Option<PathBuf>) -> Self {
        if path.is_some() {
            *lock(&self.jobcomp) = Some(path);
        }
        self
    }

    /// Runs one command; its standard output, or the error Slurm's message stands for.
    pub async fn run(&self, argv: &[String]) -> Result<String, BackendError> {
        let (success, stdout, stderr) = self.run_raw(argv).await?;
        if success {
            return Ok(stdout);
        }
        Err(classify(argv, stderr.trim()))
    }

    /// Runs one command; whether it succeeded, its standard output and its standard error.
    async fn run_raw(&self, argv: &[String]) -> Result<(bool, String, String), BackendError> {
        let display = display_argv(argv);
        let Some((program, args)) = argv.split_first() else {
            return Err(BackendError::Invalid("empty command".into()));
        };
        let mut command = match &self.bin_dir {
            Some(dir) => tokio::process::Command::new(dir.join(program)),
            None => tokio::process::Command::new(program),
        };
        command
            .args(args)
            .kill_on_drop(true)
            .stdin(std::process::Stdio::null());
        if let Some(conf) = &self.slurm_conf {
            command.env("SLURM_CONF", conf);
        }
        let output = match tokio::time::timeout(self.timeout, command.output()).await {
            Ok(Ok(output)) => output,
            Ok(Err(err)) => return Err(BackendError::transport(display, err)),
            Err(_) => {
                return Err(BackendError::Unavailable(format!(
                    "{display}: no answer within {} s",
                    self.timeout.as_secs()
                )));
            }
        };
        Ok((
            output.status.success(),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ))
    }

    /// The jobcomp file, if the controller writes one (`JobCompType=jobcomp/filetxt`).
    async fn jobcomp_path(&self) -> Result<Option<PathBuf>, BackendError> {
        if let Some(known) = lock(&self.jobcomp).clone() {
            return Ok(known);
        }
        let text = self.run(&argv(&["scontrol", "show", "config"])).await?;
        let setting = |key: &str| {
            text.lines().find_map(|line| {
                let (name, value) = line.split_once('=')?;
                (name.trim() == key).then(|| value.trim().to_string())
            })
        };
        let path = (setting("JobCompType").as_deref() == Some("jobcomp/filetxt"))
            .then(|| setting("JobCompLoc"))
            .flatten()
            .map(PathBuf::from);
        *lock(&self.jobcomp) = Some(path.clone());
        Ok(path)
    }

    /// The job's attempts in the end of the jobcomp file.
    async fn jobcomp_history(
        &self,
        path: PathBuf,
        job_id: &str,
    ) -> Result<Vec<JobCompRecord>, BackendError> {
        let tail = tokio::task::spawn_blocking(move || read_end(&path, JOBCOMP_TAIL_BYTES))
            .await
            .map_err(|err| BackendError::transport("reading the jobcomp file", err))??;
        let (records, warnings) = jobcomp::parse(jobcomp::complete_lines(&tail));
        if !warnings.is_empty() {
            tracing::warn!(count = warnings.len(), first = %warnings[0], "jobcomp lines skipped");
        }
        Ok(jobcomp::attempts_of(&records, job_id)
            .into_iter()
            .cloned()
            .collect())
    }

    async fn squeue_json(
        &self,
        job_id: Option<&str>,
    ) -> Result<(Vec<SlurmJob>, Vec<String>), BackendError> {
        // Since 24.05.1 `squeue --json` applies its default state filter, leaving out the jobs that ended;
        // `--states=all` keeps them (22.05 ignores the option).
        let mut argv = argv(&["squeue", "--all", "--states=all", "--json"]);
        if let Some(id) = job_id {
            argv.extend(["--jobs".to_string(), id.to_string()]);
        }
        let text = self.run(&argv).await?;
        squeue::parse(&text).map_err(|err| match err {
            squeue::ListingError::Failed(words) if words.contains("Invalid job id") => {
                BackendError::NoSuchJob(display_argv(&argv))
            }
            squeue::ListingError::Failed(words) => {
                BackendError::Unavailable(format!("{}: {words}", display_argv(&argv)))
            }
            other => BackendError::Invalid(other.to_string()),
        })
    }

    async fn scontrol_jobs(
        &self,
        job_id: Option<&str>,
    ) -> Result<(Vec<SlurmJob>, Vec<String>), BackendError> {
        let mut argv = argv(&["scontrol", "show", "job", "-o", "--details"]);
        if let Some(id) = job_id {
            argv.push(id.to_string());
        }
        let text = self.run(&argv).await?;
        Ok(scontrol::parse(&text))
    }
}

/// Slurm's words for a credential it could not make or would not accept (auth/munge, auth/jwt,
/// auth/slurm): whatever the command, nothing runguard asks will be answered until they are fixed.
/// "Zero Bytes were transmitted or received" is what a client sees when slurmctld drops a request
/// whose credential it refused (a munge key that differs, a clock too far off).
const CREDENTIAL_REFUSED: [&str; 7] = [
    "Protocol authentication error",
    "Zero Bytes were transmitted or received",
    "Invalid authentication credential",
    "Authentication credential expired",
    "Invalid credential",
    "Munge encode failed",
    "Munge decode failed",
];

/// Slurm's words for a user it knows but will not let do this.
const NOT_PERMITTED: [&str; 5] = [
    "ermission denied",
    "Access denied",
    "Access/permission",
    "Invalid user id",
    "not authorized",
];

/// Whether `argv` only reads (a listing, the configuration, a ping), as opposed to changing a job or
/// a node.
fn only_reads(argv: &[String]) -> bool {
    let program = argv
        .first()
        .map(|program| program.rsplit('/').next().unwrap_or(program));
    match program {
        Some("squeue" | "sinfo" | "sacct") => true,
        Some("scontrol") => matches!(argv.get(1).map(String::as_str), Some("show" | "ping")),
        _ => false,
    }
}

/// Slurm's error message as the error it stands for. A user refused a *read* is a credential problem
/// (runguard's identity cannot watch anything); refused a change, it is a refusal of that change,
/// which the engine records as what it would have done.
fn classify(argv: &[String], stderr: &str) -> BackendError {
    let command = display_argv(argv);
    let message: String = stderr.chars().take(500).collect();
    if CREDENTIAL_REFUSED
        .iter()
        .any(|needle| message.contains(needle))
    {
        return BackendError::Credentials(format!("{command}: {message}"));
    }
    if NOT_PERMITTED.iter().any(|needle| message.contains(needle)) {
        if only_reads(argv) {
            return BackendError::Credentials(format!("{command}: {message}"));
        }
        return BackendError::Refused { command, message };
    }
    if message.contains("Invalid job id") {
        return BackendError::NoSuchJob(command);
    }
    let unreachable = [
        "Unable to contact slurm controller",
        "Connection refused",
        "Socket timed out",
    ];
    if unreachable.iter().any(|needle| message.contains(needle)) {
        return BackendError::Unavailable(format!("{command}: {message}"));
    }
    BackendError::Invalid(format!("{command}: {message}"))
}

pub(crate) fn argv(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|part| part.to_string()).collect()
}

/// The argv of an operation, shared by execution and display.
pub fn operation_argv(operation: &Operation) -> Vec<String> {
    match operation {
        Operation::RequeueHold { job_id } => argv(&["scontrol", "requeuehold", job_id]),
        Operation::ExcludeNodes { job_id, nodes } => vec![
            "scontrol".into(),
            "update".into(),
            format!("JobId={job_id}"),
            format!("ExcNodeList={}", nodes.join(",")),
        ],
        Operation::Release { job_id } => argv(&["scontrol", "release", job_id]),
        Operation::Hold { job_id } => argv(&["scontrol", "hold", job_id]),
        Operation::StartNow { job_id } => vec![
            "scontrol".into(),
            "update".into(),
            format!("JobId={job_id}"),
            "StartTime=now".into(),
        ],
        Operation::Cancel { job_id } => argv(&["scancel", job_id]),
        Operation::Drain { node, reason } => vec![
            "scontrol".into(),
            "update".into(),
            format!("NodeName={node}"),
            "State=DRAIN".into(),
            format!("Reason={reason}"),
        ],
        Operation::Signal { job_id, signal } => vec![
            "scancel".into(),
            format!("--signal={signal}"),
            "--batch".into(),
            job_id.clone(),
        ],
        Operation::Resume { node } => vec![
            "scontrol".into(),
            "update".into(),
            format!("NodeName={node}"),
            "State=RESUME".into(),
        ],
        Operation::Submit(submission) => {
            let mut command = vec![
                "sbatch".to_string(),
                "--parsable".to_string(),
                format!("--job-name={}", submission.name),
                format!("--comment={}", submission.comment),
            ];
            if !submission.exclude.is_empty() {
                command.push(format!("--exclude={}", submission.exclude.join(",")));
            }
            if let Some(dir) = &submission.work_dir {
                command.push(format!("--chdir={dir}"));
            }
            if !submission.environment.is_empty() {
                // ALL keeps what the job inherits today; the values were checked free of commas.
                let mut export = "--export=ALL".to_string();
                for (name, value) in &submission.environment {
                    export.push_str(&format!(",{name}={value}"));
                }
                command.push(export);
            }
            command.extend(submission.options.iter().cloned());
            command.push(submission.script.display().to_string());
            command.extend(submission.args.iter().cloned());
            command
        }
    }
}

/// Shows argv as one line a user could paste: arguments with spaces or quotes are single-quoted.
pub fn display_argv(argv: &[String]) -> String {
    argv.iter()
        .map(|arg| {
            if !arg.is_empty()
                && arg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_=,./:[]%@+".contains(c))
            {
                arg.clone()
            } else {
                format!("'{}'", arg.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `sinfo --Node --format=%N|%t|%E` lines as (node, state, reason), a node in several partitions once;
/// `none` (Slurm's word for no reason) reads as empty.
fn node_reason_lines(text: &str) -> Vec<(String, String, String)> {
    let mut nodes: Vec<(String, String, String)> = Vec::new();
    for line in text.lines() {
        let mut fields = line.splitn(3, '|');
        let (Some(name), Some(state)) = (fields.next(), fields.next()) else {
            continue;
        };
        let reason = fields.next().unwrap_or("").trim();
        let reason = if reason == "none" { "" } else { reason };
        if name.trim().is_empty() || nodes.iter().any(|(known, _, _)| known == name.trim()) {
            continue;
        }
        nodes.push((
            name.trim().to_string(),
            state.trim().to_string(),
            reason.to_string(),
        ));
    }
    nodes
}

/// `sinfo --Node --format=%N %t` lines as (node, state), a node in several partitions once.
fn node_state_lines(text: &str) -> Vec<(String, String)> {
    let mut states: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(name), Some(state)) = (fields.next(), fields.next()) else {
            continue;
        };
        for node in hostlist::expand(name).unwrap_or_else(|_| vec![name.to_string()]) {
            if !states.iter().any(|(known, _)| *known == node) {
                states.push((node, state.to_string()));
            }
        }
    }
    states
}

/// Whether a node in `sinfo`'s compact state (`idle`, `mix`, `drain*`, `down~`...) can run a job now.
fn usable(state: &str) -> bool {
    // A trailing `*` means the node does not answer; other marks (`~` powered down, `#` powering up,
    // `!` pending power down, `%` powering down, `@` reboot pending, `$` maintenance, `^` rebooting,
    // `-` planned) still allow scheduling except maintenance and not-responding.
    if state.contains('*') || state.contains('$') {
        return false;
    }
    let base = state.trim_end_matches(|c: char| !c.is_ascii_alphabetic());
    matches!(
        base,
        "idle" | "mix" | "mixed" | "alloc" | "allocated" | "comp" | "completing" | "plnd"
    )
}

#[async_trait]
impl SlurmApi for SlurmCli {
    async fn jobs(
        &self,
        job_id: Option<&str>,
    ) -> Result<(Vec<SlurmJob>, Vec<String>), BackendError> {
        let use_scontrol = self.listing == Listing::Scontrol
            || (self.listing == Listing::Auto && self.json_unsupported.load(Ordering::Relaxed));
        if use_scontrol {
            return self.scontrol_jobs(job_id).await;
        }
        match self.squeue_json(job_id).await {
            // A Slurm without `--json` (older, or built without the JSON plugins) rejects the option or
            // prints something else; a controller that is down is not a reason to switch.
            Err(BackendError::Invalid(message)) if self.listing == Listing::Auto => {
                tracing::warn!(%message, "squeue --json is not usable here; reading scontrol show job -o");
                self.json_unsupported.store(true, Ordering::Relaxed);
                self.scontrol_jobs(job_id).await
            }
            Err(BackendError::NoSuchJob(_)) => Ok((Vec::new(), Vec::new())),
            other => other,
        }
    }

    async fn perform(&self, operation: &Operation) -> Result<String, BackendError> {
        let out = self.run(&operation_argv(operation)).await?;
        Ok(match operation {
            // `--parsable` prints `ID` or `ID;CLUSTER`.
            Operation::Submit(_) => out.trim().split(';').next().unwrap_or("").to_string(),
            _ => out,
        })
    }

    fn describe(&self, operation: &Operation) -> String {
        display_argv(&operation_argv(operation))
    }

    async fn history(&self, job_id: &str) -> Result<Option<Vec<JobCompRecord>>, BackendError> {
        if !self.no_accounting.load(Ordering::Relaxed) {
            let (success, stdout, stderr) = self.run_raw(&sacct::argv(job_id)).await?;
            match sacct::read_answer(success, &stdout, &stderr) {
                Ok(Some((records, _))) => {
                    let attempts: Vec<JobCompRecord> = jobcomp::attempts_of(&records, job_id)
                        .into_iter()
                        .cloned()
                        .collect();
                    if !attempts.is_empty() {
                        return Ok(Some(attempts));
                    }
                }
                Ok(None) => self.no_accounting.store(true, Ordering::Relaxed),
                Err(err) => tracing::warn!(%err, job_id, "sacct"),
            }
        }
        let Some(path) = self.jobcomp_path().await? else {
            return Ok(None);
        };
        let attempts = self.jobcomp_history(path, job_id).await?;
        Ok((!attempts.is_empty()).then_some(attempts))
    }

    async fn node_states(&self, nodes: &[String]) -> Result<Vec<(String, String)>, BackendError> {
        if nodes.is_empty() {
            return Ok(Vec::new());
        }
        // Only the nodes asked about: the controller packs less, and the answer stays small on a large
        // cluster.
        let mut command = argv(&["sinfo", "--noheader", "--Node", "--format=%N %t"]);
        command.push(format!("--nodes={}", nodes.join(",")));
        let text = self.run(&command).await?;
        Ok(node_state_lines(&text))
    }

    async fn node_reasons(
        &self,
        nodes: &[String],
    ) -> Result<Vec<(String, String, String)>, BackendError> {
        if nodes.is_empty() {
            return Ok(Vec::new());
        }
        let mut command = argv(&["sinfo", "--noheader", "--Node", "--format=%N|%t|%E"]);
        command.push(format!("--nodes={}", nodes.join(",")));
        let text = self.run(&command).await?;
        Ok(node_reason_lines(&text))
    }

    async fn node_inventory(&self) -> Result<Option<crate::capacity::NodeListing>, BackendError> {
        let text = self.run(&super::inventory::argv()).await?;
        Ok(Some(super::inventory::read(&text)))
    }

    async fn usable_nodes(&self, partition: Option<&str>) -> Result<NodeCapacity, BackendError> {
        let mut command = argv(&["sinfo", "--noheader", "--Node", "--format=%N %t"]);
        if let Some(partition) = partition {
            command.push(format!("--partition={partition}"));
        }
        let text = self.run(&command).await?;
        Ok(partition_capacity(&text))
    }
}

/// The nodes `sinfo --Node --format='%N %t'` lists: every one could run a job of the partition once
/// it is back (a down or drained node is returned to service), the usable ones can now.
fn partition_capacity(text: &str) -> NodeCapacity {
    let mut capacity = NodeCapacity::default();
    for line in text.lines() {
        let mut fields = line.split_whitespace();
        let (Some(name), Some(state)) = (fields.next(), fields.next()) else {
            continue;
        };
        // A node in several partitions is listed once per partition.
        for node in hostlist::expand(name).unwrap_or_else(|_| vec![name.to_string()]) {
            if usable(state) && !capacity.now.contains(&node) {
                capacity.now.push(node.clone());
            }
            if !capacity.fitting.contains(&node) {
                capacity.fitting.push(node);
            }
        }
    }
    capacity
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_of_the_partition_fits_and_the_usable_ones_can_run_now() {
        let capacity = partition_capacity("n[1-2] alloc\nn3 drain\nn4 down*\nn1 alloc\nn5 drng\n");
        assert_eq!(capacity.now, ["n1", "n2"]);
        assert_eq!(capacity.fitting, ["n1", "n2", "n3", "n4", "n5"]);
        assert_eq!(capacity.left(&["n2".to_string()]), (1, 4));
    }

    #[test]
    fn node_states_read_as_sinfo_printed_them_with_a_node_frozen() {
        for release in ["22.05", "24.11"] {
            let text = std::fs::read_to_string(format!(
                "{}/../tests/fixtures/slurm/sinfo_{release}_node_not_responding.txt",
                env!("CARGO_MANIFEST_DIR")
            ))
            .unwrap();
            let states = node_state_lines(&text);
            assert_eq!(states.len(), 4, "{release}: {states:?}");
            let dead: Vec<&str> = states
                .iter()
                .filter(|(_, state)| super::super::words::node_death(state).is_some())
                .map(|(node, _)| node.as_str())
                .collect();
            assert_eq!(dead, ["n2"], "{release}");
        }
        assert_eq!(
            node_state_lines("n[1-2] alloc\nn1 alloc\ngarbage\n"),
            [
                ("n1".to_string(), "alloc".to_string()),
                ("n2".into(), "alloc".into())
            ]
        );
    }

    #[test]
    fn slurm_messages_become_the_errors_they_stand_for() {
        let drain = argv(&["scontrol", "update", "NodeName=n2", "State=DRAIN"]);
        assert!(matches!(
            classify(&drain, "slurm_update error: Invalid user id"),
            BackendError::Refused { .. }
        ));
        assert!(matches!(
            classify(
                &drain,
                "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
            ),
            BackendError::Unavailable(_)
        ));
        assert!(matches!(
            classify(&drain, "scontrol: error: Invalid job id specified"),
            BackendError::NoSuchJob(_)
        ));
        assert!(matches!(
            classify(&drain, "squeue: unrecognized option '--json'"),
            BackendError::Invalid(_)
        ));
    }

    #[test]
    fn a_refused_credential_is_a_credential_error_whatever_the_command() {
        let listing = argv(&["squeue", "--all", "--states=all", "--json"]);
        let submit = argv(&["sbatch", "--parsable", "train.sbatch"]);
        // Quoted from https://github.com/dun/munge/issues/118 (munged not running on the client).
        let no_munged = "sbatch: error: Munge encode failed: Failed to access \"/run/munge/munge.socket.2\": No such file or directory\n\
                         sbatch: error: slurm_send_node_msg: auth_g_create: REQUEST_SUBMIT_BATCH_JOB has authentication error\n\
                         sbatch: error: Batch job submission failed: Protocol authentication error";
        // Quoted from https://github.com/clustervision/trinity/issues/477 (a munge key that differs
        // from the controller's; slurmctld logged "Munge decode failed: Invalid credential").
        let other_key = "sinfo: error: slurm_receive_msg: Zero Bytes were transmitted or received\n\
                         slurm_load_partitions: Zero Bytes were transmitted or received";
        // Quoted from https://github.com/uabrc/uabrc.github.io/issues/1242.
        let socket = "sbatch: error: authentication: Socket communication error\n\
                      sbatch: error: Batch job submission failed: Protocol authentication error";
        for (command, stderr) in [
            (&submit, no_munged),
            (&listing, other_key),
            (&submit, socket),
            (
                &listing,
                "slurm_load_jobs error: Invalid authentication credential",
            ),
            (
                &listing,
                "slurm_load_jobs error: Authentication credential expired",
            ),
        ] {
            let err = classify(command, stderr);
            let BackendError::Credentials(message) = &err else {
                panic!("{stderr}: {err:?}")
            };
            assert!(message.starts_with(command[0].as_str()), "{message}");
        }
    }

    #[test]
    fn a_user_refused_a_read_has_bad_credentials_refused_a_change_lacks_rights() {
        let listing = argv(&["squeue", "--all", "--states=all", "--json"]);
        let show = argv(&["scontrol", "show", "job", "-o", "--details"]);
        let cancel = argv(&["scancel", "42"]);
        let requeue = argv(&["scontrol", "requeuehold", "42"]);
        for command in [&listing, &show] {
            for stderr in [
                "slurm_load_jobs error: Access/permission denied",
                "slurm_load_jobs error: Invalid user id",
            ] {
                assert!(
                    matches!(classify(command, stderr), BackendError::Credentials(_)),
                    "{command:?} {stderr}"
                );
            }
        }
        let exclude = argv(&["scontrol", "update", "JobId=42", "ExcNodeList=n2"]);
        // What scancel and scontrol print for root's job when nobody runs them (measured on 22.05.8).
        for (command, stderr) in [
            (
                &cancel,
                "scancel: error: Kill job error on job id 42: Access/permission denied",
            ),
            (&requeue, "Access/permission denied for job 42"),
            (&exclude, "Invalid user id for job 42"),
        ] {
            let err = classify(command, stderr);
            assert!(
                matches!(&err, BackendError::Refused { command: shown, .. } if shown == &display_argv(command)),
                "{err:?}"
            );
        }
    }

    #[test]
    fn node_states_that_can_run_jobs() {
        for state in ["idle", "mix", "alloc", "comp", "idle~", "mix-"] {
            assert!(usable(state), "{state}");
        }
        for state in [
            "drain", "drng", "down*", "idle*", "fail", "maint", "idle$", "unk*",
        ] {
            assert!(!usable(state), "{state}");
        }
    }

    #[test]
    fn commands_display_as_one_pasteable_line() {
        let drain = Operation::Drain {
            node: "n2".into(),
            reason: "runguard: xid_79".into(),
        };
        assert_eq!(
            display_argv(&operation_argv(&drain)),
            "scontrol update NodeName=n2 State=DRAIN 'Reason=runguard: xid_79'"
        );
        let submit = Operation::Submit(super::super::api::Submission {
            script: "/home/a/train.sbatch".into(),
            name: "llama".into(),
            comment: r#"{"APS":{"auto_resume_mode":"requeue"}}"#.into(),
            exclude: vec!["n2".into(), "n3".into()],
            ..Default::default()
        });
        assert_eq!(
            display_argv(&operation_argv(&submit)),
            r#"sbatch --parsable --job-name=llama '--comment={"APS":{"auto_resume_mode":"requeue"}}' --exclude=n2,n3 /home/a/train.sbatch"#
        );
        let fixed = Operation::Submit(super::super::api::Submission {
            script: "/home/a/train.sbatch".into(),
            args: vec!["--num-workers".into(), "2".into()],
            name: "llama".into(),
            comment: "{}".into(),
            environment: vec![("NCCL_SOCKET_IFNAME".into(), "ib0".into())],
            ..Default::default()
        });
        assert_eq!(
            display_argv(&operation_argv(&fixed)),
            "sbatch --parsable --job-name=llama '--comment={}' --export=ALL,NCCL_SOCKET_IFNAME=ib0 \
             /home/a/train.sbatch --num-workers 2"
        );
    }
}
