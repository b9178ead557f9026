//! The fast paths of reading a log give what the full paths give: the candidate scan against every
//! line checked in full, many threads against one.

use std::path::{Path, PathBuf};

use super::*;
use crate::attribute::rejoin::wrapped_sample::{NCCL_ERROR, PROGRESS, at_64_columns};
use crate::attribute::scan::Mark;
use crate::telemetry::line::frame;
use crate::telemetry::record::{recognise, recognise_hinted};

fn corpus_logs() -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|ext| ext == "log") {
                found.push(path);
            }
        }
    }
    let mut found = Vec::new();
    walk(Path::new("../tests/fixtures/corpus"), &mut found);
    walk(Path::new("../tests/fixtures/logs"), &mut found);
    found.sort();
    assert!(found.len() > 150, "{} logs", found.len());
    found
}

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-03-01T12:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn chunk_of(text: &str) -> Chunk {
    Chunk::of_text(text)
}

/// A generated log of many progress-line shapes with failures, tracebacks and straggler reports
/// among them, several reads long.
fn generated_log() -> String {
    let mut text = String::new();
    for n in 0..6000u64 {
        let rank = (n * 37) % 64;
        let second = n % 60;
        let line = match n % 50 {
            0 => format!(
                "{rank:>3}: [2026-03-01 10:{:02}:{second:02}] iteration {:>7}/ 100000 | consumed samples: {} | elapsed time per iteration (ms): {}.4 | throughput per GPU (TFLOP/s/GPU): {}.1 | lm loss: 2.{n}E+00 |",
                n / 100,
                n / 50,
                n * 64,
                3000 + n % 17,
                400 - n % 13
            ),
            7 => format!(
                "{rank:>3}: node-{:02}:1234:5678 [{}] NCCL INFO Channel 00/0 : via P2P",
                rank / 8,
                rank % 8
            ),
            9 if n % 1000 == 9 => format!(
                "{rank:>3}: node-{:02}:1234:5678 [{}] NCCL WARN NET/IB : Got completion from peer with error 12",
                rank / 8,
                rank % 8
            ),
            11 if n % 1500 == 11 => format!(
                "{rank:>3}: Traceback (most recent call last):\n{rank:>3}:   File \"train.py\", line {n}, in <module>\n{rank:>3}:     step()\n{rank:>3}: RuntimeError: CUDA error: an illegal memory access was encountered"
            ),
            13 if n % 700 == 13 => format!(
                " 31: [2026-03-01 10:00:{second:02}] | MnRtt/Rnk: 3012.40ms/3 | MxRtt/Rnk: {}.36ms/20 | MnPwr/Rnk: 598000mW/20 |",
                3100 + n % 2000
            ),
            17 => format!(
                "Epoch 0:  {}%|####      | {n}/6000 [00:{second:02}<00:30, 3.{}it/s, loss=2.{n}, v_num=0]",
                n * 100 / 6000,
                n % 10
            ),
            19 if n % 2000 == 19 => format!(
                "[rank{rank}]:[E301 10:00:{second:02}.123456 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={n}, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."
            ),
            23 if n % 2500 == 23 => format!(
                "  0: [2026-03-01 10:00:{second:02}] saving checkpoint at iteration {:>7} to /ckpt/run",
                n / 50
            ),
            24 if n % 2500 == 24 => format!(
                "  0: [2026-03-01 10:00:{second:02}] successfully saved checkpoint from iteration {:>7} to /ckpt/run",
                n / 50
            ),
            29 if n % 3000 == 29 => format!(
                "[{}] NVRM: Xid (PCI:0000:{:02x}:00): 79, pid={n}, GPU has fallen off the bus.",
                1000 + n,
                n % 256
            ),
            _ => format!(
                "{rank:>3}: [2026-03-01 10:{:02}:{second:02}] [Rank {rank}] step {} micro-batch {} forward 0.1{}s backward 0.2{}s",
                n / 100,
                n / 50,
                n % 16,
                n % 7,
                n % 5
            ),
        };
        text.push_str(&line);
        text.push('\n');
    }
    text
}

