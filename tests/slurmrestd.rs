//! The slurmrestd client against a real slurmrestd in front of the single-host Slurm of
//! tests/slurm/cluster.sh, started by tests/slurm/restd.sh, on the release the suite runs on
//! (`RUNGUARD_SLURM_RELEASE`: 22.05, Debian 12's packages, OpenAPI v0.0.38; or 24.11, the trixie root,
//! v0.0.40..v0.0.42). Skipped with a message where Slurm or slurmrestd is not installed;
//! RUNGUARD_REQUIRE_SLURM=1 turns a skip into a failure. The tests of tokens Slurm verifies need the
//! release's auth/jwt plugin (Debian: slurm-wlm-jwt-plugin) and skip with a message without it.
//!
//! slurmrestd refuses to run as root, so it runs as nobody and every request acts as nobody: the jobs
//! it changes here are nobody's, submitted through the client itself or by `sbatch` run as nobody.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use runguard_engine::backend::slurm::api::SlurmApi;
use runguard_engine::backend::slurm::cli::{Listing, SlurmCli};
use runguard_engine::backend::slurm::comment::Enrolment;
use runguard_engine::backend::slurm::rest::{
    ApiVersion, JobUpdate, Negotiated, RestEndpoint, RestOptions, SlurmRest, SubmitOptions,
};
use runguard_engine::backend::slurm::squeue::{self, SlurmJob};
use runguard_engine::backend::slurm::token::TokenSource;
use runguard_engine::backend::slurm::via_rest::SlurmViaRest;
use runguard_engine::backend::{BackendError, JobSnapshot};
use runguard_engine::model::JobState;

use crate::support::CliSandbox;
use crate::support::slurm::{
    AS_NOBODY, Cluster, RESTD_SH, completed_workflow, one_at_a_time, release, status,
};

fn slurmrestd_available() -> bool {
    crate::support::slurm::available(&["slurmrestd"])
}

/// How the test's slurmrestd listens.
enum Listen {
    /// DIR/rest/rest.sock with rest_auth/local.
    Unix,
    /// 127.0.0.1:PORT with rest_auth/jwt.
    Tcp(u16),
}

/// The OpenAPI versions slurmrestd serves on the release the suite runs on, as restd.sh starts it.
fn served_versions() -> &'static [&'static str] {
    if release() == "22.05" {
        &["v0.0.38"]
    } else {
        &["v0.0.40", "v0.0.41", "v0.0.42"]
    }
}

/// The version the client should choose: the newest served.
fn expected_version() -> ApiVersion {
    served_versions()
        .last()
        .and_then(|version| ApiVersion::parse(version))
        .unwrap()
}

/// Whether this release's Slurm can verify JSON web tokens (its auth_jwt plugin is installed).
fn jwt_available() -> bool {
    let plugins = if release() == "22.05" {
        PathBuf::from("/usr/lib/x86_64-linux-gnu/slurm-wlm")
    } else {
        let root = std::env::var("RUNGUARD_SLURM_ROOT")
            .unwrap_or_else(|_| "/var/cache/runguard/trixie-root".to_string());
        Path::new(&root).join("usr/lib/x86_64-linux-gnu/slurm-wlm")
    };
    crate::support::available(
        plugins.join("auth_jwt.so").exists(),
        "RUNGUARD_REQUIRE_SLURM_JWT",
        &format!(
            "Slurm {} has no {}/auth_jwt.so (Debian: slurm-wlm-jwt-plugin)",
            release(),
            plugins.display()
        ),
    )
}

/// A running Slurm with slurmrestd in front of it, both stopped when dropped.
struct Lab {
    cluster: Cluster,
    /// The key slurmctld verifies tokens with, when it does.
    jwt_key: Option<PathBuf>,
    /// Where nobody's jobs run and write their logs.
    jobs: PathBuf,
    runtime: tokio::runtime::Runtime,
    /// Holds the cluster's files; world-searchable so that nobody reaches slurm.conf and the socket.
    _root: tempfile::TempDir,
    _one_at_a_time: MutexGuard<'static, ()>,
}

impl Lab {
    fn start(listen: Listen) -> Self {
        Self::start_with(listen, false)
    }

