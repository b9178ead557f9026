//! Offline post-mortem of any log (`runguard explain`) and its evaluation over a labelled corpus
//! (`runguard eval`): the same telemetry pipeline, attribution and policy the engine uses, on files.

use std::borrow::Cow;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::attribute::rejoin::WrapCarry;
use crate::attribute::scan::ShapeMemory;
use crate::attribute::{self, Catalog, Evidence};
use crate::config::Config;
use crate::detect;
use crate::model::{
    AnomalyKind, Attempt, Attribution, BackendKind, EvidenceLine, JobSpec, JobState,
    RecoveryLimits, ThroughputSample, Workflow,
};
use crate::recover::{Policy, decide};
use crate::telemetry::line_facts::LineClassifier;
use crate::telemetry::node_signals::parse_kernel_line;
use crate::telemetry::pipeline::Digester;
use crate::telemetry::readings::Reading;
use crate::telemetry::tail::{Chunk, TailLimits, step_holding_a_line};
use crate::telemetry::whole_file::digest_file;

mod slow_run;
use slow_run::{SlowRun, healthy, slow_run};

/// Largest read per step; files of any size are read in bounded steps, small enough for a core's cache.
const READ_STEP: u64 = crate::telemetry::tail::READ_STEP_BYTES;

/// An explanation that could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ExplainError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} does not exist")]
    Missing { path: PathBuf },
    #[error("invalid manifest {path}: {message}")]
    Manifest { path: PathBuf, message: String },
}

/// What to explain.
#[derive(Debug, Clone, Default)]
pub struct ExplainInput {
    /// Application logs (a job's unified log, or several).
    pub logs: Vec<PathBuf>,
    /// Kernel logs of the job's nodes.
    pub kernel_logs: Vec<PathBuf>,
    /// The job's nodes in rank order, for rank → node; empty when unknown.
    pub nodes: Vec<String>,
    /// Ranks per node (the task layout).
    pub ranks_per_node: u32,
    /// The run had not exited when its logs were taken, and they had stopped: what the engine's stall
    /// detector sees. The logs are explained as a hang, its cause sought in them as the engine does.
    pub stalled: bool,
}

/// One moment of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimelineEntry {
    pub time: Option<DateTime<Utc>>,
    pub what: String,
}

/// The post-mortem.
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    pub files: Vec<String>,
    pub lines: u64,
    pub first_iteration: Option<u64>,
    pub last_iteration: Option<u64>,
    pub checkpoints: Vec<u64>,
    pub median_tflops_per_gpu: Option<f64>,
    pub timeline: Vec<TimelineEntry>,
    /// Whether the log shows a failure at all.
    pub failed: bool,
    /// Anomalies the detectors raise over the log.
    pub anomalies: Vec<String>,
    /// What failed, where, and whether a requeue helps (`healthy` when nothing failed).
    pub attribution: Attribution,
    /// What runguard would do, as the default policy decides it.
    pub recovery: Vec<String>,
}

/// How an explanation is made: the same explanation whatever the threads.
#[derive(Debug, Clone)]
pub struct ExplainOptions {
    /// Threads that prepare (rejoin and scan) a log's reads while one digests them in order; a log
    /// of fewer than two reads is read on one.
    pub threads: usize,
    /// Largest read per step.
    pub read_step: u64,
    /// The time taken as now (lines without a stamp, the attribution's time).
    pub now: DateTime<Utc>,
}

impl Default for ExplainOptions {
    fn default() -> Self {
        Self {
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            read_step: READ_STEP,
            now: Utc::now(),
        }
    }
}

/// Reads every input and explains it, large logs on every core.
pub fn explain(
    catalog: &Catalog,
    config: &Config,
    input: &ExplainInput,
) -> Result<Explanation, ExplainError> {
    explain_with(catalog, config, input, &ExplainOptions::default())
}

