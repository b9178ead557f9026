//! Ingest benchmark over a large generated unified log: the engine's log path (bounded reads →
//! framing → recognisers → evidence selection with the signature prefilter → detectors) on one core,
//! and `runguard explain` on every core.
//!
//! `cargo bench --bench ingest` (size with `RUNGUARD_BENCH_MB`, default 1024). Prints MB/s, lines/s
//! and peak memory of each, and, when `rg` is installed, the same file through `rg -c` with the
//! catalog's own patterns (one thread and all threads) and the ratios to it.
//!
//! `RUNGUARD_BENCH_IDS=1` ends every line with its own hex id, so no two lines share a shape (the
//! worst case of the candidate scan); `RUNGUARD_BENCH_PARTS=ingest` measures the ingest alone;
//! `RUNGUARD_BENCH_STAGES=1` first times each stage of the ingest on the first 64 MiB as one read, best
//! of ten. The ingest reads in the engine's steps (`READ_STEP_BYTES`); `RUNGUARD_BENCH_READ_KB` sets
//! another step to compare with (65536: the whole 64 MiB budget of a tick in one read). Last come
//! `RUNGUARD_BENCH_ROUNDS` (3) paired rounds of the ingest and `rg -j1`, each round's ratio taken under
//! the same load.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use chrono::{TimeDelta, Utc};
use runguard_engine::attribute::Catalog;
use runguard_engine::attribute::scan::{Mark, ShapeMemory};
use runguard_engine::config::{Config, DetectConfig};
use runguard_engine::detect::{StragglerTracker, throughput_drop};
use runguard_engine::explain::{ExplainInput, explain};
use runguard_engine::model::ThroughputSample;
use runguard_engine::telemetry::pipeline::{Digester, OpenState};
use runguard_engine::telemetry::tail::{
    Chunk, READ_STEP_BYTES, TailLimits, read_new_lines_reusing,
};

/// Time spent in the whole-read signature scan, reported apart.
static SCAN_SECONDS: std::sync::Mutex<f64> = std::sync::Mutex::new(0.0);

const LIMITS: TailLimits = TailLimits {
    max_line_bytes: 64 * 1024,
    max_read_bytes: 64 * 1024 * 1024,
};

