//! A real PyTorch DDP job on a real single-host Slurm, end to end: the real `runguard run --auto`
//! watches tests/slurm/ddp.sbatch (tests/slurm/ddp_train.py: 2 nodes × 2 ranks, gloo on CPU, `srun
//! -l`, `torch.save` checkpoints every 10 iterations, resume from the newest) while one rank, the last
//! one on n2, fails as each case asks at iteration 15 of the job's first run. The failure texts are
//! PyTorch's and Slurm's own. Runs on the release `RUNGUARD_SLURM_RELEASE` names; skipped with a
//! message where Slurm or torch is missing (host python for 22.05, the trixie root's for 24.11), unless
//! RUNGUARD_REQUIRE_SLURM=1.

use std::path::Path;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime};

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::support::CliSandbox;
use crate::support::slurm::{
    Cluster, DDP_SBATCH, DDP_TRAIN, HeadlessEngine, Leftovers, held_jobs, job_logs, one_at_a_time,
    processes_with_env, status, strings,
};

/// The engine's silence limit in the hang case: above the seconds four interpreters take to import
/// torch on a loaded 2-core machine, below the training group's collective timeout of that case.
const HEARTBEAT_SECS: u64 = 15;

fn ddp_available() -> bool {
    crate::support::slurm::available(&[]) && crate::support::slurm::torch_available()
}

/// How the faulty rank fails, and how long the others' collectives wait for it.
struct Fault {
    /// `DDP_FAULT` of ddp_train.py: kill, stop, error; none for a healthy run.
    kind: &'static str,
    /// A node whose kernel log shows a CPU at its thermal limit once the run has saved iteration 10:
    /// a precursor of failure (runguard may ask the job to save, `checkpoint_now` whitelisted).
    hot_node: Option<&'static str>,
    /// The job requeues itself after the save SIGUSR1 asked for (`DDP_REQUEUE_ON_USR1`).
    requeue_on_usr1: bool,
    /// `DDP_TIMEOUT`: seconds a collective of the training group waits before PyTorch gives up.
    collective_timeout_secs: u64,
}

impl Fault {
    /// A run without a fault.
    fn healthy() -> Self {
        Self {
            kind: "none",
            collective_timeout_secs: 30,
            hot_node: None,
            requeue_on_usr1: false,
        }
    }
}

/// What a finished case left.
struct Finished {
    status: Value,
    /// The job's log: the last run's (Slurm starts the file again when the job is requeued).
    log: String,
    checkpoints: Vec<String>,
    /// When the faulty rank was first seen stopped (SIGSTOP), for the hang case.
    stopped_at: Option<DateTime<Utc>>,
    /// The evidence lines, tracebacks and attributions the engine stored.
    store: Stored,
    /// Jobs the cluster still holds once the workflow has completed.
    held: Vec<String>,
}