/// [`explain`] with its threads, read size and time given.
pub fn explain_with(
    catalog: &Catalog,
    config: &Config,
    input: &ExplainInput,
    options: &ExplainOptions,
) -> Result<Explanation, ExplainError> {
    let now = options.now;
    let limits = TailLimits {
        max_line_bytes: config.telemetry.max_line_bytes,
        max_read_bytes: step_holding_a_line(options.read_step, config.telemetry.max_line_bytes),
    };
    let mut evidence: Vec<EvidenceLine> = Vec::new();
    let mut samples: Vec<ThroughputSample> = Vec::new();
    let mut step_timings = Vec::new();
    let mut readings = Vec::new();
    let mut checkpoints = Vec::new();
    let mut timeline = Vec::new();
    let (mut lines, mut first_iteration, mut last_iteration) = (0u64, None, None);
    let mut straggler = detect::StragglerTracker::default();
    let mut anomalies = Vec::new();
    let mut last_stamp: Option<DateTime<Utc>> = None;
    for path in &input.logs {
        let notable = |line: &str| catalog.is_notable(line);
        let mut digester = Digester::new(notable, now, None, None);
        // Everything a line says on its own is found while preparing, on any thread; the digest
        // applies it in order.
        // Each preparing thread remembers the line shapes of the steps it scanned.
        let prepare = |chunk: Chunk, shapes: &mut ShapeMemory| {
            let (rejoined, width) = attribute::rejoin::rejoin_wrapped_knowing(&chunk, None);
            let rejoined = match rejoined {
                Cow::Owned(rejoined) => Some(rejoined),
                Cow::Borrowed(_) => None,
            };
            let chunk = rejoined.unwrap_or(chunk);
            let marks = catalog.line_marks_remembering(&chunk, shapes);
            let facts = LineClassifier::new(notable, now).classify_chunk(&chunk, &marks);
            (chunk, facts, width)
        };
        // A message cut where one step ends goes on in the next step's first line, which is then
        // read joined to it, in order (the steps are prepared apart).
        let mut wrap = WrapCarry::default();
        let mut classifier = LineClassifier::new(notable, now);
        if !path.exists() {
            return Err(ExplainError::Missing { path: path.clone() });
        }
        let size = std::fs::metadata(path).map_or(0, |meta| meta.len());
        let threads = if size > 2 * limits.max_read_bytes {
            options.threads
        } else {
            1
        };
        digest_file(
            path,
            limits,
            threads,
            &prepare,
            |(chunk, mut facts, width)| {
                let (chunk, joined) = wrap.go_on(Cow::Owned(chunk), width);
                if joined
                    && let (Some(first), Some(line)) = (facts.first_mut(), chunk.lines().next())
                {
                    *first = Some(classifier.classify(line, true, true));
                }
                let chunk = chunk.into_owned();
                digester.push_classified(&chunk, facts);
                Some(chunk)
            },
        )
        .map_err(|source| ExplainError::Read {
            path: path.clone(),
            source,
        })?;
        let digest = digester.finish();
        lines += digest.lines;
        last_stamp = last_stamp.max(digest.last_time.filter(|time| *time != now));
        for (time, iteration, tflops, rank) in &digest.samples {
            first_iteration = first_iteration.or(Some(*iteration));
            samples.push(ThroughputSample {
                workflow_id: 0,
                attempt_index: 0,
                time: *time,
                iteration: *iteration,
                tflops_per_gpu: *tflops,
                rank: *rank,
                node: None,
            });
        }
        step_timings.extend(digest.step_timings.iter().copied());
        readings.extend(digest.readings);
        last_iteration = last_iteration.max(digest.last_iteration);
        for (iteration, path, time) in &digest.checkpoints {
            checkpoints.push(*iteration);
            timeline.push(TimelineEntry {
                time: Some(*time),
                what: format!("checkpoint at iteration {iteration} ({path})"),
            });
        }
        for report in &digest.straggler_reports {
            if let Some(finding) = straggler.observe(
                report,
                &input.nodes,
                input.ranks_per_node.max(1),
                &config.detect,
            ) {
                anomalies.push(finding.summary);
            }
        }
        evidence.extend(digest.evidence);
    }
    for path in &input.kernel_logs {
        read_whole(path, limits, |chunk| {
            for line in chunk.lines() {
                if let Some(signal) = parse_kernel_line(line) {
                    evidence.push(EvidenceLine {
                        time: signal.time.unwrap_or(now),
                        rank: None,
                        text: signal.text,
                    });
                } else if catalog.is_notable(line) {
                    // Kernel lines a signature knows beyond GPU signals: OOM killer, mlx5, panics.
                    evidence.push(EvidenceLine {
                        time: now,
                        rank: None,
                        text: line.trim().to_string(),
                    });
                }
            }
        })?;
    }

    // Slurm's cancellation line carries its own time in its text: `*** JOB 42 ON n1 CANCELLED AT
    // 2026-03-01T12:16:40 DUE TO TIME LIMIT ***`.
    for line in &evidence {
        if let Some(at) = cancelled_at(&line.text) {
            last_stamp = last_stamp.max(Some(at));
        }
    }
    for (silence, what) in silences(&samples, &checkpoints, last_stamp, &config.detect) {
        anomalies.push(what.clone());
        timeline.push(TimelineEntry {
            time: Some(silence),
            what,
        });
    }
    let (head, tail) = window(&samples, &config.detect);
    if let Some(finding) = detect::throughput_drop(head, tail, &config.detect) {
        anomalies.push(finding.summary);
    }
    step_timings.sort_by_key(|(time, _)| *time);
    let steps: Vec<_> = step_timings.into_iter().map(|(_, step)| step).collect();
    let input_bound = detect::steps::input_bound(&steps, &config.detect);
    let slowdown = detect::steps::step_slowdown(&steps, &config.detect);
    // Data waits from the step lines and from the loaders' own lines alike.
    let waits: Vec<f64> = steps
        .iter()
        .filter_map(|step| step.data_secs)
        .chain(readings.iter().filter_map(Reading::data_wait))
        .collect();
    let stalls = detect::readings::input_stalls(&waits, &config.detect);
    let hot = detect::readings::hot_gpu(&readings, &config.detect);
    let slow_device = detect::readings::slow_device(&readings, &config.detect);
    let idle = detect::readings::idle_between_steps(&readings);
    for finding in [&hot, &slow_device, &input_bound, &stalls, &idle, &slowdown]
        .into_iter()
        .flatten()
    {
        anomalies.push(finding.summary.clone());
    }
    let raised = raised_exception(&evidence);
    // A signature of a condition the run can live with explains a failure but shows none.
    let matched = evidence.iter().any(|line| {
        catalog.matching(&line.text).into_iter().any(|index| {
            catalog
                .signatures()
                .get(index)
                .is_some_and(|signature| signature.spec.fails_alone)
        })
    });
    let anomaly = if input.stalled {
        anomalies.push(stalled_summary(last_iteration, last_stamp));
        AnomalyKind::Hang
    } else {
        AnomalyKind::Crash
    };
    // A stalled run failed whatever its log says: what it says only names the cause.
    let attempt = Evidence {
        workflow_id: 0,
        attempt_index: 0,
        anomaly,
        lines: &evidence,
        nodes: &input.nodes,
        ranks_per_node: input.ranks_per_node.max(1),
        exit_code: None,
        now,
    };
    // Signatures that matched but do not apply (a retry a later line says succeeded, a context
    // missing), with no exception raised, leave nothing failed. One that applies may be explained
    // by a condition that outranks it (a process blocked on storage behind its peers' timeouts).
    let attribution = (matched || raised || input.stalled)
        .then(|| attribute::attribute_showing(catalog, &attempt))
        .filter(|(_, shows_failure)| raised || input.stalled || *shows_failure)
        .map(|(attribution, _)| attribution);
    let failed = attribution.is_some();
    // A run that failed nothing but got slow is explained by why it got slow: a cause (a hot GPU, one
    // slow device, the input pipeline) before the slowdown it makes.
    let attribution = attribution.unwrap_or_else(|| {
        let why = [
            (&hot, SlowRun::Hot),
            (&slow_device, SlowRun::SlowDevice),
            (&input_bound, SlowRun::InputBound),
            (&stalls, SlowRun::InputBound),
            (&idle, SlowRun::IdleGpu),
            (&slowdown, SlowRun::Slowdown),
        ]
        .into_iter()
        .find_map(|(finding, kind)| finding.as_ref().map(|finding| (finding, kind)));
        match why {
            Some((finding, kind)) => slow_run(kind, &finding.summary, now),
            None => healthy(now),
        }
    });
    for line in evidence
        .iter()
        .filter(|l| !catalog.matching(&l.text).is_empty())
        .take(20)
    {
        timeline.push(TimelineEntry {
            time: Some(line.time),
            what: line.text.chars().take(200).collect(),
        });
    }
    timeline.sort_by_key(|entry| entry.time);
    let recovery = if failed {
        would_do(config, &attribution, anomaly, &input.nodes, now)
    } else {
        vec!["nothing: the log shows no failure".to_string()]
    };
    let mut tflops: Vec<f64> = samples.iter().map(|s| s.tflops_per_gpu).collect();
    tflops.sort_by(f64::total_cmp);
    Ok(Explanation {
        files: input
            .logs
            .iter()
            .chain(&input.kernel_logs)
            .map(|p| p.display().to_string())
            .collect(),
        lines,
        first_iteration,
        last_iteration,
        checkpoints,
        median_tflops_per_gpu: tflops.get(tflops.len() / 2).copied(),
        timeline,
        failed,
        anomalies,
        attribution,
        recovery,
    })
}