fn main() {
    let megabytes: u64 = std::env::var("RUNGUARD_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1024);
    let ids = std::env::var("RUNGUARD_BENCH_IDS").is_ok_and(|v| v == "1");
    let ingest_only = std::env::var("RUNGUARD_BENCH_PARTS").is_ok_and(|v| v == "ingest");
    let name = if ids {
        format!("bench-ingest-{megabytes}mb-ids.log")
    } else {
        format!("bench-ingest-{megabytes}mb.log")
    };
    let path = target_dir().join(name);
    let generated = Instant::now();
    let bytes = ensure_log(&path, megabytes * 1024 * 1024, ids);
    println!(
        "log: {} ({:.0} MB, ready in {:.1} s)",
        path.display(),
        bytes as f64 / 1e6,
        generated.elapsed().as_secs_f64()
    );

    let catalog = Catalog::builtin().expect("built-in catalog");
    // Built once per process, when a first log shows many line shapes: timed apart, as the catalog is.
    let prepared = Instant::now();
    catalog.prepare_scan();
    println!(
        "the scan's coarse searches built in {:.2} s (once per process)",
        prepared.elapsed().as_secs_f64()
    );
    let config = DetectConfig::default();
    let nodes: Vec<String> = (1..=32).map(|n| format!("node-{n:02}")).collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mb = bytes as f64 / 1e6;

    if std::env::var("RUNGUARD_BENCH_STAGES").is_ok_and(|v| v == "1") {
        stages(&path, &catalog);
    }

    reset_peak_memory();
    let (start, cpu) = (Instant::now(), cpu_seconds());
    let (lines, evidence, samples, findings) = ingest(&path, &catalog, &config, &nodes);
    let (seconds, cpu) = (start.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    let (ingest_mb_s, ingest_cpu) = (mb / seconds, cpu);
    println!(
        "runguard ingest (1 core): {lines} lines in {seconds:.2} s = {ingest_mb_s:.0} MB/s, {:.2} M lines/s, peak memory {}",
        lines as f64 / 1e6 / seconds,
        peak_memory().unwrap_or_else(|| "n/a".into())
    );
    // On a shared machine the wall time includes waiting for the core; the CPU time does not.
    println!(
        "  CPU time {cpu:.2} s = {:.0} MB per CPU second",
        mb / cpu.max(f64::EPSILON)
    );
    println!(
        "  of which the candidate scan: {:.2} s",
        *SCAN_SECONDS.lock().unwrap_or_else(|e| e.into_inner())
    );
    println!("  kept {evidence} evidence lines, {samples} throughput samples, {findings} findings");
    if ingest_only {
        return;
    }

    reset_peak_memory();
    let input = ExplainInput {
        logs: vec![path.clone()],
        kernel_logs: Vec::new(),
        nodes: nodes.clone(),
        ranks_per_node: 8,
        stalled: false,
    };
    let (start, cpu) = (Instant::now(), cpu_seconds());
    let explanation = explain(&catalog, &Config::default(), &input).expect("explain");
    let (seconds, cpu) = (start.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    let explain_mb_s = mb / seconds;
    println!(
        "runguard explain ({cores} cores): {} lines in {seconds:.2} s = {explain_mb_s:.0} MB/s, {:.2} M lines/s, peak memory {} ({})",
        explanation.lines,
        explanation.lines as f64 / 1e6 / seconds,
        peak_memory().unwrap_or_else(|| "n/a".into()),
        explanation.attribution.category
    );
    println!("  CPU time {cpu:.2} s over all threads");

    let rg_one = ripgrep_reference(&path, &catalog, Some(1));
    let rg_all = ripgrep_reference(&path, &catalog, None);
    match (rg_one, rg_all) {
        (Some((one, one_cpu)), Some((all, all_cpu))) => {
            let (one_mb_s, all_mb_s) = (mb / one, mb / all);
            println!(
                "rg -c with the catalog's patterns, 1 thread: {one:.2} s = {one_mb_s:.0} MB/s; ingest/rg = {:.2}",
                ingest_mb_s / one_mb_s
            );
            println!(
                "  CPU time {one_cpu:.2} s = {:.0} MB per CPU second; ingest/rg per CPU second = {:.2}",
                mb / one_cpu.max(f64::EPSILON),
                one_cpu / ingest_cpu.max(f64::EPSILON)
            );
            println!(
                "rg -c with the catalog's patterns, all threads: {all:.2} s = {all_mb_s:.0} MB/s; explain/rg = {:.2}",
                explain_mb_s / all_mb_s
            );
            println!("  CPU time {all_cpu:.2} s over all threads");
        }
        _ => println!("rg not installed: no reference ratio (apt-get install ripgrep)"),
    }
    paired_rounds(&path, &catalog, &config, &nodes, mb);
}

/// The ingest and `rg -j1` one after the other, `RUNGUARD_BENCH_ROUNDS` times (3 by default): on a
/// shared machine whose speed changes from minute to minute, each round's ratio compares the two
/// under the same load, and the median ratio is the figure to quote.
fn paired_rounds(path: &Path, catalog: &Catalog, config: &DetectConfig, nodes: &[String], mb: f64) {
    let rounds: usize = std::env::var("RUNGUARD_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let mut ratios = Vec::new();
    for round in 1..=rounds {
        let cpu = cpu_seconds();
        ingest(path, catalog, config, nodes);
        let ingest_cpu = cpu_seconds() - cpu;
        let Some((_, rg_cpu)) = ripgrep_reference(path, catalog, Some(1)) else {
            return;
        };
        let ratio = rg_cpu / ingest_cpu.max(f64::EPSILON);
        println!(
            "round {round}: ingest {:.0} MB per CPU second, rg -j1 {:.0}; ingest/rg {ratio:.2}",
            mb / ingest_cpu.max(f64::EPSILON),
            mb / rg_cpu.max(f64::EPSILON)
        );
        ratios.push(ratio);
    }
    ratios.sort_by(f64::total_cmp);
    if let Some(median) = ratios.get(ratios.len() / 2) {
        println!(
            "paired rounds: ingest/rg per CPU second {:.2} – {:.2}, median {median:.2}",
            ratios[0],
            ratios[ratios.len() - 1]
        );
    }
}

/// The stages of the ingest on the file's first read, each the best of ten runs, so that a loaded
/// machine's interruptions fall out: reading and framing, the candidate scan, the digest.
fn stages(path: &Path, catalog: &Catalog) {
    let best = |mut run: Box<dyn FnMut() + '_>| {
        (0..10)
            .map(|_| {
                let start = Instant::now();
                run();
                start.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let mut spare = Some(Chunk::default());
    let read = best(Box::new(|| {
        let chunk = read_new_lines_reusing(path, 0, None, LIMITS, spare.take().unwrap_or_default())
            .expect("readable log");
        spare = Some(chunk);
    }));
    let chunk =
        read_new_lines_reusing(path, 0, None, LIMITS, Chunk::default()).expect("readable log");
    let scan = best(Box::new(|| {
        std::hint::black_box(catalog.line_marks(&chunk));
    }));
    let candidates = catalog.line_marks(&chunk);
    let now = Utc::now();
    let digest = best(Box::new(|| {
        let mut digester = Digester::new(|line: &str| catalog.is_notable(line), now, None, None);
        digester.push_chunk(&chunk, &candidates);
        std::hint::black_box(digester.finish());
    }));
    let mb = chunk.text.len() as f64 / 1e6;
    let marked = candidates
        .iter()
        .filter(|mark| **mark != Mark::Quiet)
        .count();
    println!(
        "stages on the first {mb:.0} MB ({} lines, {marked} marked), best of 10: read and frame {:.1} ms, scan {:.1} ms, digest {:.1} ms = {:.0} MB/s together",
        chunk.spans.len(),
        read * 1e3,
        scan * 1e3,
        digest * 1e3,
        mb / (read + scan + digest)
    );
}

/// Reads the file the way the engine does, in bounded chunks, running the detectors after each chunk
/// as the engine does after each tick.
fn ingest(
    path: &Path,
    catalog: &Catalog,
    config: &DetectConfig,
    nodes: &[String],
) -> (u64, usize, usize, usize) {
    let now = Utc::now();
    let mut offset = 0;
    let mut identity = None;
    let (mut lines, mut evidence, mut findings) = (0u64, 0usize, 0usize);
    let mut head: Vec<ThroughputSample> = Vec::new();
    let mut tail: Vec<ThroughputSample> = Vec::new();
    let mut straggler = StragglerTracker::default();
    let (mut last_time, mut last_iteration) = (None, None);
    let mut spare = Chunk::default();
    // As the engine keeps them over the steps of one tick, whose budget is a whole 64 MiB read.
    let mut shapes = ShapeMemory::default();
    // What each read leaves open for the next, as the engine carries it.
    let mut open = OpenState::default();
    let mut tick_read = 0;
    // The engine's step (a tick's budget is read in steps of it), or another to compare with.
    let step = TailLimits {
        max_read_bytes: std::env::var("RUNGUARD_BENCH_READ_KB")
            .ok()
            .and_then(|v| v.parse::<u64>().ok())
            .map_or(READ_STEP_BYTES, |kb| kb * 1024),
        ..LIMITS
    };
    loop {
        let chunk = read_new_lines_reusing(path, offset, identity.as_deref(), step, spare)
            .expect("readable log");
        if chunk.spans.is_empty() {
            break;
        }
        tick_read += chunk.next_offset - offset;
        if tick_read > LIMITS.max_read_bytes {
            shapes = ShapeMemory::default();
            tick_read = chunk.next_offset - offset;
        }
        offset = chunk.next_offset;
        identity = chunk.identity.clone();
        let read = open.rejoin(&chunk);
        let mut digester = Digester::new(
            |line: &str| catalog.is_notable(line),
            now,
            last_time,
            last_iteration,
        )
        .resume(std::mem::take(&mut open));
        let scan = Instant::now();
        let candidates = catalog.line_marks_remembering(&read, &mut shapes);
        *SCAN_SECONDS.lock().unwrap_or_else(|e| e.into_inner()) += scan.elapsed().as_secs_f64();
        digester.push_chunk(&read, &candidates);
        drop(read);
        let (digest, left) = digester.finish_keeping();
        open = left;
        last_time = digest.last_time;
        last_iteration = digest.last_iteration;
        lines += digest.lines;
        evidence += digest.evidence.len();
        for (time, iteration, tflops, rank) in digest.samples {
            let sample = ThroughputSample {
                workflow_id: 1,
                attempt_index: 0,
                time,
                iteration,
                tflops_per_gpu: tflops,
                rank,
                node: None,
            };
            if head.len() < config.throughput_warmup_samples + config.throughput_baseline_samples {
                head.push(sample.clone());
            }
            tail.push(sample);
            if tail.len() > config.throughput_drop_samples {
                tail.remove(0);
            }
        }
        findings += usize::from(throughput_drop(&head, &tail, config).is_some());
        for report in &digest.straggler_reports {
            findings += usize::from(straggler.observe(report, nodes, 8, config).is_some());
        }
        spare = chunk;
    }
    (lines, evidence, head.len() + tail.len(), findings)
}

fn target_dir() -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    std::fs::create_dir_all(&dir).expect("target dir");
    dir
}

/// Writes a realistic 256-rank Megatron unified log of about `size` bytes, unless one is there; with
/// `ids`, every line ends with its own 16-digit hex id.
fn ensure_log(path: &Path, size: u64, ids: bool) -> u64 {
    if let Ok(meta) = std::fs::metadata(path)
        && meta.len() >= size
    {
        return meta.len();
    }
    let mut out = BufWriter::with_capacity(1 << 20, File::create(path).expect("create log"));
    let mut written = 0u64;
    let mut time = chrono::DateTime::parse_from_rfc3339("2026-01-05T08:00:00Z")
        .expect("constant")
        .with_timezone(&Utc);
    let mut iteration = 0u64;
    let mut n = 0u64;
    while written < size {
        n += 1;
        let rank = (n * 7919) % 256;
        let stamp = time.format("%Y-%m-%d %H:%M:%S");
        let line = match n % 40 {
            0 => {
                iteration += 1;
                time += TimeDelta::seconds(3);
                format!(
                    "255: [{stamp}] iteration {iteration:>8}/ 1000000 | consumed samples: {:>12} | elapsed time per iteration (ms): {:.1} | throughput per GPU (TFLOP/s/GPU): {:.1} | learning rate: 2.999E-04 | global batch size:  1024 | lm loss: {:.6E} | loss scale: 1.0 | grad norm: 0.812 | number of skipped iterations:   0 | number of nan iterations:   0 |",
                    iteration * 1024,
                    3000.0 + (n % 17) as f64,
                    400.0 + (n % 13) as f64,
                    2.0 + (n % 100) as f64 / 1000.0
                )
            }
            1 if iteration.is_multiple_of(500) => format!(
                "  0: [{stamp}] successfully saved checkpoint from iteration {iteration:>7} to /lustre/ckpt/llama"
            ),
            2 => format!(
                "{rank:>3}: node-{:02}:{}:{} [{}] NCCL INFO Channel {:02}/0 : {rank}[{}] -> {}[{}] via P2P/CUMEM/read",
                rank / 8 + 1,
                40000 + rank,
                40100 + rank,
                rank % 8,
                n % 32,
                rank % 8,
                (rank + 1) % 256,
                (rank + 1) % 8
            ),
            3 => format!(
                "{rank:>3}: [{stamp}] [INFO] dataloader: prefetched batch {n} in 12.{}ms",
                n % 10
            ),
            4 => format!(
                "{rank:>3}: /usr/local/lib/python3.10/dist-packages/torch/distributed/c10d_logger.py:79: UserWarning: barrier() is deprecated"
            ),
            5 if n % 4000 == 5 => format!(
                "{rank:>3}: node-{:02}:{}:{} [{}] NCCL WARN NET/IB : Got completion from peer 10.0.0.{} with status=12 opcode=0 len=0 vendor err 129 (Recv)",
                rank / 8 + 1,
                40000 + rank,
                40100 + rank,
                rank % 8,
                n % 250
            ),
            6 if n % 8000 == 6 => format!(
                " 31: [{stamp}] | MnRtt/Rnk: 3012.40ms/3 | MxRtt/Rnk: {:.2}ms/{} | MnPwr/Rnk: 598000mW/20 | MxTmp/Rnk: 86C/20 |",
                3100.0 + (n % 50) as f64,
                n % 256
            ),
            _ => format!(
                "{rank:>3}: [{stamp}] [Rank {rank}] step {iteration} micro-batch {} forward {:.3}s backward {:.3}s optimizer {:.3}s",
                n % 16,
                0.101 + (n % 7) as f64 / 1000.0,
                0.202 + (n % 5) as f64 / 1000.0,
                0.011
            ),
        };
        out.write_all(line.as_bytes()).expect("write log");
        written += line.len() as u64 + 1;
        if ids {
            // splitmix64 of the line number: every id differs, and its letters fall anywhere.
            let mut id = n.wrapping_add(0x9e37_79b9_7f4a_7c15);
            id = (id ^ (id >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            id = (id ^ (id >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            id ^= id >> 31;
            write!(out, " trace={id:016x}").expect("write log");
            written += 23;
        }
        out.write_all(b"\n").expect("write log");
    }
    out.flush().expect("flush log");
    written
}

/// Seconds, wall and CPU, of `rg -c` over the file with every catalog pattern, on `threads` (rg's own
/// choice when None); None without rg.
fn ripgrep_reference(path: &Path, catalog: &Catalog, threads: Option<usize>) -> Option<(f64, f64)> {
    let mut command = Command::new("rg");
    command.args(["-c", "--no-mmap"]);
    if let Some(threads) = threads {
        command.arg(format!("-j{threads}"));
    }
    // rg joins the patterns into one regex, where capture names must not repeat.
    let named = regex::Regex::new(r"\(\?P?<[A-Za-z_][A-Za-z0-9_]*>").expect("constant pattern");
    for signature in catalog.signatures() {
        for pattern in &signature.spec.patterns {
            command
                .arg("-e")
                .arg(named.replace_all(pattern, "(?:").as_ref());
        }
    }
    command.arg(path);
    let (start, cpu) = (Instant::now(), children_cpu_seconds());
    let output = command.output().ok()?;
    let (seconds, cpu) = (start.elapsed().as_secs_f64(), children_cpu_seconds() - cpu);
    output.status.code().filter(|code| *code <= 1)?;
    Some((seconds, cpu))
}

/// CPU seconds the process has used, all threads (user and system; /proc counts in 1/100 s).
fn cpu_seconds() -> f64 {
    stat_seconds(11, 12)
}

/// CPU seconds of the child processes waited for (rg).
fn children_cpu_seconds() -> f64 {
    stat_seconds(13, 14)
}

/// The sum of two tick counts of /proc/self/stat, counted after the command name, in seconds.
fn stat_seconds(first: usize, second: usize) -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(Vec::new(), |(_, rest)| rest.split_whitespace().collect());
    let ticks = |index: usize| {
        fields
            .get(index)
            .and_then(|field| field.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime are the 14th and 15th fields (the 12th and 13th after the name), cutime and
    // cstime the 16th and 17th.
    (ticks(first) + ticks(second)) / 100.0
}

/// Resets the process's peak resident memory, so each part reports its own.
fn reset_peak_memory() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

fn peak_memory() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find(|line| line.starts_with("VmHWM:"))
        .map(|line| line.trim_start_matches("VmHWM:").trim().to_string())
}