/// Runs the headless engine against a fresh cluster with the DDP job submitted (enrolled, up to 3
/// requeues), until the workflow completes.
fn run_ddp(fault: Fault) -> Finished {
    let _one_at_a_time = one_at_a_time();
    let sandbox = CliSandbox::default();
    let ckpt = sandbox.path().join("ckpt");
    std::fs::create_dir(&ckpt).unwrap();
    // Declared before the cluster, dropped after it: whatever the job's processes left running.
    let _leftovers = Leftovers::marked(format!("CKPT_DIR={}", ckpt.display()));
    let cluster = Cluster::start(&sandbox.path().join("slurm"));
    let kern = sandbox.path().join("kern");
    std::fs::create_dir(&kern).unwrap();
    for node in ["n1", "n2", "n3", "n4"] {
        std::fs::write(kern.join(format!("{node}.log")), "").unwrap();
    }
    sandbox.write_config(&format!(
        "[engine]\npoll_interval_secs = 0.5\nheartbeat_timeout_secs = {HEARTBEAT_SECS}\n\n\
         [backend]\nkind = \"slurm\"\n\n\
         [recovery]\nwhitelist = [\"requeue\", \"cancel\", \"checkpoint_now\"]\n\n\
         [telemetry]\nnode_log_pattern = \"{}/{{node}}.log\"\n",
        kern.display()
    ));
    let mut engine = HeadlessEngine::start(&sandbox, &cluster, &[]);
    let log_pattern = sandbox.path().join("%x_%j.log");
    let submitted = cluster
        .command("sbatch")
        .current_dir(sandbox.path())
        .args([
            "--parsable",
            "-J",
            "ddp-test",
            r#"--comment={"APS": {"auto_resume_mode": "requeue", "max_requeue_times": 3}}"#,
        ])
        .arg("-o")
        .arg(&log_pattern)
        .arg(DDP_SBATCH)
        .env("CKPT_DIR", &ckpt)
        .env("DDP_TRAIN", DDP_TRAIN)
        .env("DDP_FAULT", fault.kind)
        .env("DDP_FAULT_AT", "15")
        .env("DDP_TIMEOUT", fault.collective_timeout_secs.to_string())
        .env("ITERS", "30")
        .env("CKPT_EVERY", "10")
        .env("STEP_SECS", "0.5")
        .env(
            "DDP_REQUEUE_ON_USR1",
            if fault.requeue_on_usr1 { "1" } else { "0" },
        )
        .env("OMP_NUM_THREADS", "1")
        .output()
        .unwrap();
    assert!(
        submitted.status.success(),
        "sbatch: {}",
        String::from_utf8_lossy(&submitted.stderr)
    );
    let marker = format!("CKPT_DIR={}", ckpt.display());
    let start = Instant::now();
    let mut last = None;
    let mut stopped_at = None;
    let mut hot = false;
    while start.elapsed() < Duration::from_secs(300) {
        if let Some(node) = fault.hot_node
            && !hot
            && ckpt.join("iter_0000010.pt").exists()
        {
            // The line Linux's machine-check handler writes when a CPU package overheats.
            let stamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, false);
            std::fs::write(
                kern.join(format!("{node}.log")),
                format!(
                    "{stamp} {node} kernel: mce: CPU0: Core temperature above threshold, cpu clock throttled (total events = 1)\n"
                ),
            )
            .unwrap();
            hot = true;
        }
        if fault.kind == "stop" && stopped_at.is_none() && any_stopped(&marker) {
            stopped_at = Some(DateTime::<Utc>::from(SystemTime::now()));
        }
        if let Some(status) = status(&sandbox, &cluster)
            && status["workflows"][0]["status"] == "completed"
        {
            last = Some(status);
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    engine.stop();
    let log = job_logs(sandbox.path());
    let status = last.unwrap_or_else(|| {
        panic!(
            "did not complete: {:#?}\n{log}\nengine: {}",
            status(&sandbox, &cluster),
            std::fs::read_to_string(sandbox.path().join("engine.err")).unwrap_or_default()
        )
    });
    let mut checkpoints: Vec<String> = std::fs::read_dir(&ckpt)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("iter_"))
        .collect();
    checkpoints.sort();
    let finished = Finished {
        store: Stored::read(&sandbox.db()),
        held: held_jobs(&cluster),
        status,
        log,
        checkpoints,
        stopped_at,
    };
    // Shown with --nocapture, and with a failed assertion.
    eprintln!("{finished}");
    finished
}

impl std::fmt::Display for Finished {
    /// Everything a failed assertion needs: the workflow, what the store holds, the log.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "workflow: {:#}", self.status["workflows"][0])?;
        writeln!(f, "stored evidence lines:")?;
        for (attempt, rank, text) in &self.store.evidence {
            writeln!(f, "  attempt {attempt} rank {rank:?}: {text}")?;
        }
        writeln!(f, "stored tracebacks:")?;
        for (attempt, rank, exception, message) in &self.store.tracebacks {
            writeln!(
                f,
                "  attempt {attempt} rank {rank:?}: {exception}: {message}"
            )?;
        }
        writeln!(
            f,
            "stored checkpoints (attempt, iteration): {:?}",
            self.store.checkpoints
        )?;
        writeln!(f, "held jobs: {:?}", self.held)?;
        write!(f, "{}", self.log)
    }
}

/// Whether a process of the job (its environment holds `marker`) is stopped (state `T`).
fn any_stopped(marker: &str) -> bool {
    processes_with_env(&[marker]).iter().any(|pid| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            // `PID (COMM) STATE ...`: the state follows the last `)`.
            stat.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('T'))
        })
    })
}

/// What the engine stored about the first workflow, read from its SQLite store.
struct Stored {
    /// `(attempt, rank, text)` of every evidence line.
    evidence: Vec<(u32, Option<u32>, String)>,
    /// `(attempt, rank, exception, message)` of every Python traceback.
    tracebacks: Vec<(u32, Option<u32>, String, String)>,
    /// `(attempt, category, culprit, evidence)` of every attribution (culprit and evidence as JSON).
    attributions: Vec<(u32, String, Value, Value)>,
    /// `(attempt, iteration)` of every checkpoint seen saved.
    checkpoints: Vec<(u32, u32)>,
    /// `(attempt, iteration)` of every progress report read.
    iterations: Vec<(u32, u32)>,
}