/// Whether the evidence shows an exception raised: a traceback (its last line may be cut off), or an
/// exception's line. A warning (`UserWarning: ...`) alone is none: `warnings.warn` prints it and the
/// run goes on (a warning turned into an error comes with its traceback).
fn raised_exception(evidence: &[EvidenceLine]) -> bool {
    evidence.iter().any(
        |line| match crate::telemetry::record::recognise(&line.text) {
            Some(crate::telemetry::record::Record::TracebackStart) => true,
            Some(crate::telemetry::record::Record::ExceptionLine { exception, .. }) => {
                !exception.ends_with("Warning")
            }
            _ => false,
        },
    )
}

/// What a stalled run's logs show of where it stopped.
fn stalled_summary(last_iteration: Option<u64>, last_stamp: Option<DateTime<Utc>>) -> String {
    let after = last_iteration.map_or_else(
        || "before any iteration".to_string(),
        |iteration| format!("after iteration {iteration}"),
    );
    match last_stamp {
        Some(at) => format!(
            "the run is still running but its logs stopped {after}, last stamped {}",
            at.format("%Y-%m-%d %H:%M:%S")
        ),
        None => format!("the run is still running but its logs stopped {after}"),
    }
}

/// The time in slurmstepd's `CANCELLED AT <time>` (the node's local time, read as UTC like the
/// log's other stamps).
fn cancelled_at(text: &str) -> Option<DateTime<Utc>> {
    let rest = &text[text.find("CANCELLED AT ")? + "CANCELLED AT ".len()..];
    let stamp = rest.split_whitespace().next()?;
    chrono::NaiveDateTime::parse_from_str(stamp, "%Y-%m-%dT%H:%M:%S")
        .ok()
        .map(|naive| naive.and_utc())
}

