//! `runguard replay TRACE`: replays a published failure mix on the simulated cluster under each
//! recovery policy and each checkpoint interval, on the same seeded trace, and reports the effective
//! training time ratio, the downtime per failure by phase, repeats on implicated nodes, a projection
//! to the source's cluster size, and an SVG plot.

mod svg;
mod text;

use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use serde::Serialize;

use runguard_engine::replay::{self, Onset, Policy, PolicyResult, ReplayOptions, Trace};

/// The options of `runguard replay`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// A trace definition (TOML, see docs/replay.md) or a built-in name (`llama3-405b`).
    pub trace: String,
    /// Seed of the failure trace; every policy replays the same one.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Policies to compare, comma-separated: runguard, blind, paged.
    #[arg(long, value_delimiter = ',', default_value = "runguard,blind,paged")]
    pub policy: Vec<String>,
    /// Checkpoint intervals in minutes, comma-separated (default: the trace's sweep).
    #[arg(
        long = "checkpoint-interval",
        value_delimiter = ',',
        value_name = "MINUTES"
    )]
    pub checkpoint_interval: Vec<f64>,
    /// Days to replay (default: the trace's period).
    #[arg(long)]
    pub days: Option<f64>,
    /// Nodes of the job (default: the trace's replay size).
    #[arg(long)]
    pub nodes: Option<u32>,
    /// Idle spare nodes beside the job (default: the trace's).
    #[arg(long)]
    pub spares: Option<u32>,
    /// Seconds between two looks at the job, for every policy (runguard's poll interval); the
    /// replay reads the logs only then, as on a file system that delivers no file events.
    #[arg(long = "poll-interval", value_name = "SECONDS", default_value_t = 5.0)]
    pub poll_interval: f64,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Print markdown tables instead of text.
    #[arg(long, conflicts_with = "json")]
    pub markdown: bool,
    /// Write the ETTR-by-checkpoint-interval plot here (SVG).
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Working directory for the simulated cluster and the engine's store (default: a directory
    /// under the system's temporary directory, removed afterwards).
    #[arg(long, value_name = "DIR")]
    pub work_dir: Option<PathBuf>,
}

/// Everything a replay found, as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct ReplayReport {
    pub trace: String,
    pub title: String,
    pub source: String,
    pub seed: u64,
    pub days: f64,
    pub nodes: u32,
    pub spare_nodes: u32,
    pub source_nodes: u32,
    /// Seconds between two looks at the job (runguard's poll interval).
    pub poll_s: f64,
    pub source_interruptions: u32,
    pub source_days: f64,
    pub failures_per_node_hour: f64,
    /// Faults set in on the replayed cluster, by cause (name, count).
    pub onsets: Vec<(String, usize)>,
    pub onset_count: usize,
    /// What in the trace did not add up (published shares that contradict their counts).
    pub warnings: Vec<String>,
    pub results: Vec<PolicyResult>,
    /// Per policy and interval: the ratio on the source's full cluster, from the measured downtime
    /// per failure and the source's failure rate.
    pub projections: Vec<Projection>,
    /// Wall time the whole replay took, seconds.
    pub wall_s: f64,
}

/// The ratio at the source's size: its failures per hour times the measured downtime per failure.
#[derive(Debug, Clone, Serialize)]
pub struct Projection {
    pub policy: Policy,
    pub checkpoint_minutes: f64,
    pub ettr: f64,
}

