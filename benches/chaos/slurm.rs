//! Chaos on the local Slurm of tests/slurm/cluster.sh: a two-node job that fails on its first run,
//! runguard killed and restarted around its recovery (also between the steps of the requeue: held,
//! not yet released), then checked against `scontrol show job` and the store. And the controller gone
//! for minutes in the middle of a recovery.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::chaos::check::{self, Facts, SchedulerJob};
use crate::chaos::receiver::Receiver;
use crate::chaos::{Kill, Outcome, Rng, Sandbox, Stop, recovery_secs, run_plan, terminate};
use crate::lab::Cluster;

/// Every named point: on Slurm the requeue has steps to stop between.
pub const POINTS: [&str; 6] = [
    "failure_recorded",
    "action_executing",
    "requeue_held",
    "action_ran",
    "alert_sent",
    "store_commit",
];

/// Fails with an NCCL timeout two seconds in on its first run, trains briefly on a restart.
const JOB: &str = r#"#!/bin/bash
#SBATCH --comment='{"APS": {"auto_resume_mode": "requeue", "max_requeue_times": 3}}'
#SBATCH -N 2
#SBATCH -o LOGDIR/%x_%j.log
if [ "${SLURM_RESTART_COUNT:-0}" = "0" ]; then
  srun -l bash -c 'sleep 2; if [ "$SLURM_PROCID" = 1 ]; then echo "$SLURMD_NODENAME:4242:4243 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.9<1234> with status=12 opcode=0 len=0 vendor err 129 (Recv)"; fi; echo "[Rank $SLURM_PROCID] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600050 milliseconds before timing out."; exit 1'
  exit 1
fi
srun -l bash -c 'sleep 3'
"#;

/// The engine's poll interval and backoff cap in the trials, seconds.
const POLL_SECS: f64 = 1.0;
const CAP_SECS: f64 = 30.0;

/// How long a trial may take.
const DEADLINE: Duration = Duration::from_secs(300);

/// The kills of trial `seed`: one or two, mostly at named points.
pub fn plan(seed: u64) -> Vec<Kill> {
    let mut rng = Rng::new(seed);
    (0..rng.range(1, 2))
        .map(|_| {
            if rng.unit() < 0.7 {
                // The point only a real scheduler has (a requeue in steps) gets a third of them.
                let point = if rng.unit() < 0.33 {
                    "requeue_held"
                } else {
                    POINTS[rng.range(0, POINTS.len() as u64 - 1) as usize]
                };
                let passage = match point {
                    "store_commit" => rng.range(1, 60),
                    "alert_sent" => rng.range(1, 3),
                    _ => 1,
                };
                Kill::At { point, passage }
            } else {
                // The recovery is over within seconds of the failure (two seconds into the run).
                Kill::After(Duration::from_secs_f64(0.3 + rng.unit() * 6.0))
            }
        })
        .collect()
}

/// A sandbox under `work` with the config and the job script, and the job submitted held.
struct Setup {
    sandbox: Sandbox,
    receiver: Receiver,
    job_id: String,
}