/// Hangs in a finished log: stretches between its own timestamps, from one progress report to the
/// next (or to its last stamped line), longer than the step bound — `step_gap_factor` times the
/// median gap between reports, never under `step_timeout_floor_secs` — leaving out stretches that
/// hold a checkpoint save. Each with when it began and what it was.
fn silences(
    samples: &[ThroughputSample],
    checkpoints: &[u64],
    last_stamp: Option<DateTime<Utc>>,
    config: &crate::config::DetectConfig,
) -> Vec<(DateTime<Utc>, String)> {
    let mut reports: Vec<(DateTime<Utc>, u64)> =
        samples.iter().map(|s| (s.time, s.iteration)).collect();
    reports.sort();
    reports.dedup_by_key(|(_, iteration)| *iteration);
    let saving = |from: u64, to: u64| checkpoints.iter().any(|c| *c >= from && *c < to);
    let mut gaps: Vec<i64> = reports
        .windows(2)
        .filter(|pair| !saving(pair[0].1, pair[1].1))
        .map(|pair| (pair[1].0 - pair[0].0).num_seconds())
        .collect();
    if gaps.len() < 5 {
        return Vec::new();
    }
    gaps.sort_unstable();
    let median = gaps[gaps.len() / 2].max(0) as f64;
    let bound = ((median * config.step_gap_factor).ceil() as i64)
        .max(config.step_timeout_floor_secs as i64);
    let mut found = Vec::new();
    let mut stretches: Vec<(DateTime<Utc>, u64, DateTime<Utc>, bool)> = reports
        .windows(2)
        .filter(|pair| !saving(pair[0].1, pair[1].1))
        .map(|pair| (pair[0].0, pair[0].1, pair[1].0, false))
        .collect();
    if let (Some(&(time, iteration)), Some(end)) = (reports.last(), last_stamp)
        && end > time
    {
        stretches.push((time, iteration, end, true));
    }
    for (from, iteration, to, trailing) in stretches {
        let secs = (to - from).num_seconds();
        if secs > bound {
            found.push((
                from,
                format!(
                    "hang: no progress for {secs} s after iteration {iteration} ({} to {}{}), over the \
                     step bound of {bound} s ({} × the median gap of {median:.0} s between reports)",
                    from.format("%H:%M:%S"),
                    to.format("%H:%M:%S"),
                    if trailing { ", the log's last stamped line" } else { "" },
                    config.step_gap_factor
                ),
            ));
        }
    }
    found
}