impl Stored {
    fn read(db: &Path) -> Self {
        let conn =
            rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .unwrap();
        let evidence = conn
            .prepare("SELECT attempt_index, rank, text FROM evidence_lines ORDER BY id")
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let tracebacks = conn
            .prepare("SELECT attempt_index, rank, exception, message FROM tracebacks ORDER BY id")
            .unwrap()
            .query_map([], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?, row.get(3)?))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let attributions = conn
            .prepare(
                "SELECT attempt_index, category, culprit, evidence FROM attributions ORDER BY id",
            )
            .unwrap()
            .query_map([], |row| {
                let culprit: String = row.get(2)?;
                let evidence: String = row.get(3)?;
                Ok((
                    row.get(0)?,
                    row.get(1)?,
                    serde_json::from_str(&culprit).unwrap_or(Value::String(culprit)),
                    serde_json::from_str(&evidence).unwrap_or(Value::String(evidence)),
                ))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let checkpoints = conn
            .prepare("SELECT attempt_index, iteration FROM checkpoints ORDER BY id")
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let iterations = conn
            .prepare("SELECT attempt_index, iteration FROM throughput ORDER BY id")
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        Self {
            evidence,
            tracebacks,
            attributions,
            checkpoints,
            iterations,
        }
    }

    /// The evidence lines of `attempt` that contain `text`.
    fn evidence_of(&self, attempt: u32, text: &str) -> Vec<&(u32, Option<u32>, String)> {
        self.evidence
            .iter()
            .filter(|(index, _, line)| *index == attempt && line.contains(text))
            .collect()
    }
}

/// The first attempt failed, the second ran on other nodes than n2 (excluded) and resumed from the
/// checkpoint of iteration 10 to the end; nothing is left held.
fn assert_requeued_and_resumed(finished: &Finished) {
    let workflow = &finished.status["workflows"][0];
    assert_eq!(workflow["succeeded"], true, "{finished}");
    let attempts = workflow["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{finished}");
    assert_eq!(attempts[0]["job_id"], attempts[1]["job_id"], "requeued");
    assert_eq!(workflow["requeues_used"], 1, "{finished}");
    assert!(strings(&attempts[0]["nodes"]).contains(&"n2".to_string()));
    assert_eq!(workflow["last_checkpoint_iteration"], 30, "{finished}");
    assert!(
        finished.log.contains(" loading checkpoint from ")
            && finished.log.contains("successfully loaded checkpoint from")
            && finished.log.contains("] at iteration 10"),
        "the new attempt resumes from iteration 10: {finished}"
    );
    assert!(
        finished.log.contains("restart 1")
            && finished.log.contains("iteration       11/      30")
            && finished.log.contains("training complete at iteration 30"),
        "{finished}"
    );
    assert!(
        !finished.log.contains("iteration        1/"),
        "the new attempt started over: {finished}"
    );
    assert_eq!(
        finished.checkpoints,
        ["iter_0000010.pt", "iter_0000020.pt", "iter_0000030.pt"]
    );
    assert!(finished.held.is_empty(), "held: {:?}", finished.held);
}

/// The requeue ran without n2: excluded, and not among the second attempt's nodes.
fn assert_second_attempt_without_n2(finished: &Finished) {
    let workflow = &finished.status["workflows"][0];
    let attempts = workflow["attempts"].as_array().unwrap();
    assert!(
        strings(&attempts[1]["excluded_nodes"]).contains(&"n2".to_string()),
        "{finished}"
    );
    assert!(
        !strings(&attempts[1]["nodes"]).contains(&"n2".to_string()),
        "{finished}"
    );
}

/// The job whose last rank (3, on n2) SIGKILLs itself at iteration 15 of its first run: run once for
/// the tests that read it.
fn killed() -> &'static Finished {
    static KILLED: OnceLock<Finished> = OnceLock::new();
    KILLED.get_or_init(|| {
        run_ddp(Fault {
            kind: "kill",
            collective_timeout_secs: 10,
            ..Fault::healthy()
        })
    })
}