    /// With `jwt`, slurmctld verifies tokens (AuthAltTypes=auth/jwt) and slurmrestd passes them on.
    fn start_with(listen: Listen, jwt: bool) -> Self {
        let guard = one_at_a_time();
        let root = tempfile::Builder::new()
            .permissions(std::fs::Permissions::from_mode(0o755))
            .tempdir()
            .unwrap();
        let jobs = root.path().join("jobs");
        std::fs::create_dir(&jobs).unwrap();
        std::fs::set_permissions(&jobs, std::fs::Permissions::from_mode(0o777)).unwrap();
        let jwt_key = jwt.then(|| {
            let key = root.path().join("jwt.key");
            let mut bytes = [0u8; 32];
            std::io::Read::read_exact(
                &mut std::fs::File::open("/dev/urandom").unwrap(),
                &mut bytes,
            )
            .unwrap();
            std::fs::write(&key, bytes).unwrap();
            std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
            key
        });
        let settings: Vec<(&str, &Path)> = jwt_key
            .iter()
            .map(|key| ("RUNGUARD_SLURM_JWT_KEY", key.as_path()))
            .collect();
        let lab = Self {
            cluster: Cluster::start_configured(&root.path().join("slurm"), 30, &settings),
            jwt_key,
            jobs,
            runtime: tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap(),
            _root: root,
            _one_at_a_time: guard,
        };
        lab.start_restd(&listen);
        lab
    }

    fn start_restd(&self, listen: &Listen) {
        self.start_restd_with(listen, &[]);
    }

    /// slurmrestd with these restd.sh settings (`RUNGUARD_SLURMRESTD_PLUGINS`...).
    fn start_restd_with(&self, listen: &Listen, settings: &[(&str, &str)]) {
        let mut command = Command::new("bash");
        command
            .arg(RESTD_SH)
            .arg("start")
            .arg(&self.cluster.dir)
            .envs(settings.iter().copied());
        if let Listen::Tcp(port) = listen {
            command.arg("--tcp").arg(port.to_string());
        }
        run(&mut command);
    }

    fn stop_restd(&self) {
        run(Command::new("bash")
            .arg(RESTD_SH)
            .arg("stop")
            .arg(&self.cluster.dir));
    }

    fn socket(&self) -> PathBuf {
        self.cluster.dir.join("rest/rest.sock")
    }

    fn unix_client(&self) -> SlurmRest {
        SlurmRest::new(RestOptions::new(RestEndpoint::Unix(self.socket()))).unwrap()
    }

    /// `scontrol token` for nobody, valid `lifespan` seconds (a cluster started with a JWT key).
    fn token(&self, lifespan: u32) -> String {
        let out = run(self.slurm("scontrol").args([
            "token",
            "username=nobody",
            &format!("lifespan={lifespan}"),
        ]));
        out.trim()
            .strip_prefix("SLURM_JWT=")
            .unwrap_or_else(|| panic!("scontrol token printed {out:?}"))
            .to_string()
    }

    /// A client over TCP that sends nobody's name and the token `file` holds.
    fn tcp_client(&self, port: u16, file: &Path) -> SlurmRest {
        let mut options = RestOptions::new(RestEndpoint::Http(format!("http://127.0.0.1:{port}")));
        options.user_name = Some("nobody".into());
        options.token = TokenSource::File(file.to_path_buf());
        SlurmRest::new(options).unwrap()
    }

    /// The client's requests as the backend sends them: the tools for what slurmrestd cannot do, and
    /// for telling a refused token from a lost controller.
    fn via_rest(&self, rest: SlurmRest) -> SlurmViaRest {
        let cli = SlurmCli::new(Duration::from_secs(20), Listing::Auto)
            .with_slurm_conf(Some(self.cluster.conf.clone()))
            .with_bin_dir(self.cluster.bin_dir.clone());
        SlurmViaRest::new(rest, cli)
    }

    fn block<F: std::future::Future>(&self, future: F) -> F::Output {
        self.runtime.block_on(future)
    }

    /// A Slurm client command with this cluster's configuration.
    fn slurm(&self, program: &str) -> Command {
        self.cluster.command(program)
    }

    /// `sbatch --parsable ARGS` as root; the new job id.
    fn sbatch(&self, args: &[&str]) -> String {
        run(self.slurm("sbatch").arg("--parsable").args(args))
            .trim()
            .to_string()
    }

