//! The `runguard` command line: picks a frontend and hands it the engine.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Parser, Subcommand};

use runguard::headless::{self, EventLog, HeadlessOptions};
use runguard_engine::config::{BackendKind, Config};
use runguard_engine::engine::apply_command;
use runguard_engine::recover::Policy;
use runguard_engine::store::lock::{EngineLock, LockError};
use runguard_engine::store::{CommandKind, Store};

/// Keeps long-running distributed training jobs alive: watches them, attributes failures to a cause and a
/// node, and requeues them from their last checkpoint on healthy nodes.
#[derive(Debug, Parser)]
#[command(name = "runguard", version, propagate_version = true)]
struct Cli {
    /// Config file (default: config.toml in the XDG config dir, if it exists).
    #[arg(long, global = true, env = "RUNGUARD_CONFIG", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Store file (default: the config's store.path, else runguard.sqlite in the XDG data dir).
    #[arg(long, global = true, env = "RUNGUARD_DB", value_name = "FILE")]
    db: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The interactive cockpit (the default): runs the engine here, or views the one already running.
    Cockpit {
        /// Run whitelisted actions without approval, as `run --auto` does.
        #[arg(long)]
        auto: bool,
    },
    /// Run a scenario on the embedded simulated cluster, recover it automatically, and print a summary.
    Demo {
        /// Scenario name (see --list) or path to a scenario TOML file.
        #[arg(long)]
        scenario: Option<String>,
        /// Seed for everything random in the simulation.
        #[arg(long)]
        seed: Option<u64>,
        /// Simulated seconds per real second.
        #[arg(long)]
        speed: Option<f64>,
        /// List the built-in scenarios and exit.
        #[arg(long)]
        list: bool,
        /// Log events as JSON lines instead of readable lines.
        #[arg(long)]
        json: bool,
    },
    /// Run the engine headless until SIGINT/SIGTERM.
    Run {
        /// Apply whitelisted actions without approval; without it every action is only proposed.
        #[arg(long)]
        auto: bool,
    },
    /// Show workflows, attempts, anomalies, attributions and actions.
    Status {
        /// Only this workflow.
        workflow: Option<i64>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// A recovery report of one workflow: each failure with its evidence, attribution, the actions taken
    /// and those runguard would have taken but was not permitted to, and the downtime split. With
    /// `[narrative]` configured, a language model's narrative is appended, labelled as such.
    Report {
        /// Workflow id (see `runguard status`), or a job id one of its attempts ran as.
        id: String,
        /// Print JSON instead of text.
        #[arg(long, conflicts_with = "markdown")]
        json: bool,
        /// Print Markdown instead of text.
        #[arg(long)]
        markdown: bool,
    },
    /// Capacity planning over the recorded history: queue wait by partition and hour of day, peak
    /// demand, GPUs idle while jobs wait, capacity lost to quarantined nodes, the downtime runguard
    /// saved, and recommendations.
    Capacity(runguard::capacity::CapacityArgs),
    /// Submit a multiphase workflow (a TOML file of ordered `[[phase]]`s): validate it, store it and
    /// submit its first phase; the engine submits each later phase once the one before it succeeded.
    Submit(runguard::submit::SubmitArgs),
    /// Replay a published failure mix (a trace) on the simulated cluster under runguard, a blind
    /// requeue and a paged person; ETTR, downtime per failure, repeats, by checkpoint interval.
    #[cfg(feature = "sim")]
    Replay(runguard::replay::ReplayArgs),
    /// Approve a proposed action (the running engine executes it on its next tick).
    Approve {
        /// Action id (see `runguard status`).
        action: i64,
    },
    /// Reject a proposed action.
    Reject {
        /// Action id (see `runguard status`).
        action: i64,
    },
    /// Watch jobs by id besides those enrolled by their comment or partition; a running engine picks
    /// them up on its next tick.
    Watch {
        /// Job ids (Slurm), or workloads as KIND/NAME (Kubernetes: job, pytorchjob, trainjob, jobset,
        /// rayjob, raycluster).
        #[arg(required_unless_present = "list")]
        jobs: Vec<String>,
        /// The namespace of KIND/NAME workloads (Kubernetes; default: "default").
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// Stop watching these jobs instead.
        #[arg(long)]
        remove: bool,
        /// List the watched jobs.
        #[arg(long, conflicts_with = "remove")]
        list: bool,
    },
    /// Post-mortem of any log: timeline, anomalies, attribution with evidence, and what runguard would do.
    Explain {
        /// Application logs (a job's unified log).
        #[arg(required = true)]
        logs: Vec<PathBuf>,
        /// A kernel log of one of the job's nodes (repeatable).
        #[arg(long = "kernel-log", value_name = "FILE")]
        kernel_logs: Vec<PathBuf>,
        /// The job's nodes in rank order, comma-separated, to name the node of a failing rank.
        #[arg(long, value_delimiter = ',')]
        nodes: Vec<String>,
        /// Ranks per node.
        #[arg(long, default_value_t = 8)]
        ranks_per_node: u32,
        /// The job is still running but its log has stopped: explain it as a hang and look for its
        /// cause, as the engine does when its stall detector fires.
        #[arg(long)]
        stalled: bool,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// The alerts sent to the configured channels: delivered, waiting for a retry, given up or dropped.
    Alerts {
        /// How many, newest first.
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The node ledger: each node's state (healthy, suspect, quarantined, probation), score and why,
    /// with its latest incidents.
    Nodes {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// Let a quarantined node back (on probation), as a passed health check would.
        #[arg(long, value_name = "NODE")]
        release: Option<String>,
    },
    /// Explain every case of a labelled manifest and score the attributions.
    Eval {
        /// The manifest (`[[case]]` entries with file, category, component, culprit, recoverable_by_requeue).
        manifest: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    if let Err(err) = run(cli) {
        eprintln!("runguard: {err:#}");
        std::process::exit(1);
    }
}

fn run(cli: Cli) -> Result<()> {
    let mut config = Config::load(cli.config.as_deref())?;
    let store_path = cli
        .db
        .clone()
        .or_else(|| config.store.path.clone())
        .unwrap_or_else(runguard_engine::paths::default_store_file);
    let config_path = cli.config.clone();
    match cli.command.unwrap_or(Command::Cockpit { auto: false }) {
        Command::Cockpit { auto } => cockpit(config, config_path, store_path, auto),
        Command::Demo {
            scenario,
            seed,
            speed,
            list,
            json,
        } => {
            if list {
                for (name, description) in runguard::compose::scenarios() {
                    println!("{name:<14} {description}");
                }
                return Ok(());
            }
            config.backend.kind = BackendKind::Sim;
            if let Some(scenario) = scenario {
                config.sim.scenario = scenario;
            }
            if let Some(seed) = seed {
                config.sim.seed = seed;
            }
            if let Some(speed) = speed {
                if !(speed > 0.0 && speed <= 100_000.0) {
                    bail!("--speed must be > 0 and at most 100000");
                }
                config.sim.speed = speed;
            }
            let event_log = if json {
                EventLog::Json
            } else {
                EventLog::Human
            };
            init_logging(event_log);
            println!(
                "runguard demo: scenario {} (seed {}, {}× speed); store {}",
                config.sim.scenario,
                config.sim.seed,
                config.sim.speed,
                store_path.display()
            );
            let outcome = runtime()?.block_on(headless::run(
                config.clone(),
                HeadlessOptions {
                    store_path: store_path.clone(),
                    auto: true,
                    until_settled: true,
                    fresh_sim: true,
                    event_log,
                },
            ))?;
            println!();
            print_status(&config, &store_path, None, false)?;
            if outcome == runguard_engine::engine::RunOutcome::Shutdown {
                println!("(stopped before the scenario finished)");
            }
            Ok(())
        }
        Command::Run { auto } => {
            init_logging(EventLog::Json);
            runtime()?.block_on(headless::run(
                config,
                HeadlessOptions {
                    store_path,
                    auto,
                    until_settled: false,
                    fresh_sim: false,
                    event_log: EventLog::Json,
                },
            ))?;
            Ok(())
        }
        Command::Status { workflow, json } => print_status(&config, &store_path, workflow, json),
        Command::Capacity(args) => runguard::capacity::run(&store_path, &args),
        #[cfg(feature = "sim")]
        Command::Replay(args) => runguard::replay::run(&args),
        Command::Report { id, json, markdown } => {
            let format = if json {
                ReportFormat::Json
            } else if markdown {
                ReportFormat::Markdown
            } else {
                ReportFormat::Text
            };
            print_report(&config, &store_path, &id, format)
        }
        Command::Explain {
            logs,
            kernel_logs,
            nodes,
            ranks_per_node,
            stalled,
            json,
        } => {
            let catalog = catalog()?;
            let explanation = runguard_engine::explain::explain(
                &catalog,
                &config,
                &runguard_engine::explain::ExplainInput {
                    logs,
                    kernel_logs,
                    nodes,
                    ranks_per_node,
                    stalled,
                },
            )?;
            if json {
                println!("{}", serde_json::to_string_pretty(&explanation)?);
            } else {
                print!("{}", runguard::render::explain::render(&explanation));
            }
            Ok(())
        }
        Command::Alerts { limit, json } => print_alerts(&store_path, limit, json),
        Command::Nodes { json, release } => match release {
            Some(node) => release_node(&config, &store_path, &node),
            None => print_nodes(&config, &store_path, json),
        },
        Command::Eval { manifest, json } => {
            let catalog = catalog()?;
            let evaluation = runguard_engine::explain::evaluate(&catalog, &config, &manifest)?;
            let quality = runguard_engine::attribute::quality::Quality::of(&evaluation.cases);
            if json {
                let report = runguard::render::eval::EvalReport::new(&evaluation, &quality);
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                print!(
                    "{}",
                    runguard::render::eval::render_evaluation(&evaluation, &quality)
                );
            }
            Ok(())
        }
        Command::Watch {
            jobs,
            namespace,
            remove,
            list,
        } => {
            let jobs = if config.backend.kind == BackendKind::Kubernetes {
                let namespace = namespace.unwrap_or_else(|| "default".to_string());
                jobs.iter()
                    .map(|job| {
                        runguard::compose::kube_watch_ref(job, &namespace)?.with_context(|| {
                            format!(
                                "{job:?} is not a workload: KIND/NAME or KIND/NAMESPACE/NAME, \
                                     KIND one of job, pytorchjob, trainjob, jobset, rayjob, \
                                     raycluster"
                            )
                        })
                    })
                    .collect::<Result<Vec<_>>>()?
            } else if namespace.is_some() {
                bail!("-n/--namespace is for Kubernetes workloads (backend.kind = \"kubernetes\")");
            } else {
                jobs
            };
            watch_jobs(
                &store_path,
                config.backend.kind.as_str(),
                &jobs,
                remove,
                list,
            )
        }
        Command::Submit(args) => runguard::submit::run(&args, &config, &store_path),
        Command::Approve { action } => decide_action(&store_path, CommandKind::Approve, action),
        Command::Reject { action } => decide_action(&store_path, CommandKind::Reject, action),
    }
}

/// The built-in signatures with the user's own (`signatures/` in the config directory).
fn catalog() -> Result<runguard_engine::attribute::Catalog> {
    Ok(runguard::compose::catalog()?)
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")
}

/// JSON lines on stdout for the headless engine; readable warnings on stderr for the demo.
fn init_logging(log: EventLog) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RUNGUARD_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let _ = match log {
        EventLog::Json => builder
            .json()
            .flatten_event(true)
            .with_writer(std::io::stdout)
            .try_init(),
        EventLog::Human => builder
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_env("RUNGUARD_LOG")
                    .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
            )
            .with_writer(std::io::stderr)
            .try_init(),
    };
}

fn open_existing(store_path: &Path) -> Result<Store> {
    if !store_path.exists() {
        bail!(
            "no store at {}: nothing has been watched yet (run `runguard demo` or `runguard run --auto`)",
            store_path.display()
        );
    }
    Ok(Store::open(store_path)?)
}

fn print_nodes(config: &Config, store_path: &Path, json: bool) -> Result<()> {
    let store = open_existing(store_path)?;
    // The simulated cluster keeps its own clock: scores are aged to its last moment, not today.
    let now = match config.backend.kind {
        BackendKind::Sim => store
            .db()
            .node_records()?
            .iter()
            .map(|record| record.updated_at)
            .max()
            .unwrap_or_else(chrono::Utc::now),
        _ => chrono::Utc::now(),
    };
    let views = runguard::nodes::report(&store.db(), now)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&views)?);
    } else {
        print!("{}", runguard::nodes::render(&views, now));
    }
    Ok(())
}