/// Every line fed through the full checks, against the read's marks.
fn digests(catalog: &Catalog, text: &str) -> (LogDigest, LogDigest) {
    let chunk = chunk_of(text);
    let chunk = attribute::rejoin::rejoin_wrapped(&chunk);
    let marks = catalog.line_marks(&chunk);
    for (line, mark) in chunk.lines().zip(&marks) {
        let message = frame(line).message;
        if *mark != Mark::Candidate {
            assert!(!catalog.is_notable(message), "scan missed {line:?}");
            assert!(!catalog.is_notable(line), "scan missed {line:?}");
            assert_eq!(
                recognise_hinted(message, false),
                recognise(message),
                "{line:?}"
            );
        }
        if *mark == Mark::Quiet {
            // The digest passes a quiet line by: the recognisers must have nothing to say of it.
            assert_eq!(recognise(message), None, "{line:?}");
        }
    }
    let mut fast = Digester::new(|line: &str| catalog.is_notable(line), now(), None, None);
    fast.push_chunk(&chunk, &marks);
    // Every line a candidate: each goes through every check.
    let mut full = Digester::new(|line: &str| catalog.is_notable(line), now(), None, None);
    full.push_chunk(&chunk, &vec![Mark::Candidate; chunk.line_count()]);
    // The facts found apart (as explain's threads find them), applied afterwards.
    let notable = |line: &str| catalog.is_notable(line);
    let facts = LineClassifier::new(notable, now()).classify_chunk(&chunk, &marks);
    let mut apart = Digester::new(notable, now(), None, None);
    apart.push_classified(&chunk, facts);
    let (fast, apart) = (fast.finish(), apart.finish());
    assert_eq!(fast, apart);
    (fast, full.finish())
}

use crate::telemetry::pipeline::{LogDigest, OpenState};

#[test]
fn the_candidate_scan_passes_over_only_lines_the_full_checks_find_nothing_in() {
    let catalog = Catalog::builtin().unwrap();
    for path in corpus_logs() {
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        let (fast, full) = digests(&catalog, &text);
        assert_eq!(fast, full, "{}", path.display());
    }
    let (fast, full) = digests(&catalog, &generated_log());
    assert!(!full.evidence.is_empty() && !full.samples.is_empty() && !full.tracebacks.is_empty());
    assert!(!full.straggler_reports.is_empty() && !full.checkpoints.is_empty());
    assert_eq!(fast, full);
}

#[test]
fn the_candidate_scan_passes_over_only_lines_the_full_checks_find_nothing_in_when_no_shape_repeats()
{
    let catalog = Catalog::builtin().unwrap();
    let mut id = 0x9e37_79b9_7f4a_7c15u64;
    let mut with_ids = |text: &str| {
        let mut out = String::new();
        for line in text.lines() {
            id = id.rotate_left(23).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ 0x94d0_49bb;
            out.push_str(&format!("{line} trace={id:016x}\n"));
        }
        out
    };
    for path in corpus_logs() {
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        let (fast, full) = digests(&catalog, &with_ids(&text));
        assert_eq!(fast, full, "{}", path.display());
    }
    let (fast, full) = digests(&catalog, &with_ids(&generated_log()));
    assert!(!full.evidence.is_empty() && !full.samples.is_empty());
    assert_eq!(fast, full);
}

#[test]
fn the_candidate_scan_marks_only_what_may_match_on_a_progress_log() {
    let catalog = Catalog::builtin().unwrap();
    let chunk = chunk_of(&generated_log());
    let marks = catalog.line_marks(&chunk);
    let marked = marks.iter().filter(|m| **m != Mark::Quiet).count();
    // The progress lines (nine in ten) are passed over.
    assert!(
        marked < chunk.line_count() / 5,
        "{marked} of {}",
        chunk.line_count()
    );
}

/// One log explained with `config`, on `threads`, read in steps of `read_step`.
fn explanation_of(
    catalog: &Catalog,
    config: &Config,
    path: &Path,
    threads: usize,
    read_step: u64,
) -> Explanation {
    let input = ExplainInput {
        logs: vec![path.to_path_buf()],
        kernel_logs: Vec::new(),
        nodes: (0..8).map(|n| format!("node-{n:02}")).collect(),
        ranks_per_node: 8,
        stalled: false,
    };
    let options = ExplainOptions {
        threads,
        read_step,
        now: now(),
    };
    explain_with(catalog, config, &input, &options).unwrap()
}

fn explained(catalog: &Catalog, path: &Path, threads: usize, read_step: u64) -> String {
    // A step holds at least one line of the cap: a small cap lets the steps be small.
    let mut config = Config::default();
    config.telemetry.max_line_bytes = (read_step as usize / 2).max(1);
    let explanation = explanation_of(catalog, &config, path, threads, read_step);
    serde_json::to_string_pretty(&explanation).unwrap()
}

