//! Chaos trials: the headless engine on the simulated cluster, killed (SIGKILL at a random moment, or
//! aborted at a named point of `runguard_engine::chaos`) and restarted until the run is over, then
//! checked against the scheduler's record and the store. Shared by `tests/chaos.rs` and
//! `benches/chaos.rs`; it needs nothing of the rest of the support module.

// The test and the benchmark each use a part of it.
#![allow(dead_code)]

pub mod check;
pub mod receiver;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use check::Facts;
use receiver::Receiver;

/// The points a trial on the simulated cluster can abort at (`requeue_held` is Slurm's: the
/// simulated requeue is one step).
pub const SIM_POINTS: [&str; 5] = [
    "failure_recorded",
    "action_executing",
    "action_ran",
    "alert_sent",
    "store_commit",
];

/// The scenarios played, with the failures each injects into its one job and its length in sim seconds.
const SCENARIOS: [(&str, u32, f64); 2] = [("xid79", 1, 1300.0), ("nccl-timeout", 1, 2200.0)];

/// How long a trial may take before it counts as hung (a violation).
const TRIAL_DEADLINE: Duration = Duration::from_secs(240);

/// A small seeded generator (SplitMix64): a trial is the same for the same seed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `low..=high`.
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One way to stop an engine.
#[derive(Debug, Clone, PartialEq)]
pub enum Kill {
    /// Abort at the `passage`-th pass of the named point.
    At { point: &'static str, passage: u64 },
    /// SIGKILL after this long.
    After(Duration),
}

impl Kill {
    pub fn describe(&self) -> String {
        match self {
            Self::At { point, passage } => format!("{point}:{passage}"),
            Self::After(after) => format!("sigkill@{:.2}s", after.as_secs_f64()),
        }
    }
}

/// What happened to one engine run of a trial.
#[derive(Debug, Clone, PartialEq)]
pub enum Stop {
    /// Aborted at the named point, as planned.
    Aborted(String),
    /// Killed with SIGKILL after this long.
    Killed(Duration),
    /// The run was over before the kill came (the point was not passed that often).
    Missed(String),
}

/// A trial: a scenario, its seed, and the kills before the last, clean run.
#[derive(Debug, Clone)]
pub struct SimTrial {
    pub seed: u64,
    pub scenario: &'static str,
    pub injected: u32,
    pub speed: u32,
    pub kills: Vec<Kill>,
}

impl SimTrial {
    /// The trial of `seed`: one to three kills, each at a named point (spread over its passages) or
    /// at a random moment of the run.
    pub fn planned(seed: u64, speed: u32) -> Self {
        let mut rng = Rng::new(seed);
        let (scenario, injected, length) = SCENARIOS[rng.range(0, 1) as usize];
        let real = length / f64::from(speed);
        let kills = (0..rng.range(1, 3))
            .map(|_| {
                if rng.unit() < 0.65 {
                    let point = SIM_POINTS[rng.range(0, SIM_POINTS.len() as u64 - 1) as usize];
                    // A store write happens at every tick: its passages spread over the whole run.
                    let passage = match point {
                        "store_commit" => rng.range(1, 400),
                        "alert_sent" => rng.range(1, 4),
                        _ => 1,
                    };
                    Kill::At { point, passage }
                } else {
                    Kill::After(Duration::from_secs_f64(0.2 + rng.unit() * real))
                }
            })
            .collect();
        Self {
            seed,
            scenario,
            injected,
            speed,
            kills,
        }
    }
}

/// How a trial ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub stops: Vec<Stop>,
    pub violations: Vec<String>,
    /// Alert requests received again for a key already received.
    pub repeats: usize,
    /// Per recovered failure: sim seconds from the failure recorded to the restart done.
    pub recovery_secs: Vec<f64>,
    pub wall: Duration,
}

/// A sandbox of its own: config, store and the simulated cluster's files.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    bin: PathBuf,
    /// Set in every engine's environment (a Slurm cluster's `SLURM_CONF` and `PATH`).
    pub env: Vec<(String, String)>,
}