/// Releases a quarantined node: directly when no engine runs (the next one undoes runguard's marks on
/// it), else through the running engine.
fn release_node(config: &Config, store_path: &Path, node: &str) -> Result<()> {
    let mut store = open_existing(store_path)?;
    if store.db().node_record(node)?.is_none() {
        bail!(
            "node {node} is not in the ledger of {}",
            store_path.display()
        );
    }
    match EngineLock::acquire(store_path) {
        Ok(_lock) => {
            let schedule = config.ledger.schedule();
            let outcome = store.write(|db| {
                runguard_engine::engine::release_in(
                    db,
                    node,
                    chrono::Utc::now(),
                    &schedule,
                    &mut Vec::new(),
                )
            })?;
            println!(
                "{outcome} (no engine is running; the next one undoes runguard's marks on it)"
            );
            Ok(())
        }
        Err(LockError::Held { .. }) => {
            let command =
                store
                    .db()
                    .push_node_command(CommandKind::ReleaseNode, node, chrono::Utc::now())?;
            for _ in 0..100 {
                std::thread::sleep(Duration::from_millis(100));
                if let Some(outcome) = store.db().command_outcome(command)? {
                    println!("{outcome}");
                    return Ok(());
                }
            }
            println!("release of {node} queued; the running engine applies it on its next tick");
            Ok(())
        }
        Err(err) => Err(err.into()),
    }
}