pub fn run(args: &ReplayArgs) -> Result<()> {
    let trace = Trace::resolve(&args.trace)?;
    let mut policies = Vec::new();
    for name in &args.policy {
        let policy = Policy::parse(name.trim())
            .with_context(|| format!("unknown policy `{name}` (runguard, blind, paged)"))?;
        if !policies.contains(&policy) {
            policies.push(policy);
        }
    }
    let intervals = if args.checkpoint_interval.is_empty() {
        trace.replay.checkpoint_minutes.clone()
    } else {
        args.checkpoint_interval.clone()
    };
    if intervals.iter().any(|m| !(m.is_finite() && *m > 0.0)) {
        bail!("--checkpoint-interval: minutes must be positive");
    }
    let days = args.days.unwrap_or(trace.cluster.days);
    if !(days.is_finite() && days > 0.0 && days <= 3650.0) {
        bail!("--days must be > 0 and at most 3650");
    }
    let nodes = args.nodes.unwrap_or(trace.replay.nodes);
    let spares = args.spares.unwrap_or(trace.replay.spare_nodes);
    let (work, remove_after) = match &args.work_dir {
        Some(dir) => (dir.clone(), false),
        None => (
            std::env::temp_dir().join(format!("runguard-replay-{}", std::process::id())),
            true,
        ),
    };
    let began = std::time::Instant::now();
    let onsets = replay::onsets::generate(&trace, nodes + spares, days, args.seed);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let mut results = Vec::new();
    for &minutes in &intervals {
        for &policy in &policies {
            let options = ReplayOptions {
                dir: work.join(format!("{}-{minutes}", policy.as_str())),
                days,
                nodes,
                spare_nodes: spares,
                checkpoint_minutes: minutes,
                policy,
                poll_s: args.poll_interval,
            };
            let result = runtime
                .block_on(replay::replay(&trace, &onsets, &options))
                .with_context(|| format!("replaying under {} at {minutes} min", policy.as_str()))?;
            if !args.json {
                eprintln!(
                    "  {:<9} checkpoint {minutes:>4} min: ETTR {:.4} ({} failures)",
                    policy.as_str(),
                    result.ettr,
                    result.failures.len()
                );
            }
            results.push(result);
        }
    }
    if remove_after {
        let _ = std::fs::remove_dir_all(&work);
    }
    let report = ReplayReport {
        trace: trace.name.clone(),
        title: trace.title.clone(),
        source: trace.source.clone(),
        seed: args.seed,
        days,
        nodes,
        spare_nodes: spares,
        source_nodes: trace.source_nodes(),
        poll_s: args.poll_interval,
        source_interruptions: trace.cluster.interruptions,
        source_days: trace.cluster.days,
        failures_per_node_hour: trace.failures_per_node_hour(),
        onsets: by_cause(&trace, &onsets),
        onset_count: onsets.len(),
        warnings: trace.share_mismatches(),
        projections: results
            .iter()
            .map(|result| project(&trace, result))
            .collect(),
        results,
        wall_s: began.elapsed().as_secs_f64(),
    };
    if let Some(path) = &args.svg {
        std::fs::write(path, svg::ettr_by_interval(&report))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if args.markdown {
        print!("{}", text::markdown(&report));
    } else {
        print!("{}", text::plain(&report));
    }
    Ok(())
}

fn by_cause(trace: &Trace, onsets: &[Onset]) -> Vec<(String, usize)> {
    trace
        .causes
        .iter()
        .enumerate()
        .map(|(index, cause)| {
            let count = onsets.iter().filter(|onset| onset.cause == index).count();
            (cause.name.clone(), count)
        })
        .filter(|(_, count)| *count > 0)
        .collect()
}

/// The ratio at the source's size: without failures the run loses only its saves; each of the
/// source's interruptions costs the downtime the replay measured per interruption (a repeat of a
/// fault that stayed is charged to the interruption it repeats), at the source's rate.
pub fn project(trace: &Trace, result: &PolicyResult) -> Projection {
    let per_second = f64::from(trace.cluster.interruptions) / (trace.cluster.days * 86_400.0);
    let first_failures = result.failures.len().saturating_sub(result.repeats);
    let per_interruption = if first_failures == 0 {
        0.0
    } else {
        result.mean_downtime.total() * result.failures.len() as f64 / first_failures as f64
    };
    Projection {
        policy: result.policy,
        checkpoint_minutes: result.checkpoint_minutes,
        ettr: (result.ettr_without_failures * (1.0 - per_second * per_interruption)).max(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use runguard_engine::replay::metrics::{FailureRecord, Handler, RunTotals, summarize};

    #[test]
    fn the_projection_charges_the_sources_failure_rate_at_the_measured_downtime() {
        let trace = Trace::resolve("llama3-405b").unwrap();
        let failure = FailureRecord {
            cause: "Faulty GPU".into(),
            node: "node-01".into(),
            fault_s: 0.0,
            shown_s: None,
            exit_s: 10.0,
            action_s: Some(15.0),
            resumed_s: Some(215.0),
            lost_iterations: 10,
            repeat: false,
            handler: Handler::Runguard,
            engine_wall_ms: 0.0,
        };
        let mut repeat = failure.clone();
        repeat.repeat = true;
        let result = summarize(
            RunTotals {
                policy: Policy::Runguard,
                checkpoint_minutes: 30.0,
                wall_s: 86_400.0,
                kept_iterations: 2_800,
                seconds_per_iteration: 30.0,
                save_s: 20.0,
                excluded_nodes: 1,
            },
            vec![failure, repeat],
        );
        // 515 s per failure (10 + 5 + 200 + 300), the repeat charged to the first: 1,030 s per
        // interruption, 419 interruptions in 54 days.
        let per_second = 419.0 / (54.0 * 86_400.0);
        let expected = 1800.0 / 1820.0 * (1.0 - per_second * 1030.0);
        assert!((project(&trace, &result).ettr - expected).abs() < 1e-12);
    }
}