fn setup(cluster: &Cluster, work: &Path, bin: &Path) -> Result<Setup, String> {
    let mut sandbox = Sandbox::within(bin, work);
    sandbox.env = cluster.env().to_vec();
    let receiver = Receiver::start();
    sandbox.write_config(&format!(
        "[engine]\npoll_interval_secs = {POLL_SECS:.1}\nmax_backoff_secs = {CAP_SECS}\n\n[backend]\nkind = \"slurm\"\n\n\
         [recovery]\nwhitelist = [\"requeue\"]\n\n\
         [alerts]\nretry_initial_secs = 1\nretry_max_secs = 2\nflush_on_exit_secs = 1\n\n\
         [[alerts.channels]]\nname = \"hook\"\nkind = \"webhook\"\nurl = \"{}\"\n",
        receiver.url()
    ));
    let script = sandbox.dir.path().join("train.sbatch");
    std::fs::write(
        &script,
        JOB.replace("LOGDIR", &sandbox.dir.path().display().to_string()),
    )
    .map_err(|e| e.to_string())?;
    let submitted = cluster
        .command("sbatch")
        .args(["--parsable", "--hold", "-J", "chaos"])
        .arg(&script)
        .output()
        .map_err(|e| e.to_string())?;
    let job_id = String::from_utf8_lossy(&submitted.stdout)
        .trim()
        .to_string();
    if job_id.is_empty() {
        return Err(format!(
            "sbatch: {}",
            String::from_utf8_lossy(&submitted.stderr)
        ));
    }
    // An engine enrols the job while it waits, then stops; the job is let go.
    let mut engine = sandbox.spawn(99, &[]);
    let began = Instant::now();
    while !enrolled(&sandbox, &job_id) {
        if began.elapsed() > Duration::from_secs(60) {
            terminate(&mut engine);
            return Err(format!("job {job_id} was never enrolled"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    terminate(&mut engine);
    cluster
        .command("scontrol")
        .args(["release", &job_id])
        .status()
        .map_err(|e| e.to_string())?;
    Ok(Setup {
        sandbox,
        receiver,
        job_id,
    })
}

fn enrolled(sandbox: &Sandbox, job_id: &str) -> bool {
    rusqlite::Connection::open_with_flags(sandbox.db(), rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .and_then(|conn| {
            conn.query_row(
                "SELECT COUNT(*) FROM attempts WHERE job_id = ?1",
                [job_id],
                |row| row.get::<_, i64>(0),
            )
        })
        .is_ok_and(|n| n > 0)
}

/// The job as `scontrol show job -o` records it.
fn scheduler_job(cluster: &Cluster, job_id: &str) -> Result<SchedulerJob, String> {
    let output = cluster
        .command("scontrol")
        .args(["show", "job", "-o", job_id])
        .output()
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let field = |name: &str| {
        text.split_whitespace()
            .find_map(|word| word.strip_prefix(&format!("{name}=")))
            .map(str::to_string)
    };
    let restarts = field("Restarts")
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| format!("scontrol show job {job_id}: {text}"))?;
    let state = field("JobState").unwrap_or_default();
    let reason = field("Reason").unwrap_or_default();
    Ok(SchedulerJob {
        job_id: job_id.to_string(),
        restart_count: restarts,
        completed: state == "COMPLETED",
        held: reason.starts_with("JobHeld") || field("Priority").as_deref() == Some("0"),
    })
}

/// Waits until the job has ended (or the deadline passed), so its record is final.
fn wait_for_end(cluster: &Cluster, job_id: &str, since: Instant) {
    while since.elapsed() < DEADLINE {
        match scheduler_job(cluster, job_id) {
            Ok(job) if job.completed || job.held => return,
            _ => std::thread::sleep(Duration::from_millis(500)),
        }
    }
}

/// The store's facts about the trial's job only: a fresh store also enrols the jobs earlier trials
/// left in the controller's memory.
fn facts(cluster: &Cluster, setup: &Setup) -> (Facts, Vec<String>) {
    let mut violations = Vec::new();
    let mut facts = Facts::default();
    match scheduler_job(cluster, &setup.job_id) {
        Ok(job) => facts.jobs.push(job),
        Err(err) => violations.push(err),
    }
    facts.injected.insert(setup.job_id.clone(), 1);
    if let Err(err) = check::read_store(&setup.sandbox.db(), &mut facts) {
        violations.push(format!("reading the store: {err}"));
    }
    facts
        .workflows
        .retain(|(_, _, jobs)| jobs.contains(&setup.job_id));
    let ours: Vec<i64> = facts.workflows.iter().map(|(id, _, _)| *id).collect();
    if ours.len() != 1 {
        violations.push(format!(
            "job {} is in {} workflows",
            setup.job_id,
            ours.len()
        ));
    }
    facts.received = setup.receiver.by_key();
    (facts, violations)
}

/// One trial: the job's recovery with the engine killed as `kills` says.
pub fn trial(cluster: &Cluster, work: &Path, bin: &Path, kills: &[Kill]) -> Outcome {
    let started = Instant::now();
    let setup = match setup(cluster, work, bin) {
        Ok(setup) => setup,
        Err(err) => {
            return Outcome {
                stops: Vec::new(),
                violations: vec![err],
                repeats: 0,
                recovery_secs: Vec::new(),
                wall: started.elapsed(),
            };
        }
    };
    let (stops, mut violations) = run_plan(&setup.sandbox, kills);
    wait_for_end(cluster, &setup.job_id, started);
    let (facts, found) = facts(cluster, &setup);
    violations.extend(found);
    violations.extend(facts.violations());
    finish(setup, stops, violations, facts.repeats(), started)
}

fn finish(
    setup: Setup,
    stops: Vec<Stop>,
    mut violations: Vec<String>,
    repeats: usize,
    started: Instant,
) -> Outcome {
    let recovery_secs = recovery_secs(&setup.sandbox.db());
    if !violations.is_empty() && std::env::var_os("RUNGUARD_CHAOS_KEEP").is_some() {
        let kept = setup.sandbox.dir.keep();
        violations.push(format!("sandbox kept at {}", kept.display()));
    }
    Outcome {
        stops,
        violations,
        repeats,
        recovery_secs,
        wall: started.elapsed(),
    }
}

/// What the controller outage showed.
pub struct OutageReport {
    pub outcome: Outcome,
    /// Scheduler calls that failed while the controller was gone.
    pub failed_calls: i64,
    pub outage: Duration,
    /// From the controller's return to the job running its second attempt.
    pub resumed_after: Option<Duration>,
}

/// The engine stopped between the steps of the requeue (the job held), the controller stopped,
/// an engine started meanwhile for `outage`, then the controller started again: the engine must
/// back off, not act, and finish the requeue once the controller answers.
pub fn outage(cluster: &Cluster, work: &Path, bin: &Path, outage: Duration) -> OutageReport {
    let started = Instant::now();
    let report = |outcome, failed_calls, resumed_after| OutageReport {
        outcome,
        failed_calls,
        outage,
        resumed_after,
    };
    let setup = match setup(cluster, work, bin) {
        Ok(setup) => setup,
        Err(err) => {
            let outcome = Outcome {
                stops: Vec::new(),
                violations: vec![err],
                repeats: 0,
                recovery_secs: Vec::new(),
                wall: started.elapsed(),
            };
            return report(outcome, 0, None);
        }
    };
    let mut violations = Vec::new();
    let mut stops = Vec::new();
    let kill = Kill::At {
        point: "requeue_held",
        passage: 1,
    };
    let mut engine = setup
        .sandbox
        .spawn(0, &[("RUNGUARD_CHAOS_ABORT_AT", kill.describe())]);
    let began = Instant::now();
    loop {
        if let Ok(Some(_)) = engine.try_wait() {
            stops.push(Stop::Aborted(kill.describe()));
            break;
        }
        if began.elapsed() > Duration::from_secs(120) {
            let _ = engine.kill();
            let _ = engine.wait();
            violations.push("the requeue never reached its hold".to_string());
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    if let Err(err) = cluster.control("stop-ctld") {
        violations.push(format!("stop-ctld: {err}"));
    }
    let warnings_before = backend_warnings(&setup.sandbox.db());
    let mut engine = setup.sandbox.spawn(1, &[]);
    std::thread::sleep(outage);
    let failed_calls = backend_warnings(&setup.sandbox.db()) - warnings_before;
    // Backoff: the poll interval (1 s) doubled after each failure up to the cap (30 s): a few calls
    // to reach the cap, then one per cap. Calling at every tick would be hundreds.
    let bound = 2
        + (POLL_SECS / CAP_SECS).log2().abs().ceil() as i64
        + (outage.as_secs_f64() / CAP_SECS) as i64;
    if failed_calls > bound {
        violations.push(format!(
            "{failed_calls} scheduler calls failed in {} s of outage, more than the backoff allows ({bound})",
            outage.as_secs()
        ));
    }
    if let Err(err) = cluster.control("start-ctld") {
        violations.push(format!("start-ctld: {err}"));
    }
    let back = Instant::now();
    let mut resumed_after = None;
    while back.elapsed() < DEADLINE && !setup.sandbox.settled() {
        if resumed_after.is_none()
            && scheduler_job(cluster, &setup.job_id)
                .is_ok_and(|job| job.restart_count >= 1 && !job.held)
            && job_running(cluster, &setup.job_id)
        {
            resumed_after = Some(back.elapsed());
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    terminate(&mut engine);
    wait_for_end(cluster, &setup.job_id, back);
    let (facts, found) = facts(cluster, &setup);
    violations.extend(found);
    violations.extend(facts.violations());
    let repeats = facts.repeats();
    let outcome = finish(setup, stops, violations, repeats, started);
    report(outcome, failed_calls, resumed_after)
}

fn job_running(cluster: &Cluster, job_id: &str) -> bool {
    cluster
        .command("squeue")
        .args(["-h", "-o", "%T", "-j", job_id])
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "RUNNING")
}

/// How many scheduler calls failed so far (the engine counts each as a `backend_unavailable` warning).
fn backend_warnings(db: &Path) -> i64 {
    rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .and_then(|conn| {
            conn.query_row(
                "SELECT COALESCE(SUM(count), 0) FROM warnings WHERE kind = 'backend_unavailable'",
                [],
                |row| row.get(0),
            )
        })
        .unwrap_or(0)
}