#[test]
fn a_ddp_rank_killed_on_n2_is_requeued_without_n2_and_resumes_from_its_checkpoint() {
    if !ddp_available() {
        return;
    }
    let finished = killed();
    assert_requeued_and_resumed(finished);
    let workflow = &finished.status["workflows"][0];
    let attribution = &workflow["attributions"][0];
    assert_eq!(attribution["attempt_index"], 0, "{finished}");
    assert_eq!(attribution["culprit"]["node"], "n2", "{finished}");
    assert_eq!(attribution["recoverable"], true, "{finished}");
    assert_second_attempt_without_n2(finished);
    // Slurm's word for the killed rank, and gloo's for the connections it left as PyTorch raised it.
    let evidence = strings(&attribution["evidence"]).join("\n");
    assert!(
        evidence.contains("srun: error: n2: task 3: Killed")
            && evidence.contains("RuntimeError: [./gloo/transport/tcp/pair.cc:"),
        "{finished}"
    );
    assert!(
        !finished
            .store
            .evidence_of(0, "srun: error: n2: task 3: Killed")
            .is_empty(),
        "{finished}"
    );
    assert!(
        finished
            .store
            .tracebacks
            .iter()
            .any(|(attempt, rank, exception, message)| {
                *attempt == 0
                    && rank.is_some_and(|rank| rank < 3)
                    && exception == "RuntimeError"
                    && message.contains("gloo/transport/tcp/pair.cc")
                    && (message.contains("Connection closed by peer")
                        || message.contains("Connection reset by peer"))
            }),
        "{finished}"
    );
    let (attempt, category, culprit, _) = &finished.store.attributions[0];
    assert_eq!(*attempt, 0);
    assert_eq!(category, attribution["category"].as_str().unwrap());
    assert_eq!(culprit["node"], "n2");
}

#[test]
fn the_culprit_of_a_killed_ddp_rank_is_the_task_slurm_reports_killed() {
    if !ddp_available() {
        return;
    }
    let finished = killed();
    let culprit = &finished.status["workflows"][0]["attributions"][0]["culprit"];
    assert_eq!(culprit["node"], "n2", "{finished}");
    assert_eq!(culprit["rank"], 3, "{finished}");
}

#[test]
fn each_attempt_of_a_requeued_ddp_job_keeps_its_own_log_lines() {
    if !ddp_available() {
        return;
    }
    let finished = killed();
    let attempts = finished.status["workflows"][0]["attempts"]
        .as_array()
        .unwrap();
    // The first run died at iteration 15, before logging it.
    assert_eq!(attempts[0]["last_iteration"], 14, "{finished}");
    assert!(
        finished
            .store
            .evidence_of(1, "srun: error: n2: task 3: Killed")
            .is_empty(),
        "{finished}"
    );
    assert!(
        finished
            .store
            .tracebacks
            .iter()
            .all(|(attempt, ..)| *attempt == 0),
        "{finished}"
    );
    assert_eq!(
        finished.store.checkpoints,
        [(0, 10), (1, 20), (1, 30)],
        "{finished}"
    );
}