fn print_alerts(store_path: &Path, limit: u32, json: bool) -> Result<()> {
    let store = open_existing(store_path)?;
    let deliveries = store.db().deliveries(limit)?;
    if json {
        // The payload is the alert as sent: shown as an object, not as a string of JSON.
        let rows: Vec<serde_json::Value> = deliveries
            .iter()
            .map(|delivery| {
                let mut row = serde_json::to_value(delivery).unwrap_or_default();
                row["payload"] = serde_json::from_str(&delivery.payload).unwrap_or_default();
                row
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    if deliveries.is_empty() {
        println!("no alerts in {}", store_path.display());
        return Ok(());
    }
    println!(
        "{:>5}  {:<16} {:<16} {:<9} {:<10} {:>5}  {:<20} detail",
        "id", "channel", "event", "severity", "state", "tries", "updated"
    );
    for delivery in deliveries {
        println!(
            "{:>5}  {:<16} {:<16} {:<9} {:<10} {:>5}  {:<20} {}",
            delivery.id,
            delivery.channel,
            delivery.event.as_str(),
            delivery.severity.as_str(),
            delivery.state.as_str(),
            delivery.attempts,
            delivery.updated_at.format("%Y-%m-%d %H:%M:%S"),
            delivery
                .last_error
                .as_deref()
                .unwrap_or(&delivery.dedupe_key)
        );
    }
    Ok(())
}

fn print_status(
    config: &Config,
    store_path: &Path,
    workflow: Option<i64>,
    json: bool,
) -> Result<()> {
    let store = open_existing(store_path)?;
    let policy = Policy::from_config(&config.recovery, false);
    let report = runguard::status::report(
        &store.db(),
        &store_path.display().to_string(),
        &policy,
        workflow,
    )?;
    if workflow.is_some() && report.workflows.is_empty() {
        bail!(
            "no workflow {} in {}",
            workflow.unwrap_or_default(),
            store_path.display()
        );
    }
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!(
            "{}",
            runguard::status::render_table(&report, chrono::Utc::now())
        );
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReportFormat {
    Text,
    Markdown,
    Json,
}

/// The recovery report of the workflow `reference` names, with a narrative of each failure that has
/// none yet when an endpoint is configured.
fn print_report(
    config: &Config,
    store_path: &Path,
    reference: &str,
    format: ReportFormat,
) -> Result<()> {
    use runguard_engine::report::narrative::{self, Narrator};
    use runguard_engine::report::{NarrativeStatus, render};

    let mut store = open_existing(store_path)?;
    let Some(id) = runguard_engine::report::resolve(&store.db(), reference)? else {
        bail!(
            "no workflow or job {reference:?} in {} (see `runguard status`)",
            store_path.display()
        );
    };
    let policy = Policy::from_config(&config.recovery, false);
    let now = chrono::Utc::now();
    let Some(mut report) = runguard_engine::report::build(&store.db(), &policy, id, now)? else {
        bail!("no workflow {id} in {}", store_path.display());
    };
    let api_key = std::env::var(&config.narrative.api_key_env)
        .ok()
        .filter(|key| !key.trim().is_empty());
    // Evidence lines are the job's own output: what looks like a credential is masked in every format.
    let redactor = runguard_engine::redact::Redactor::new(api_key.clone());
    match Narrator::from_config(&config.narrative, api_key) {
        Ok(None) => {}
        Ok(Some(narrator)) => {
            let now = report.generated_at;
            runtime()?.block_on(narrative::complete(&mut report, &narrator, &mut store, now))?;
        }
        Err(err) => {
            let reason = runguard_engine::redact::redact_patterns(&err.to_string());
            for failure in &mut report.failures {
                if failure.narrative.is_none() {
                    failure.narrative = Some(NarrativeStatus::Unavailable {
                        reason: reason.clone(),
                    });
                }
            }
        }
    }
    match format {
        ReportFormat::Text => print!("{}", redactor.redact(&render::text(&report))),
        ReportFormat::Markdown => print!("{}", redactor.redact(&render::markdown(&report))),
        ReportFormat::Json => println!(
            "{}",
            serde_json::to_string_pretty(&report.to_redacted_json(&redactor)?)?
        ),
    }
    Ok(())
}

/// The cockpit on the configured backend (the simulated cluster when none is configured).
fn cockpit(
    config: Config,
    config_path: Option<PathBuf>,
    store_path: PathBuf,
    auto: bool,
) -> Result<()> {
    use runguard::tui::app::{Column, DEFAULT_COLUMNS};
    use runguard::tui::run::{CockpitOptions, Exit};

    let config_dir = config_path
        .as_ref()
        .and_then(|file| file.parent().map(Path::to_path_buf))
        .or_else(|| {
            runguard_engine::paths::default_config_file()
                .and_then(|f| f.parent().map(Path::to_path_buf))
        });
    let preferences = config_dir.as_ref().map(|dir| dir.join("cockpit.toml"));
    let saved: Option<toml::Table> = preferences
        .as_ref()
        .and_then(|path| std::fs::read_to_string(path).ok())
        .and_then(|text| text.parse().ok());
    let theme = saved
        .as_ref()
        .and_then(|t| t.get("theme")?.as_str().map(str::to_string))
        .unwrap_or_else(|| config.tui.theme.clone());
    let column_names: Vec<String> = saved
        .as_ref()
        .and_then(|t| t.get("columns")?.as_array().cloned())
        .map(|names| {
            names
                .iter()
                .filter_map(|n| n.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_else(|| config.tui.columns.clone());
    let mut columns = Vec::new();
    for name in &column_names {
        match Column::parse(name) {
            Some(column) => columns.push(column),
            None => bail!("tui.columns: no column {name:?}"),
        }
    }
    if columns.is_empty() {
        columns = DEFAULT_COLUMNS.to_vec();
    }
    let options = CockpitOptions {
        store_path: store_path.clone(),
        config_path,
        auto,
        theme,
        columns,
        themes_dir: config_dir.as_ref().map(|dir| dir.join("themes")),
        preferences,
    };
    match runtime()?.block_on(runguard::tui::run::run(config, options))? {
        Exit::Quit => {}
        Exit::Detached { pid, log } => println!(
            "the engine goes on headless (pid {pid}, log {}); run `runguard` again to attach",
            log.display()
        ),
    }
    Ok(())
}

/// Adds (or removes) jobs watched by id, straight in the store: a running engine reads the list on
/// every tick, and one started later finds it there.
fn watch_jobs(
    store_path: &Path,
    backend: &str,
    jobs: &[String],
    remove: bool,
    list: bool,
) -> Result<()> {
    for job in jobs {
        if job.is_empty()
            || !job
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "_.-/".contains(c))
        {
            bail!("{job:?} is not a job id");
        }
    }
    let mut store = Store::open(store_path)?;
    let now = chrono::Utc::now();
    for job in jobs {
        let changed = store.write(|db| {
            if remove {
                db.remove_watched(backend, job)
            } else {
                db.add_watched(backend, job, now)
            }
        })?;
        let verb = match (remove, changed) {
            (false, true) => "watching",
            (false, false) => "already watching",
            (true, true) => "no longer watching",
            (true, false) => "was not watching",
        };
        println!("{verb} {backend} job {job}");
    }
    if list {
        for job in store.db().watched_jobs(backend)? {
            println!("{job}");
        }
    }
    Ok(())
}

/// Approves or rejects an action: directly when no engine runs, else through the command table the
/// running engine polls (waiting briefly for it to confirm).
fn decide_action(store_path: &Path, kind: CommandKind, action_id: i64) -> Result<()> {
    let mut store = open_existing(store_path)?;
    if store.db().action(action_id)?.is_none() {
        bail!("no action {action_id} in {}", store_path.display());
    }
    match EngineLock::acquire(store_path) {
        Ok(_lock) => {
            let outcome = store.write(|db| {
                apply_command(db, kind, action_id, chrono::Utc::now(), &mut Vec::new())
            })?;
            println!("{outcome} (no engine is running; the next one executes it)");
            Ok(())
        }
        Err(LockError::Held { .. }) => {
            let command = store
                .db()
                .push_command(kind, action_id, chrono::Utc::now())?;
            for _ in 0..100 {
                std::thread::sleep(Duration::from_millis(100));
                if let Some(outcome) = store.db().command_outcome(command)? {
                    println!("{outcome}");
                    return Ok(());
                }
            }
            println!(
                "{} of action {action_id} queued; the running engine applies it on its next tick",
                kind.as_str()
            );
            Ok(())
        }
        Err(err) => Err(err.into()),
    }
}