#[test]
fn explaining_on_many_threads_gives_what_one_thread_gives() {
    let catalog = Catalog::builtin().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let generated = dir.path().join("generated.log");
    std::fs::write(&generated, generated_log()).unwrap();
    let mut logs = corpus_logs();
    logs.push(generated);
    for path in logs {
        // Small reads, so even the corpus' logs are several reads long.
        let one = explained(&catalog, &path, 1, 2048);
        for threads in [2, 5] {
            assert_eq!(
                explained(&catalog, &path, threads, 2048),
                one,
                "{} on {threads} threads",
                path.display()
            );
        }
    }
}

/// A log of two progress lines around rank 3's CUDA error, written after `before` on its line.
fn log_of_one_long_error(dir: &Path, before: &str) -> PathBuf {
    let path = dir.join("long.log");
    let line = format!(
        "[rank3] {before} RuntimeError: CUDA error: an illegal memory access was encountered.\n"
    );
    std::fs::write(&path, format!("Step 1\n{line}Step 2\n")).unwrap();
    path
}

#[test]
fn a_read_step_shorter_than_a_line_the_cap_allows_leaves_the_line_whole() {
    let catalog = Catalog::builtin().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // One error line of 1,700 bytes whose telling words come after its first 1,024 (within what
    // evidence keeps of a line).
    let path = log_of_one_long_error(dir.path(), &"x".repeat(1600));
    let explain_in = |read_step| {
        let explanation = explanation_of(&catalog, &Config::default(), &path, 1, read_step);
        serde_json::to_string_pretty(&explanation).unwrap()
    };
    let whole = explain_in(1 << 20);
    assert!(whole.contains("illegal memory access"), "{whole}");
    assert_eq!(explain_in(1024), whole);
}

#[test]
fn a_wrapped_message_cut_where_a_read_step_ends_is_read_whole() {
    let catalog = Catalog::builtin().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A terminal 64 columns wide: progress lines and the error cut at the width.
    let progress = at_64_columns(PROGRESS);
    let error = at_64_columns(NCCL_ERROR);
    let path = dir.path().join("wrapped.log");
    let before = progress.repeat(10);
    std::fs::write(&path, before.clone() + &error + &progress.repeat(10)).unwrap();
    // The signature that read the error, and whether the whole message is among the evidence.
    let read_in = |read_step| {
        let mut config = Config::default();
        config.telemetry.max_line_bytes = 200;
        let attribution = explanation_of(&catalog, &config, &path, 1, read_step).attribution;
        let whole = attribution.evidence.iter().any(|line| {
            line.contains("NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1275, unhandled system error (run")
        });
        (attribution.signature, whole)
    };
    let at_once = read_in(1 << 20);
    assert_eq!(
        at_once,
        (Some("net-nccl-unhandled-system-error".to_string()), true)
    );
    // A step that ends after the error's first line, and one that ends after its second.
    for cut_after in [1, 2] {
        let step = before.len() + 65 * cut_after;
        assert_eq!(
            read_in(step as u64),
            at_once,
            "a step ends after line {cut_after} of the error"
        );
    }
}

#[test]
fn an_error_at_the_end_of_a_line_longer_than_evidence_keeps_is_still_read() {
    let catalog = Catalog::builtin().unwrap();
    let dir = tempfile::tempdir().unwrap();
    // A tensor's repr of 6,000 bytes, then the error that names the failure.
    let path = log_of_one_long_error(
        dir.path(),
        &format!("batch: tensor([{}])", "0.125, ".repeat(850)),
    );
    let explanation = explanation_of(&catalog, &Config::default(), &path, 1, 1 << 20);
    let attribution = &explanation.attribution;
    assert_ne!(attribution.category.as_str(), "healthy", "{attribution:#?}");
    let kept = &attribution.evidence[0];
    assert!(kept.starts_with("[rank3] batch: tensor(["), "{kept}");
    assert!(
        kept.contains("an illegal memory access was encountered."),
        "{kept}"
    );
    assert!(kept.chars().count() <= 2000, "{}", kept.chars().count());
}

#[test]
fn the_candidate_scan_marks_every_traceback_header() {
    let catalog = Catalog::builtin().unwrap();
    let headers = [
        "Traceback (most recent call last):",
        "Traceback of TorchScript (most recent call last):",
        "Traceback of TorchScript, original code (most recent call last):",
    ];
    let chunk = chunk_of(&headers.join("\n"));
    assert_eq!(
        catalog.line_marks(&chunk),
        vec![Mark::Candidate; headers.len()]
    );
}