#[test]
fn a_ddp_rank_stopped_while_the_others_wait_in_all_reduce_is_a_hang_requeued_and_resumed() {
    if !ddp_available() {
        return;
    }
    // The others would wait two minutes in the all-reduce: only the engine's heartbeat ends it.
    let finished = run_ddp(Fault {
        kind: "stop",
        collective_timeout_secs: 120,
        ..Fault::healthy()
    });
    assert_requeued_and_resumed(&finished);
    let workflow = &finished.status["workflows"][0];
    let attempts = workflow["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["state"], "requeued", "{finished}");
    let hang = workflow["anomalies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|anomaly| anomaly["kind"] == "hang")
        .unwrap_or_else(|| panic!("no hang: {finished}"));
    assert_eq!(hang["attempt_index"], 0, "{finished}");
    // Detected within the heartbeat (and a few seconds of polling) of the rank's stop.
    let stopped_at = finished.stopped_at.expect("the rank was seen stopped");
    let detected: DateTime<Utc> = hang["time"].as_str().unwrap().parse().unwrap();
    let after = (detected - stopped_at).num_milliseconds() as f64 / 1000.0;
    eprintln!("hang detected {after:.1} s after the rank stopped (heartbeat {HEARTBEAT_SECS} s)");
    assert!(
        after <= (HEARTBEAT_SECS + 5) as f64,
        "hang detected {after:.1} s after the stop: {finished}"
    );
    assert!(after > 0.0, "detected before the stop: {finished}");
    // No collective timed out: the others were still waiting when the engine ended the job.
    assert!(
        finished
            .store
            .evidence_of(0, "Timed out waiting")
            .is_empty(),
        "{finished}"
    );
    let ended = workflow["journal"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|entry| entry["decision"].as_str())
        .any(|decision| decision.contains("ended the running job"));
    assert!(ended, "{finished}");
}

#[test]
fn a_python_error_in_a_ddp_rank_is_not_requeued() {
    if !ddp_available() {
        return;
    }
    let finished = run_ddp(Fault {
        kind: "error",
        collective_timeout_secs: 10,
        ..Fault::healthy()
    });
    let workflow = &finished.status["workflows"][0];
    assert_eq!(workflow["succeeded"], false, "{finished}");
    assert_eq!(workflow["attempts"].as_array().unwrap().len(), 1);
    assert_eq!(workflow["requeues_used"], 0);
    let reason = workflow["status_reason"].as_str().unwrap();
    assert!(reason.contains("not recoverable"), "{finished}");
    let attribution = &workflow["attributions"][0];
    assert_eq!(attribution["category"], "app_exception", "{finished}");
    assert_eq!(attribution["component"], "application", "{finished}");
    assert_eq!(attribution["recoverable"], false, "{finished}");
    // The rank that raised it, on its node.
    assert_eq!(attribution["culprit"]["rank"], 3, "{finished}");
    assert_eq!(attribution["culprit"]["node"], "n2", "{finished}");
    // torch's own message, from the rank that raised it.
    let shapes = "mat1 and mat2 shapes cannot be multiplied (8x16 and 8x16)";
    assert!(
        strings(&attribution["evidence"])
            .join("\n")
            .contains(shapes),
        "{finished}"
    );
    assert!(
        finished
            .store
            .tracebacks
            .iter()
            .any(|(attempt, rank, exception, message)| *attempt == 0
                && *rank == Some(3)
                && exception == "RuntimeError"
                && message.contains(shapes)),
        "{finished}"
    );
    assert_eq!(finished.store.attributions.len(), 1);
    assert_eq!(finished.store.attributions[0].1, "app_exception");
    let actions = workflow["actions"].as_array().unwrap();
    assert!(
        actions.iter().all(|action| action["kind"] != "requeue"),
        "{finished}"
    );
    assert!(finished.held.is_empty(), "held: {:?}", finished.held);
    // The first run's checkpoint stays; nothing ran after the error.
    assert_eq!(finished.checkpoints, ["iter_0000010.pt"]);
}

#[test]
fn a_thermal_precursor_on_n2_makes_the_ddp_job_save_requeue_itself_and_resume_off_n2() {
    if !ddp_available() {
        return;
    }
    let finished = run_ddp(Fault {
        hot_node: Some("n2"),
        requeue_on_usr1: true,
        ..Fault::healthy()
    });
    let workflow = &finished.status["workflows"][0];
    assert_eq!(workflow["succeeded"], true, "{finished}");
    let attempts = workflow["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{finished}");
    assert!(strings(&attempts[0]["nodes"]).contains(&"n2".to_string()));
    assert_second_attempt_without_n2(&finished);
    let actions = workflow["actions"].as_array().unwrap();
    let kinds: Vec<(&str, &str)> = actions
        .iter()
        .map(|a| (a["kind"].as_str().unwrap(), a["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [("checkpoint_now", "done"), ("requeue", "done")],
        "{finished}"
    );
    // No failure was decided: the run moved before anything broke.
    assert!(
        workflow["attributions"].as_array().unwrap().is_empty(),
        "{finished}"
    );
    // The save the signal asked for is the one the second attempt resumes from...
    let saved = finished
        .store
        .checkpoints
        .iter()
        .filter(|(attempt, _)| *attempt == 0)
        .map(|(_, iteration)| *iteration)
        .max()
        .unwrap();
    assert!(saved > 10, "a save besides the scheduled ones: {finished}");
    assert!(
        finished.log.contains(&format!("] at iteration {saved}")),
        "resumed from iteration {saved}: {finished}"
    );
    // ...and the first attempt got at most one iteration past it.
    let reached = finished
        .store
        .iterations
        .iter()
        .filter(|(attempt, _)| *attempt == 0)
        .map(|(_, iteration)| *iteration)
        .max()
        .unwrap();
    assert!(
        reached <= saved + 1,
        "lost {} iterations: {finished}",
        reached - saved
    );
    assert!(finished.held.is_empty(), "held: {:?}", finished.held);
}