/// The baseline window and the recent window of the samples, as the engine reads them from the store.
fn window<'s>(
    samples: &'s [ThroughputSample],
    config: &crate::config::DetectConfig,
) -> (&'s [ThroughputSample], &'s [ThroughputSample]) {
    let head =
        (config.throughput_warmup_samples + config.throughput_baseline_samples).min(samples.len());
    let tail = config.throughput_drop_samples.min(samples.len());
    (&samples[..head], &samples[samples.len() - tail..])
}

fn read_whole(
    path: &Path,
    limits: TailLimits,
    mut each: impl FnMut(&Chunk),
) -> Result<(), ExplainError> {
    if !path.exists() {
        return Err(ExplainError::Missing {
            path: path.to_path_buf(),
        });
    }
    let keep = |chunk: Chunk, _: &mut ()| chunk;
    digest_file(path, limits, 1, &keep, |chunk| {
        each(&chunk);
        Some(chunk)
    })
    .map_err(|source| ExplainError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// The default policy's decision for a first failure of this kind.
fn would_do(
    config: &Config,
    attribution: &Attribution,
    anomaly: AnomalyKind,
    nodes: &[String],
    now: DateTime<Utc>,
) -> Vec<String> {
    let workflow = Workflow::enrolled(
        "explained",
        // The default policy decides the same on every backend.
        BackendKind::Slurm,
        JobSpec::default(),
        RecoveryLimits::default(),
        now,
    );
    // A stalled run is still running: its recovery begins by cancelling it.
    let (state, state_raw) = if anomaly == AnomalyKind::Hang {
        (JobState::Running, "RUNNING")
    } else {
        (JobState::Failed, "FAILED")
    };
    let attempt = Attempt {
        workflow_id: 0,
        index: 0,
        job_id: "JOBID".into(),
        restart_count: 0,
        nodes: nodes.to_vec(),
        gpus: 0,
        state,
        state_raw: state_raw.into(),
        reason: None,
        submit_time: None,
        start_time: None,
        end_time: None,
        exit_code: None,
        excluded_nodes: Vec::new(),
        log_path: None,
        last_log_time: None,
        last_iteration: None,
        last_progress_time: None,
        updated_at: now,
    };
    let policy = Policy::from_config(&config.recovery, false);
    let decision = decide(&workflow, &attempt, anomaly, attribution, &policy, None);
    let mut steps: Vec<String> = decision
        .intents
        .iter()
        .map(|intent| {
            format!(
                "{} ({}){}",
                intent.why,
                if intent.permitted {
                    "whitelisted: runs with --auto"
                } else {
                    "not whitelisted: proposed for approval"
                },
                if intent.params.exclude_nodes.is_empty() {
                    String::new()
                } else {
                    format!(", excluding {}", intent.params.exclude_nodes.join(","))
                }
            )
        })
        .collect();
    if let Some(reason) = decision.stop_reason {
        steps.push(format!("no requeue: {reason}"));
    }
    for remedy in &attribution.remedies {
        steps.push(format!(
            "recommended: {} — {}",
            remedy.kind, remedy.description
        ));
    }
    steps
}

/// One labelled case of an evaluation manifest.
#[derive(Debug, Clone, Deserialize)]
pub struct Case {
    pub file: PathBuf,
    pub category: String,
    pub component: String,
    #[serde(default)]
    pub culprit: String,
    pub recoverable_by_requeue: bool,
    /// Kernel logs that belong to the case, relative to the manifest.
    #[serde(default)]
    pub kernel_logs: Vec<PathBuf>,
    /// The source says the run kept running with no further output after the excerpt: the engine
    /// would meet it as a stall, not as an exit.
    #[serde(default)]
    pub stalled: bool,
}

#[derive(Debug, Deserialize)]
struct Manifest {
    #[serde(default)]
    case: Vec<Case>,
}

/// How one case went.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    pub file: String,
    pub passed: bool,
    pub category_ok: bool,
    pub component_ok: bool,
    pub recoverable_ok: bool,
    /// None when the case names no culprit.
    pub culprit_ok: Option<bool>,
    pub expected: String,
    pub got: String,
    /// The labelled category and the attributed one, for per-category scores and confusions.
    pub expected_category: String,
    pub got_category: String,
    /// The labelled culprit and the node attributed (None when none), for culprit precision.
    pub expected_culprit: Option<String>,
    pub got_culprit: Option<String>,
}

/// The evaluation of a manifest.
#[derive(Debug, Clone, Serialize)]
pub struct Evaluation {
    pub cases: Vec<CaseResult>,
    pub passed: usize,
    pub failed: usize,
}

/// Runs explain over every case of a manifest (paths relative to it) and scores each field.
pub fn evaluate(
    catalog: &Catalog,
    config: &Config,
    manifest: &Path,
) -> Result<Evaluation, ExplainError> {
    let text = std::fs::read_to_string(manifest).map_err(|source| ExplainError::Read {
        path: manifest.to_path_buf(),
        source,
    })?;
    let parsed: Manifest = toml::from_str(&text).map_err(|err| ExplainError::Manifest {
        path: manifest.to_path_buf(),
        message: err.to_string(),
    })?;
    let base = manifest.parent().unwrap_or(Path::new("."));
    let mut cases = Vec::new();
    for case in parsed.case {
        let input = ExplainInput {
            logs: vec![base.join(&case.file)],
            kernel_logs: case.kernel_logs.iter().map(|k| base.join(k)).collect(),
            nodes: Vec::new(),
            ranks_per_node: 8,
            stalled: case.stalled,
        };
        let result = match explain(catalog, config, &input) {
            Ok(explanation) => score(catalog, &case, &explanation.attribution),
            Err(err) => CaseResult {
                file: case.file.display().to_string(),
                passed: false,
                category_ok: false,
                component_ok: false,
                recoverable_ok: false,
                culprit_ok: None,
                expected: case.category.clone(),
                got: format!("error: {err}"),
                expected_category: case.category.clone(),
                got_category: "error".to_string(),
                expected_culprit: (!case.culprit.is_empty()).then(|| case.culprit.clone()),
                got_culprit: None,
            },
        };
        cases.push(result);
    }
    let passed = cases.iter().filter(|c| c.passed).count();
    Ok(Evaluation {
        failed: cases.len() - passed,
        passed,
        cases,
    })
}

fn score(catalog: &Catalog, case: &Case, attribution: &Attribution) -> CaseResult {
    let aliases: Vec<&str> = attribution
        .signature
        .as_deref()
        .and_then(|id| catalog.signature(id))
        .map(|s| s.spec.aliases.iter().map(String::as_str).collect())
        .unwrap_or_default();
    let category_ok =
        attribution.category == case.category || aliases.contains(&case.category.as_str());
    let component_ok = attribution.component.as_str() == case.component;
    let recoverable_ok = attribution.recoverable == case.recoverable_by_requeue;
    let culprit_ok = (!case.culprit.is_empty()).then(|| {
        let c = &attribution.culprit;
        c.node.as_deref() == Some(case.culprit.as_str())
            || c.rank.map(|r| r.to_string()) == Some(case.culprit.clone())
            || c.rank.map(|r| format!("rank {r}")) == Some(case.culprit.clone())
            || c.gpu.map(|g| format!("GPU {g}")) == Some(case.culprit.clone())
    });
    CaseResult {
        expected_category: case.category.clone(),
        got_category: attribution.category.clone(),
        expected_culprit: (!case.culprit.is_empty()).then(|| case.culprit.clone()),
        got_culprit: attribution.culprit.node.clone(),
        file: case.file.display().to_string(),
        passed: category_ok && component_ok && recoverable_ok && culprit_ok.unwrap_or(true),
        category_ok,
        component_ok,
        recoverable_ok,
        culprit_ok,
        expected: format!(
            "{}/{}/{}{}",
            case.category,
            case.component,
            if case.recoverable_by_requeue {
                "requeue"
            } else {
                "no-requeue"
            },
            if case.culprit.is_empty() {
                String::new()
            } else {
                format!("/{}", case.culprit)
            }
        ),
        got: format!(
            "{}/{}/{}{}",
            attribution.category,
            attribution.component.as_str(),
            if attribution.recoverable {
                "requeue"
            } else {
                "no-requeue"
            },
            attribution
                .culprit
                .node
                .as_deref()
                .map(|n| format!("/{n}"))
                .unwrap_or_default()
        ),
    }
}

#[cfg(test)]
mod tests;