    /// `sbatch --parsable ARGS` as nobody, in the jobs directory; the new job id.
    fn sbatch_as_nobody(&self, args: &[&str]) -> String {
        let mut command = self.slurm(AS_NOBODY[0]);
        command
            .args(&AS_NOBODY[1..])
            .args(["sbatch", "--parsable"])
            .args(args)
            .current_dir(&self.jobs);
        run(&mut command).trim().to_string()
    }

    /// What the command-line tools say about the job: the check on what the client did.
    fn squeue(&self, job_id: &str) -> Option<SlurmJob> {
        // Since 24.05.1 `squeue --json` leaves out ended jobs unless asked for every state.
        let text = run(self
            .slurm("squeue")
            .args(["--all", "--states=all", "--json"]));
        let (jobs, _) = squeue::parse(&text).unwrap();
        jobs.into_iter().find(|job| job.snapshot.job_id == job_id)
    }

    /// Polls squeue until `done` holds for the job (at most a minute).
    fn wait_for(
        &self,
        job_id: &str,
        what: &str,
        done: impl Fn(&JobSnapshot) -> bool,
    ) -> JobSnapshot {
        let start = Instant::now();
        let mut last = None;
        while start.elapsed() < Duration::from_secs(60) {
            if let Some(job) = self.squeue(job_id) {
                if done(&job.snapshot) {
                    return job.snapshot;
                }
                last = Some(job.snapshot);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        panic!("job {job_id} never {what}; last seen: {last:#?}");
    }

    fn submit_options(&self, name: &str) -> SubmitOptions {
        SubmitOptions {
            name: name.to_string(),
            work_dir: self.jobs.clone(),
            output: Some("%x_%j.log".into()),
            ..SubmitOptions::default()
        }
    }
}

impl Drop for Lab {
    /// slurmrestd first; the cluster stops when its field is dropped.
    fn drop(&mut self) {
        let _ = Command::new("bash")
            .arg(RESTD_SH)
            .arg("stop")
            .arg(&self.cluster.dir)
            .status();
    }
}

/// Runs `command`, which must succeed; its standard output.
fn run(command: &mut Command) -> String {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn started(job: &JobSnapshot) -> bool {
    !matches!(job.state, JobState::Pending)
}

/// A lab with slurmrestd on its socket and a client of it; `None` where slurmrestd is missing.
fn unix_lab() -> Option<(Lab, SlurmRest)> {
    if !slurmrestd_available() {
        return None;
    }
    let lab = Lab::start(Listen::Unix);
    let rest = lab.unix_client();
    Some((lab, rest))
}

/// Replaces the nodes a pending job must not run on.
fn exclude(nodes: &[&str]) -> JobUpdate {
    JobUpdate {
        exclude_nodes: Some(nodes.iter().map(|node| node.to_string()).collect()),
        ..JobUpdate::default()
    }
}

/// Holds (`true`) or releases (`false`) a job.
fn hold(hold: bool) -> JobUpdate {
    JobUpdate {
        hold: Some(hold),
        ..JobUpdate::default()
    }
}

/// Releases a held job and makes it eligible at once.
fn release_now() -> JobUpdate {
    JobUpdate {
        start_now: true,
        ..hold(false)
    }
}

const ENROLMENT: &str = r#"{"APS": {"auto_resume_mode": "requeue", "max_requeue_times": 2}}"#;

#[test]
fn a_job_submitted_through_slurmrestd_runs_and_lists_with_its_state_nodes_and_comment() {
    let Some((lab, rest)) = unix_lab() else {
        return;
    };
    let slurm = lab.block(rest.ping()).unwrap();
    assert!(slurm.starts_with(&format!("{}.", release())), "{slurm}");

    let root_job = lab.sbatch(&["--hold", "-J", "roots", "--wrap", "true"]);
    let options = SubmitOptions {
        comment: Some(ENROLMENT.into()),
        exclude: vec!["n1".into()],
        nodes: Some(2),
        partition: Some("gpu".into()),
        ..lab.submit_options("llama")
    };
    // slurmrestd does not read #SBATCH lines: this -N 4 must not count.
    let script = "#!/bin/bash\n#SBATCH -N 4\nsrun bash -c 'echo \"rank $SLURM_PROCID on $SLURMD_NODENAME\"'\nsleep 2\n";
    let job_id = lab.block(rest.submit(script, &options)).unwrap();

    lab.wait_for(&job_id, "started", started);
    let listing = lab.block(rest.jobs()).unwrap();
    let (jobs, warnings) = squeue::parse(&listing).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    // slurmrestd lists every user's jobs, not only nobody's.
    assert!(jobs.iter().any(|job| job.snapshot.job_id == root_job));
    let job = jobs
        .iter()
        .find(|job| job.snapshot.job_id == job_id)
        .unwrap();
    assert_eq!(job.snapshot.state, JobState::Running, "{job:#?}");
    assert_eq!(job.snapshot.name, "llama");
    assert_eq!(job.snapshot.user, "nobody");
    assert_eq!(job.snapshot.nodes.len(), 2, "{job:#?}");
    assert!(!job.snapshot.nodes.contains(&"n1".to_string()));
    assert_eq!(job.snapshot.excluded_nodes, ["n1"]);
    assert!(
        matches!(job.enrolment, Enrolment::Enrolled { .. }),
        "{:?}",
        job.enrolment
    );
    assert_eq!(job.snapshot.limits.max_requeue_times, Some(2));

    let one = lab.block(rest.job(&job_id)).unwrap().unwrap();
    let (one, _) = squeue::parse(&one).unwrap();
    assert_eq!(one.len(), 1);
    assert_eq!(one[0].snapshot.job_id, job_id);
    assert_eq!(lab.block(rest.job("999999")).unwrap(), None);

    let done = lab.wait_for(&job_id, "ended", |job| job.state.is_terminal());
    assert_eq!(done.state, JobState::Completed, "{done:#?}");
    let log = std::fs::read_to_string(lab.jobs.join(format!("llama_{job_id}.log"))).unwrap();
    for node in &done.nodes {
        assert!(log.contains(&format!("on {node}")), "{log}");
    }
}

#[test]
fn an_exclusion_set_through_slurmrestd_shows_in_squeue_and_the_released_job_runs_elsewhere() {
    let Some((lab, rest)) = unix_lab() else {
        return;
    };
    let job_id = lab.sbatch_as_nobody(&["--hold", "-J", "held", "--wrap", "sleep 1"]);

    lab.block(rest.update_job(&job_id, &exclude(&["n1", "n2"])))
        .unwrap();
    let held = lab.squeue(&job_id).unwrap().snapshot;
    assert_eq!(held.excluded_nodes, ["n1", "n2"]);
    assert_eq!(held.state, JobState::Pending);
    assert_eq!(held.reason.as_deref(), Some("JobHeldUser"));

    lab.block(rest.update_job(&job_id, &release_now())).unwrap();
    let ran = lab.wait_for(&job_id, "ran", |job| !job.nodes.is_empty());
    assert!(
        ran.nodes.iter().all(|node| node == "n3" || node == "n4"),
        "{ran:#?}"
    );
}

#[test]
fn a_pending_job_is_held_and_started_now_through_slurmrestd() {
    let Some((lab, rest)) = unix_lab() else {
        return;
    };
    // A job that would wait an hour, like a requeued job waits on BeginTime.
    let job_id = lab.sbatch_as_nobody(&["--begin=now+1hour", "-J", "later", "--wrap", "sleep 1"]);
    let waiting = lab.squeue(&job_id).unwrap().snapshot;
    assert_eq!(waiting.reason.as_deref(), Some("BeginTime"));

    lab.block(rest.update_job(&job_id, &hold(true))).unwrap();
    let held = lab.squeue(&job_id).unwrap().snapshot;
    assert_eq!(held.state, JobState::Pending);
    assert_eq!(held.reason.as_deref(), Some("JobHeldUser"));

    lab.block(rest.update_job(&job_id, &release_now())).unwrap();
    lab.wait_for(&job_id, "started", started);
}

#[test]
fn cancel_through_slurmrestd_ends_the_job_and_a_running_job_keeps_its_exclusions() {
    let Some((lab, rest)) = unix_lab() else {
        return;
    };
    let job_id = lab
        .block(rest.submit("#!/bin/bash\nsleep 60\n", &lab.submit_options("long")))
        .unwrap();
    lab.wait_for(&job_id, "started", |job| job.state == JobState::Running);

    // Slurm changes exclusions of pending jobs only.
    let err = lab
        .block(rest.update_job(&job_id, &exclude(&["n4"])))
        .unwrap_err();
    let BackendError::Invalid(message) = &err else {
        panic!("{err:?}")
    };
    assert!(message.contains("no longer pending"), "{message}");

    lab.block(rest.cancel(&job_id)).unwrap();
    let ended = lab.wait_for(&job_id, "ended", |job| job.state.is_terminal());
    assert_eq!(ended.state, JobState::Cancelled);
    // Cancelling an ended job again is not an error, so a retried action is harmless.
    lab.block(rest.cancel(&job_id)).unwrap();
    let unknown = lab.block(rest.cancel("999999")).unwrap_err();
    assert!(matches!(unknown, BackendError::NoSuchJob(_)), "{unknown:?}");
}

/// Whether the release's slurmctld still answers after slurmrestd was refused to signal another
/// user's job. Measured on 24.11.5 in this lab: once slurmrestd's `slurm_kill_jobs` fails with
/// "Operation not permitted", slurmctld answers no job request any more (`squeue`: "Socket timed out
/// on send/recv operation"; slurmrestd: error 1000 "Unexpected message received"), and its log shows
/// no kill request at all. 24.11.6 fixed daemons that stop watching a connection after a missed I/O
/// event.
fn a_refused_signal_leaves_slurmctld_answering() -> bool {
    if release() == "24.11" {
        eprintln!(
            "SKIPPED on 24.11: a cancel of another user's job through slurmrestd wedges slurmctld 24.11.5"
        );
        return false;
    }
    true
}

#[test]
fn slurmrestd_running_as_nobody_is_refused_changes_to_roots_jobs() {
    let Some((lab, rest)) = unix_lab() else {
        return;
    };
    let job_id = lab.sbatch(&["--hold", "--wrap", "true"]);

    let err = lab
        .block(rest.update_job(&job_id, &hold(false)))
        .unwrap_err();
    let BackendError::Refused { command, message } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        command,
        &format!(
            "POST /slurm/{}/job/{job_id} {{\"hold\":false}}",
            expected_version()
        )
    );
    // 22.05: error 2002 "Access/permission denied"; 24.11: 2010 "Invalid user id".
    assert!(
        message.contains("Access/permission denied") || message.contains("Invalid user id"),
        "{message}"
    );
    let job = lab.squeue(&job_id).unwrap().snapshot;
    assert_eq!(job.reason.as_deref(), Some("JobHeldUser"));

    if !a_refused_signal_leaves_slurmctld_answering() {
        return;
    }
    let err = lab.block(rest.cancel(&job_id)).unwrap_err();
    let BackendError::Refused { command, message } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(
        command,
        &format!("DELETE /slurm/{}/job/{job_id}", expected_version())
    );
    assert!(message.contains("Access/permission denied"), "{message}");
    let job = lab.squeue(&job_id).unwrap().snapshot;
    assert_eq!(job.reason.as_deref(), Some("JobHeldUser"));
}

#[test]
fn a_stopped_slurmrestd_and_a_lost_controller_are_unavailable() {
    let Some((lab, rest)) = unix_lab() else {
        return;
    };
    lab.block(rest.ping()).unwrap();

    lab.stop_restd();
    for err in [
        lab.block(rest.ping()).unwrap_err(),
        lab.block(rest.jobs()).unwrap_err(),
    ] {
        let BackendError::Unavailable(message) = &err else {
            panic!("{err:?}")
        };
        assert!(message.contains("rest.sock"), "{message}");
    }

    lab.start_restd(&Listen::Unix);
    let job_id = lab
        .block(rest.submit("#!/bin/bash\nsleep 30\n", &lab.submit_options("orphan")))
        .unwrap();
    let controller = std::fs::read_to_string(lab.cluster.dir.join("slurmctld.pid")).unwrap();
    run(Command::new("kill").arg(controller.trim()));
    std::thread::sleep(Duration::from_millis(500));
    // slurmrestd still answers (after ~18 s of its own retries), but says it cannot find even a job
    // that exists: that must not read as a vanished job.
    let err = lab.block(rest.job(&job_id)).unwrap_err();
    let BackendError::Unavailable(message) = &err else {
        panic!("{err:?}")
    };
    assert!(message.contains("cannot reach slurmctld"), "{message}");
}

#[test]
fn over_tcp_slurmrestd_turns_away_requests_without_the_jwt_headers() {
    if !slurmrestd_available() {
        return;
    }
    let port = crate::support::free_port();
    let lab = Lab::start(Listen::Tcp(port));
    let url = format!("http://127.0.0.1:{port}");

    // Turned away before the version is even asked: the specification needs the headers too.
    let anonymous = SlurmRest::new(RestOptions::new(RestEndpoint::Http(url.clone()))).unwrap();
    let err = lab.block(anonymous.jobs()).unwrap_err();
    let BackendError::Credentials(message) = &err else {
        panic!("{err:?}")
    };
    assert!(
        message.starts_with("GET /openapi/v3: slurmrestd answered HTTP 401"),
        "{message}"
    );
    assert!(message.contains("no token is configured"), "{message}");

    // With AuthType=auth/none Slurm does not check the token itself; the headers must be there.
    let mut options = RestOptions::new(RestEndpoint::Http(url));
    options.user_name = Some("nobody".into());
    options.token = TokenSource::Fixed("not-verified-under-auth-none".into());
    let rest = SlurmRest::new(options).unwrap();
    let job_id = lab
        .block(rest.submit("#!/bin/bash\ntrue\n", &lab.submit_options("tcp")))
        .unwrap();
    let (jobs, _) = squeue::parse(&lab.block(rest.jobs()).unwrap()).unwrap();
    assert!(jobs.iter().any(|job| job.snapshot.job_id == job_id));
}

/// A nobody's job that fails on its first run with NCCL errors from the node of rank 1, and trains on
/// a restart.
const NCCL_JOB: &str = r#"#!/bin/bash
#SBATCH --comment='{"APS": {"auto_resume_mode": "requeue", "max_requeue_times": 2}}'
#SBATCH -N 2
#SBATCH -o %x_%j.log
if [ "${SLURM_RESTART_COUNT:-0}" = "0" ]; then
  srun -l bash -c 'if [ "$SLURM_PROCID" = 1 ]; then echo "$SLURMD_NODENAME:4242:4243 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<1234> with status=12 opcode=0 len=0 vendor err 129 (Recv)"; fi; sleep 1; echo "[Rank $SLURM_PROCID] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600050 milliseconds before timing out."; exit 1'
  exit 1
fi
srun -l bash -c '[ "$SLURM_PROCID" = 1 ] && echo " iteration       30/      30 | elapsed time per iteration (ms): 100.0 | throughput per GPU (TFLOP/s/GPU): 400.0 | lm loss: 2.000000E+00 |"; true'
"#;

#[test]
fn the_engine_over_slurmrestd_requeues_a_failed_job_without_its_culprit_node() {
    if !slurmrestd_available() {
        return;
    }
    let lab = Lab::start(Listen::Unix);
    let sandbox = CliSandbox::new(&format!(
        "[engine]\npoll_interval_secs = 0.5\n\n[backend]\nkind = \"slurm\"\n\n[slurm]\napi = \"rest\"\nrest_endpoint = \"unix:{}\"\n\n[recovery]\nwhitelist = [\"requeue\", \"cancel\"]\n",
        lab.socket().display()
    ));
    let mut engine = sandbox
        .command()
        .args(["run", "--auto"])
        .env("SLURM_CONF", &lab.cluster.conf)
        .env("PATH", &lab.cluster.path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::fs::write(lab.jobs.join("train.sbatch"), NCCL_JOB).unwrap();
    let job_id = lab.sbatch_as_nobody(&["-J", "llama-rest", "train.sbatch"]);

    let workflow = completed_workflow(&sandbox, &lab.cluster, Duration::from_secs(120));
    let _ = engine.kill();
    let _ = engine.wait();
    assert_eq!(workflow["succeeded"], true, "{workflow:#}");
    let attempts = workflow["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{workflow:#}");
    assert_eq!(attempts[1]["job_id"], job_id.as_str());
    let culprit = workflow["attributions"][0]["culprit"]["node"].clone();
    assert!(culprit.is_string(), "{workflow:#}");
    assert!(
        attempts[1]["excluded_nodes"]
            .as_array()
            .unwrap()
            .contains(&culprit)
    );
    assert!(!attempts[1]["nodes"].as_array().unwrap().contains(&culprit));
    // The job's changes went through slurmrestd; the requeue itself, which its API lacks, through scontrol.
    let planned = workflow["journal"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|entry| entry["decision"].as_str())
        .find(|decision| decision.starts_with("action 1 requeue:"))
        .unwrap_or_default()
        .to_string();
    let culprit = culprit.as_str().unwrap();
    let exclusion = if expected_version() == ApiVersion::V38 {
        format!("{{\"exclude_nodes\":\"{culprit}\"}}")
    } else {
        format!("{{\"excluded_nodes\":[\"{culprit}\"]}}")
    };
    assert!(
        planned.contains(&format!("scontrol requeuehold {job_id}"))
            && planned.contains(&format!(
                "POST /slurm/{}/job/{job_id} {exclusion}",
                expected_version()
            )),
        "{planned}"
    );
}

#[test]
fn the_client_speaks_the_newest_version_slurmrestd_offers_and_follows_a_restart_with_others() {
    let Some((lab, rest)) = unix_lab() else {
        return;
    };
    lab.block(rest.jobs()).unwrap();
    let offered = served_versions()
        .iter()
        .filter_map(|version| ApiVersion::parse(version))
        .collect();
    assert_eq!(
        rest.negotiated(),
        Some(Negotiated::FromSpecification {
            chosen: expected_version(),
            offered
        })
    );

    lab.stop_restd();
    if release() == "22.05" {
        // 22.05 with its older plugins only: nothing runguard speaks, and it says so.
        lab.start_restd_with(
            &Listen::Unix,
            &[(
                "RUNGUARD_SLURMRESTD_PLUGINS",
                "openapi/v0.0.36,openapi/v0.0.37",
            )],
        );
        let err = lab.block(rest.jobs()).unwrap_err();
        let BackendError::Unavailable(message) = &err else {
            panic!("{err:?}")
        };
        assert!(
            message.contains("offers v0.0.36, v0.0.37, none of which runguard speaks"),
            "{message}"
        );
        return;
    }
    // 24.11 serving v0.0.40 only: v0.0.42's paths answer 404, the client asks again and goes on.
    lab.start_restd_with(&Listen::Unix, &[("RUNGUARD_SLURMRESTD_PARSERS", "v0.0.40")]);
    lab.block(rest.jobs()).unwrap();
    assert_eq!(rest.negotiated().unwrap().version(), ApiVersion::V40);
    // And v0.0.40's job changes work: an exclusion, then a release that starts the job now.
    let job_id = lab.sbatch_as_nobody(&["--hold", "-J", "v40", "--wrap", "sleep 1"]);
    lab.block(rest.update_job(&job_id, &exclude(&["n1", "n2"])))
        .unwrap();
    assert_eq!(
        lab.squeue(&job_id).unwrap().snapshot.excluded_nodes,
        ["n1", "n2"]
    );
    lab.block(rest.update_job(&job_id, &release_now())).unwrap();
    let ran = lab.wait_for(&job_id, "ran", |job| !job.nodes.is_empty());
    assert!(
        ran.nodes.iter().all(|node| node == "n3" || node == "n4"),
        "{ran:#?}"
    );
}

/// `token` with its signature replaced: a token signed with another key.
fn forged(token: &str) -> String {
    let (signed, _) = token.rsplit_once('.').unwrap();
    format!("{signed}.c2lnbmVkIHdpdGggYW5vdGhlciBrZXk")
}

#[test]
fn a_token_slurm_refuses_is_a_credential_error_and_a_fresh_one_is_read_from_its_file() {
    if !slurmrestd_available() || !jwt_available() {
        return;
    }
    let port = crate::support::free_port();
    let lab = Lab::start_with(Listen::Tcp(port), true);
    let file = lab.cluster.dir.join("nobody.jwt");
    std::fs::write(&file, "garbage").unwrap();
    let api = lab.via_rest(lab.tcp_client(port, &file));

    let err = lab.block(api.jobs(None)).unwrap_err();
    let BackendError::Credentials(message) = &err else {
        panic!("{err:?}")
    };
    assert!(message.contains("is not a JSON web token"), "{message}");

    // Signed with another key and not expired: 22.05's slurmrestd answers as for a lost controller,
    // 24.11's says "Protocol authentication error" (HTTP 511).
    let fresh = lab.token(600);
    std::fs::write(&file, forged(&fresh)).unwrap();
    let err = lab.block(api.jobs(None)).unwrap_err();
    let BackendError::Credentials(message) = &err else {
        panic!("{err:?}")
    };
    assert!(
        message.contains("`scontrol ping` reaches slurmctld")
            || message.contains("Protocol authentication error"),
        "{message}"
    );
    assert!(!message.contains(&fresh[..20]), "{message}");

    // The file renewed: read again after the refusal, no restart.
    std::fs::write(&file, format!("SLURM_JWT={fresh}\n")).unwrap();
    let job_id = lab.sbatch_as_nobody(&["--hold", "-J", "seen", "--wrap", "true"]);
    let (jobs, _) = lab.block(api.jobs(None)).unwrap();
    assert!(jobs.iter().any(|job| job.snapshot.job_id == job_id));
    assert_eq!(
        lab.block(
            api.perform(&runguard_engine::backend::slurm::api::Operation::Cancel {
                job_id: job_id.clone()
            })
        )
        .unwrap(),
        ""
    );
    assert!(lab.jwt_key.is_some());
}

/// The first workflow's status, as `runguard status --json` shows it, once `wanted` (at most `within`).
fn workflow_status(
    sandbox: &CliSandbox,
    cluster: &Cluster,
    wanted: &str,
    within: Duration,
) -> serde_json::Value {
    let start = Instant::now();
    let mut workflow = serde_json::Value::Null;
    while start.elapsed() < within {
        if let Some(status) = status(sandbox, cluster) {
            workflow = status["workflows"][0].clone();
            if workflow["status"] == wanted {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    workflow
}

#[test]
fn a_token_that_runs_out_stops_the_watch_until_its_file_holds_a_fresh_one() {
    if !slurmrestd_available() || !jwt_available() {
        return;
    }
    let port = crate::support::free_port();
    let lab = Lab::start_with(Listen::Tcp(port), true);
    let file = lab.cluster.dir.join("nobody.jwt");
    // Runs out 40 s from now.
    std::fs::write(&file, lab.token(40)).unwrap();
    let sandbox = CliSandbox::new(&format!(
        "[engine]\npoll_interval_secs = 0.5\n\n[backend]\nkind = \"slurm\"\n\n[slurm]\napi = \"rest\"\nrest_endpoint = \"http://127.0.0.1:{port}\"\nrest_user = \"nobody\"\nrest_token_file = \"{}\"\n",
        file.display()
    ));
    let mut engine = sandbox
        .command()
        .args(["run"])
        .env("SLURM_CONF", &lab.cluster.conf)
        .env("PATH", &lab.cluster.path)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let comment = format!("--comment={ENROLMENT}");
    lab.sbatch_as_nobody(&[&comment, "-J", "watched", "--wrap", "sleep 300"]);

    let watched = workflow_status(&sandbox, &lab.cluster, "enabled", Duration::from_secs(30));
    let refused = workflow_status(
        &sandbox,
        &lab.cluster,
        "credential_error",
        Duration::from_secs(60),
    );
    std::fs::write(&file, lab.token(600)).unwrap();
    let back = workflow_status(&sandbox, &lab.cluster, "enabled", Duration::from_secs(30));
    let _ = engine.kill();
    let _ = engine.wait();

    assert_eq!(watched["status"], "enabled", "{watched:#}");
    assert_eq!(refused["status"], "credential_error", "{refused:#}");
    let reason = refused["status_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("expired at"), "{reason}");
    assert!(reason.contains(&file.display().to_string()), "{reason}");
    assert_eq!(back["status"], "enabled", "{back:#}");
    assert_eq!(
        back["status_reason"], "credentials accepted again",
        "{back:#}"
    );
}