/// The category `explain` gives a log of these lines.
fn category_of(lines: &[String]) -> String {
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    let explanation = explained_as(&lines, false);
    assert!(!explanation.failed);
    explanation.attribution.category
}

#[test]
fn a_log_without_a_failure_is_explained_by_the_numbers_its_tools_printed() {
    let query = |current: u32, limit: u32| {
        vec![
            "GPU 00000000:2D:00.0".to_string(),
            "    Temperature".to_string(),
            format!("        GPU Current Temp                  : {current} C"),
            "        GPU Shutdown Temp                 : 102 C".to_string(),
            format!("        GPU Max Operating Temp            : {limit} C"),
        ]
    };
    assert_eq!(category_of(&query(56, 57)), "thermal");
    assert_eq!(category_of(&query(56, 85)), "healthy");
    let loader = |stall_every: usize| -> Vec<String> {
        (0..40)
            .map(|n| {
                let ms = if n % stall_every == 0 { 31_000 } else { 20 };
                format!("data: {ms}ms, mem: 24882M")
            })
            .collect()
    };
    assert_eq!(category_of(&loader(8)), "data_backpressure");
    assert_eq!(category_of(&loader(100)), "healthy");
    let gemm = |first: f64| -> Vec<String> {
        (0..8)
            .map(|n| {
                let value = if n == 0 { first } else { 19200.0 + n as f64 };
                format!("GEMM [I] (ADAPTER#{n})  Ending with {value} GFlops")
            })
            .collect()
    };
    assert_eq!(category_of(&gemm(6698.4)), "straggler");
    assert_eq!(category_of(&gemm(18900.0)), "healthy");
    let smi = |busy: &[u32]| -> Vec<String> {
        busy.iter()
            .map(|percent| {
                format!(
                    "| N/A   44C    P0    72W / 300W |   5484MiB / 16130MiB |    {percent:>3}%      Default |"
                )
            })
            .collect()
    };
    assert_eq!(
        category_of(&smi(&[0, 95, 0, 94, 0, 31, 0, 96, 0, 0])),
        "data_backpressure"
    );
    assert_eq!(category_of(&smi(&[95, 97, 94, 99, 96, 98])), "healthy");
}

/// `explain` of these lines as a run that exited or as one still running with its log stopped.
fn explained_as(lines: &[&str], stalled: bool) -> Explanation {
    let catalog = Catalog::builtin().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.log");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    let input = ExplainInput {
        logs: vec![path],
        stalled,
        ..ExplainInput::default()
    };
    let options = ExplainOptions {
        threads: 1,
        read_step: READ_STEP,
        now: now(),
    };
    explain_with(&catalog, &Config::default(), &input, &options).unwrap()
}

#[test]
fn a_stalled_run_is_a_hang_unless_its_log_names_a_cause() {
    let progress = [
        "[2026-03-01 10:00:00] iteration      100/ 100000 | elapsed time per iteration (ms): 3012.4 | throughput per GPU (TFLOP/s/GPU): 401.2 |",
        "[2026-03-01 10:00:03] iteration      101/ 100000 | elapsed time per iteration (ms): 3010.1 | throughput per GPU (TFLOP/s/GPU): 401.5 |",
    ];
    // The same lines from a run that exited say nothing failed.
    let exited = explained_as(&progress, false);
    assert!(!exited.failed);
    assert_eq!(exited.attribution.category, "healthy");

    let stalled = explained_as(&progress, true);
    assert!(stalled.failed);
    assert_eq!(stalled.attribution.category, "hang");
    assert_eq!(
        stalled.attribution.component,
        crate::model::Component::Infrastructure
    );
    assert!(stalled.attribution.recoverable);
    assert!(
        stalled
            .anomalies
            .iter()
            .any(|what| what.contains("after iteration 101") && what.contains("10:00:03")),
        "{:?}",
        stalled.anomalies
    );
    assert!(
        stalled.recovery.iter().any(|step| step.contains("requeue")),
        "{:?}",
        stalled.recovery
    );

    // A cause in the log outranks the bare stall: an object store the job keeps retrying.
    let mut retrying = progress.to_vec();
    retrying.push(
        "2026-03-01 10:00:05,986 - internetarchive.item - INFO - s3 is overloaded, sleeping for 30 seconds and retrying. 10 retries left.",
    );
    let stalled_on_storage = explained_as(&retrying, true);
    assert!(stalled_on_storage.failed);
    assert_eq!(
        stalled_on_storage.attribution.category,
        "object_store_timeout"
    );
}