impl Sandbox {
    pub fn new(bin: &Path) -> Self {
        Self::within(bin, &std::env::temp_dir())
    }

    /// A sandbox under `parent` (where a Slurm cluster's jobs can see it).
    pub fn within(bin: &Path, parent: &Path) -> Self {
        Self {
            dir: tempfile::tempdir_in(parent).unwrap(),
            bin: bin.to_path_buf(),
            env: Vec::new(),
        }
    }

    pub fn db(&self) -> PathBuf {
        self.dir.path().join("runguard.sqlite")
    }

    pub fn sim_state(&self) -> PathBuf {
        self.dir.path().join("sim").join("state.json")
    }

    fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    pub fn write_config(&self, text: &str) {
        std::fs::write(self.config_path(), text).unwrap();
    }

    /// `runguard run --auto` with `env`, its output in `engine-N.log`.
    pub fn spawn(&self, run: usize, env: &[(&str, String)]) -> Child {
        let log = std::fs::File::create(self.dir.path().join(format!("engine-{run}.log"))).unwrap();
        let mut command = Command::new(&self.bin);
        command
            .arg("--config")
            .arg(self.config_path())
            .arg("--db")
            .arg(self.db())
            .args(["run", "--auto"])
            .env("XDG_CONFIG_HOME", self.dir.path().join("xdg-config"))
            .env("XDG_DATA_HOME", self.dir.path().join("xdg-data"))
            .env_remove("RUNGUARD_CONFIG")
            .env_remove("RUNGUARD_DB")
            .env_remove("RUNGUARD_CHAOS_ABORT_AT")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        for (key, value) in &self.env {
            command.env(key, value);
        }
        for (key, value) in env {
            command.env(key, value);
        }
        command.spawn().unwrap()
    }

    /// Every workflow completed, no action waiting to run, no alert waiting to be queued or to go out.
    pub fn settled(&self) -> bool {
        let Ok(conn) = rusqlite::Connection::open_with_flags(
            self.db(),
            rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
        ) else {
            return false;
        };
        let count = |sql: &str| -> i64 { conn.query_row(sql, [], |row| row.get(0)).unwrap_or(-1) };
        count("SELECT COUNT(*) FROM workflows") > 0
            && count("SELECT COUNT(*) FROM workflows WHERE status != 'completed'") == 0
            && count("SELECT COUNT(*) FROM actions WHERE state IN ('approved', 'executing')") == 0
            && count("SELECT COUNT(*) FROM alert_deliveries WHERE state = 'pending'") == 0
            // Every notification was turned into deliveries.
            && count(
                "SELECT COUNT(*) FROM notifications WHERE id > \
                 (SELECT COALESCE(MAX(last_notification_id), 0) FROM alert_cursor)",
            ) == 0
    }
}

