//! What a running attempt writes: Megatron's start-up, then one progress line per logged iteration with
//! its learning rate and throughput.

use rand::Rng;

use super::faults::Attempt;
use super::files::Output;
use super::scenario::{AttemptFilter, FaultKind, WorkloadSpec};
use super::state::{Draw, Run, rng};
use super::text::{self, IterationLine};

/// Scripts Megatron's start-up; returns when training starts.
pub(super) fn startup(ctx: &Attempt, run: &mut Run, ckpt: &str, start_ms: i64) -> i64 {
    let mut draw = rng(
        ctx.seed,
        Draw::Startup,
        &[ctx.job_id, u64::from(ctx.restart)],
    );
    let nodes = ctx.alloc.len() as u32;
    let world = ctx.world();
    let mut t = start_ms;
    run.log_at(
        t,
        text::ranked(0, &text::world_banner(world, nodes, ctx.gpus_per_node)),
    );
    run.log_at(t, text::ranked(0, "> initializing torch distributed ..."));
    t += draw.random_range(1_500..3_500);
    if let Some(head) = ctx.process(0, 0) {
        let number = ctx.node_number(0);
        run.log_at(t, text::ranked(0, &head.nccl_bootstrap(number)));
        run.log_at(t, text::ranked(0, &head.nccl_version()));
    }
    t += draw.random_range(2_000..5_000);
    for node_index in 0..ctx.alloc.len() {
        if let Some(process) = ctx.process(node_index, 0) {
            let comm = draw.random_range(0x5500_0000_u64..0x56ff_ffff);
            let line = process.nccl_init_complete(ctx.rank(node_index, 0), world, comm);
            run.log_at(t, text::ranked(ctx.rank(node_index, 0), &line));
        }
    }
    t += 1_000;
    run.log_at(
        t,
        text::ranked(
            0,
            &format!(
                "> initialized tensor model parallel with size {}",
                ctx.gpus_per_node
            ),
        ),
    );
    run.log_at(t, text::ranked(0, "> setting random seeds to 1234 ..."));
    t += draw.random_range(2_000..4_000);
    run.log_at(
        t,
        text::ranked(
            0,
            &text::datetime_marker("after megatron is initialized", t),
        ),
    );
    run.log_at(t, text::ranked(0, "building GPT model ..."));
    t += draw.random_range(3_000..6_000);
    run.log_at(
        t,
        text::ranked(
            0,
            "> number of parameters on (tensor, pipeline) model parallel rank (0, 0): 1003782144",
        ),
    );
    t += 2_000;
    if run.resumed_from > 0 {
        run.log_at(
            t,
            text::ranked(0, &text::loading_checkpoint(ckpt, run.resumed_from)),
        );
        t += draw.random_range(8_000..14_000);
        run.log_at(
            t,
            text::ranked(0, &text::loaded_checkpoint(ckpt, run.resumed_from)),
        );
    } else {
        for line in text::no_checkpoint(ckpt) {
            run.log_at(t, text::ranked(0, &line));
        }
    }
    t += draw.random_range(2_000..4_000);
    run.log_at(
        t,
        text::ranked(
            0,
            &text::datetime_marker(
                "after model, optimizer, and learning rate scheduler are built",
                t,
            ),
        ),
    );
    run.log_at(
        t,
        text::ranked(0, "> building train, validation, and test datasets ..."),
    );
    t += draw.random_range(6_000..12_000);
    run.log_at(
        t,
        text::ranked(0, &text::datetime_marker("after dataloaders are built", t)),
    );
    run.log_at(t, text::ranked(0, "done with setup ..."));
    run.log_at(t, text::ranked(0, "training ..."));
    run.log_at(
        t,
        text::ranked(
            0,
            &text::datetime_marker("before the start of training step", t),
        ),
    );
    t
}

/// The silent first compile a workload declares, in ms.
pub(super) fn compile_ms(spec: &WorkloadSpec) -> i64 {
    i64::try_from(spec.compile_s.min(86_400) * 1000).unwrap_or(0)
}

/// How long iteration `iteration` takes on this attempt, in ms.
pub(super) fn iteration_duration(
    ctx: &Attempt,
    spec: &WorkloadSpec,
    iteration: u64,
    slowdown: f64,
) -> f64 {
    let mut draw = rng(
        ctx.seed,
        Draw::IterationTime,
        &[ctx.job_id, u64::from(ctx.restart), iteration],
    );
    spec.seconds_per_iteration * 1000.0 * (1.0 + draw.random_range(-0.008..0.008)) * slowdown
}

/// Writes Megatron's iteration line for the window that just closed (and the straggler report).
pub(super) fn log_iteration(
    ctx: &Attempt,
    spec: &WorkloadSpec,
    run: &mut Run,
    workload: usize,
    at_ms: i64,
    out: &mut Output,
) {
    let iteration = run.iteration;
    let average_ms = run.window_ms / run.window_iterations.max(1) as f64;
    let base_ms = spec.seconds_per_iteration * 1000.0;
    let mut draw = rng(ctx.seed, Draw::Loss, &[workload as u64, iteration]);
    let progress = iteration as f64;
    let loss = 1.85
        + 7.9 * (-progress / 45.0).exp()
        + 0.6 * (-progress / 400.0).exp()
        + draw.random_range(-0.015..0.015);
    let grad_norm = 0.35 + 2.8 * (-progress / 70.0).exp() + draw.random_range(-0.02..0.02);
    let tflops =
        spec.tflops_per_gpu * (base_ms / average_ms) * (1.0 + draw.random_range(-0.003..0.003));
    let line = IterationLine {
        ms: at_ms,
        iteration,
        total: spec.iterations,
        global_batch_size: spec.global_batch_size,
        elapsed_ms: average_ms,
        tflops,
        learning_rate: learning_rate(iteration, spec.iterations),
        loss,
        grad_norm,
    };
    out.append(&run.log, &text::ranked(ctx.last_rank(), &line.text()));
    let reports_stragglers = spec.faults.iter().any(|fault| {
        fault.kind == FaultKind::Straggler && fault.attempts != AttemptFilter::Retries
    });
    if reports_stragglers {
        let fastest = (base_ms * (1.0 - draw.random_range(0.001..0.004)), 0);
        let slowest = match run.slow_rank {
            Some(rank) => (average_ms, rank),
            None => (
                base_ms * (1.0 + draw.random_range(0.001..0.006)),
                draw.random_range(1..ctx.world().max(2)),
            ),
        };
        out.append(
            &run.log,
            &text::ranked(0, &text::straggler_report(at_ms, fastest, slowest)),
        );
    }
    run.window_ms = 0.0;
    run.window_iterations = 0;
}

/// Linear warm-up over the first 2% of the run, then cosine decay to a tenth.
pub(super) fn learning_rate(iteration: u64, total: u64) -> f64 {
    const PEAK: f64 = 3.0e-4;
    const FLOOR: f64 = 3.0e-5;
    let warmup = (total / 50).max(1);
    if iteration < warmup {
        return PEAK * iteration as f64 / warmup as f64;
    }
    let span = total.saturating_sub(warmup).max(1) as f64;
    let done = (iteration - warmup) as f64 / span;
    FLOOR + 0.5 * (PEAK - FLOOR) * (1.0 + (std::f64::consts::PI * done.min(1.0)).cos())
}