#[test]
fn a_condition_the_run_lives_with_explains_a_failure_but_makes_none() {
    let nearly_full = "(raylet) [2025-05-02 14:11:07,402 E 41822 41870] file_system_monitor.cc:116: /tmp/ray/session_2025-05-02_13-02-11_806214_41766 is over 95% full, available space: 3.81204 GB; capacity: 98.3031 GB. Object creation will fail if spilling is required.";
    // Alone, the raylet's warning leaves the run healthy.
    let alone = explained_as(&[nearly_full, nearly_full], false);
    assert!(!alone.failed);
    assert_eq!(alone.attribution.category, "healthy");
    // With a traceback the run raised, cut off before its exception's line, it names the cause.
    let failed = explained_as(
        &[
            nearly_full,
            "Traceback (most recent call last):",
            "  File \"/workspace/train.py\", line 142, in <module>",
            "    results = ray.get(futures)",
        ],
        false,
    );
    assert!(failed.failed);
    assert_eq!(failed.attribution.category, "disk_full");
    assert_eq!(
        failed.attribution.signature.as_deref(),
        Some("ray-spill-disk-nearly-full")
    );
}

#[test]
fn a_warning_printed_on_its_own_line_is_no_exception_raised() {
    let warning = "UserWarning: Grad strides do not match bucket view strides. This is not an error, but may impair performance.";
    let explanation = explained_as(&[warning], false);
    assert!(!explanation.failed, "{:?}", explanation.attribution);
    let raised = explained_as(&["ValueError: a bad value"], false);
    assert!(raised.failed);
}

/// What a log's digests say, whatever the reads: the evidence (in time order, the order attribution
/// reads it in), the tracebacks, the checkpoints and the last iteration.
type Said = (
    Vec<(DateTime<Utc>, String)>,
    Vec<String>,
    Vec<u64>,
    Option<u64>,
);

fn said(digests: &[LogDigest]) -> Said {
    let mut evidence: Vec<_> = digests
        .iter()
        .flat_map(|d| d.evidence.iter().map(|l| (l.time, l.text.clone())))
        .collect();
    evidence.sort();
    let tracebacks = digests
        .iter()
        .flat_map(|d| d.tracebacks.iter().map(|b| format!("{b:?}")))
        .collect();
    let checkpoints = digests
        .iter()
        .flat_map(|d| d.checkpoints.iter().map(|c| c.0))
        .collect();
    let last = digests.iter().filter_map(|d| d.last_iteration).max();
    (evidence, tracebacks, checkpoints, last)
}

#[test]
fn a_log_read_in_pieces_says_what_it_says_read_at_once() {
    // The engine reads a live log in whatever pieces were appended between two wake-ups, with a new
    // digester each time that continues what the read before left open.
    let catalog = Catalog::builtin().unwrap();
    let notable = |line: &str| catalog.is_notable(line);
    for path in corpus_logs() {
        let text = String::from_utf8_lossy(&std::fs::read(&path).unwrap()).into_owned();
        let whole = chunk_of(&text);
        let mut once = Digester::new(notable, now(), None, None);
        once.push_chunk(&whole, &catalog.line_marks(&whole));
        let once = said(&[once.finish()]);
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        for size in [1, 3] {
            let mut digests: Vec<LogDigest> = Vec::new();
            let mut open = OpenState::default();
            for piece in lines.chunks(size) {
                let (last_time, last_iteration) = digests
                    .last()
                    .map_or((None, None), |d| (d.last_time, d.last_iteration));
                let chunk = chunk_of(&piece.concat());
                let mut digester =
                    Digester::new(notable, now(), last_time, last_iteration).resume(open);
                digester.push_chunk(&chunk, &catalog.line_marks(&chunk));
                let (digest, left) = digester.finish_keeping();
                digests.push(digest);
                open = left;
            }
            // The attempt ends: what is still open is settled.
            digests.push(
                Digester::new(notable, now(), None, None)
                    .resume(open)
                    .finish(),
            );
            assert_eq!(
                said(&digests),
                once,
                "{} in pieces of {size}",
                path.display()
            );
        }
    }
}