/// Sends SIGTERM and waits for the end (SIGKILL after 20 s).
pub fn terminate(child: &mut Child) {
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Runs `trial` with the `runguard` binary at `bin`.
pub fn run_sim_trial(bin: &Path, trial: &SimTrial) -> Outcome {
    let started = Instant::now();
    let sandbox = Sandbox::new(bin);
    let receiver = Receiver::start();
    sandbox.write_config(&format!(
        "[sim]\nscenario = \"{}\"\nseed = {}\nspeed = {}.0\ndir = \"{}\"\n\n\
         [recovery]\nwhitelist = [\"requeue\"]\n\n\
         [alerts]\nretry_initial_secs = 1\nretry_max_secs = 2\nflush_on_exit_secs = 1\n\n\
         [[alerts.channels]]\nname = \"hook\"\nkind = \"webhook\"\nurl = \"{}\"\n",
        trial.scenario,
        trial.seed,
        trial.speed,
        sandbox.dir.path().join("sim").display(),
        receiver.url()
    ));
    let (stops, mut violations) = run_plan(&sandbox, &trial.kills);
    let mut facts = Facts::default();
    match check::read_sim_state(&sandbox.sim_state()) {
        Ok(jobs) => {
            for job in &jobs {
                facts.injected.insert(job.job_id.clone(), trial.injected);
            }
            facts.jobs = jobs;
        }
        Err(err) => violations.push(err),
    }
    if let Err(err) = check::read_store(&sandbox.db(), &mut facts) {
        violations.push(format!("reading the store: {err}"));
    }
    facts.received = receiver.by_key();
    violations.extend(facts.violations());
    let recovery_secs = recovery_secs(&sandbox.db());
    if !violations.is_empty() && std::env::var_os("RUNGUARD_CHAOS_KEEP").is_some() {
        let kept = sandbox.dir.keep();
        violations.push(format!("sandbox kept at {}", kept.display()));
    }
    Outcome {
        stops,
        violations,
        repeats: facts.repeats(),
        recovery_secs,
        wall: started.elapsed(),
    }
}

/// Runs an engine per kill of `kills`, each stopped as planned, then a last one undisturbed until
/// the sandbox is settled; what stopped each run, and what went wrong on the way.
pub fn run_plan(sandbox: &Sandbox, kills: &[Kill]) -> (Vec<Stop>, Vec<String>) {
    use std::os::unix::process::ExitStatusExt;

    let mut stops = Vec::new();
    let mut violations = Vec::new();
    for (run, kill) in kills.iter().enumerate() {
        let env = match kill {
            Kill::At { .. } => vec![("RUNGUARD_CHAOS_ABORT_AT", kill.describe())],
            Kill::After(_) => Vec::new(),
        };
        let mut engine = sandbox.spawn(run, &env);
        let began = Instant::now();
        let stop = loop {
            if let Ok(Some(status)) = engine.try_wait() {
                if status.signal() == Some(6) {
                    break Stop::Aborted(kill.describe());
                }
                violations.push(format!(
                    "engine run {run} ended by itself ({status}) before {}",
                    kill.describe()
                ));
                break Stop::Missed(kill.describe());
            }
            if let Kill::After(after) = kill
                && began.elapsed() >= *after
            {
                let _ = engine.kill();
                break Stop::Killed(*after);
            }
            if sandbox.settled() || began.elapsed() > TRIAL_DEADLINE {
                let _ = engine.kill();
                break Stop::Missed(kill.describe());
            }
            std::thread::sleep(Duration::from_millis(10));
        };
        let _ = engine.wait();
        stops.push(stop);
    }
    // The last run, undisturbed, to the end of the scenario.
    let mut engine = sandbox.spawn(kills.len(), &[]);
    let began = Instant::now();
    while !sandbox.settled() && began.elapsed() < TRIAL_DEADLINE {
        if let Ok(Some(status)) = engine.try_wait() {
            violations.push(format!("the last engine run ended by itself ({status})"));
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    terminate(&mut engine);
    if !sandbox.settled() {
        violations.push(format!("not settled after {} s", TRIAL_DEADLINE.as_secs()));
    }
    (stops, violations)
}

/// Sim seconds from each recorded failure to the restart action that recovered it.
pub fn recovery_secs(db: &Path) -> Vec<f64> {
    let Ok(conn) =
        rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
    else {
        return Vec::new();
    };
    let Ok(mut query) = conn.prepare(
        "SELECT t.time, a.updated_at FROM actions a JOIN attributions t \
         ON t.workflow_id = a.workflow_id AND t.attempt_index = a.attempt_index \
         WHERE a.state = 'done' AND a.kind IN ('requeue', 'resubmit', 'recreate')",
    ) else {
        return Vec::new();
    };
    let parse = |text: &str| chrono::DateTime::parse_from_rfc3339(text).ok();
    query
        .query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
        })
        .map(|rows| {
            rows.flatten()
                .filter_map(|(failed, done)| {
                    Some((parse(&done)? - parse(&failed)?).as_seconds_f64())
                })
                .collect()
        })
        .unwrap_or_default()
}
