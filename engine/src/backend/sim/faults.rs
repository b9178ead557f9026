//! How each fault plays out in the logs of the attempt it strikes (and in the kernel log of its node).

use rand::Rng;

use super::cluster::{kernel_log, number_of};
use super::scenario::FaultKind;
use super::state::{ArmedFault, Draw, Ending, Run, rng};
use super::text::{self, Process};

/// The attempt a fault strikes: who runs where.
pub(super) struct Attempt<'a> {
    pub seed: u64,
    pub job_id: u64,
    pub restart: u32,
    pub alloc: &'a [String],
    pub gpus_per_node: u32,
    pub collective_timeout_s: u64,
}

impl<'a> Attempt<'a> {
    /// Ranks in the job: one per GPU.
    pub fn world(&self) -> u32 {
        self.alloc.len() as u32 * self.gpus_per_node
    }

    /// The rank Megatron prints iteration lines from.
    pub fn last_rank(&self) -> u32 {
        self.world().saturating_sub(1)
    }

    /// The global rank of local GPU `gpu` on the `node_index`-th node of the allocation.
    pub fn rank(&self, node_index: usize, gpu: u32) -> u32 {
        node_index as u32 * self.gpus_per_node + gpu
    }

    pub fn node_number(&self, node_index: usize) -> u32 {
        self.alloc
            .get(node_index)
            .map_or(node_index as u32 + 1, |name| number_of(name, node_index))
    }

    /// The process of local GPU `gpu` on the `node_index`-th node (pids are seeded per node and attempt).
    pub fn process(&self, node_index: usize, gpu: u32) -> Option<Process<'a>> {
        let host = self.alloc.get(node_index)?;
        let base = rng(
            self.seed,
            Draw::Process,
            &[self.job_id, u64::from(self.restart), node_index as u64],
        )
        .random_range(20_000..60_000);
        Some(Process {
            host,
            pid: base + gpu,
            gpu,
        })
    }
}

/// Acts out `fault` from `at_ms` on: training stops and the failure's lines and ending are scripted.
/// Returns when its first line is written (the earliest moment a reader of the logs can know).
pub(super) fn strike(ctx: &Attempt, run: &mut Run, fault: &ArmedFault, at_ms: i64) -> Option<i64> {
    run.next_iteration_ms = None;
    run.faults.clear();
    let mut draw = rng(
        ctx.seed,
        Draw::Failure,
        &[ctx.job_id, u64::from(ctx.restart), fault.iteration],
    );
    let node = ctx.alloc.get(fault.node_index).cloned()?;
    let (shown_at, failed_at) = match fault.kind {
        FaultKind::NcclTimeout => nccl_timeout(ctx, run, fault, &node, at_ms, &mut draw),
        FaultKind::Xid79 | FaultKind::Xid48 => xid(ctx, run, fault, &node, at_ms, &mut draw),
        FaultKind::CudaOom => cuda_oom(ctx, run, fault, &node, at_ms, &mut draw),
        FaultKind::AppBug => app_bug(ctx, run, at_ms, &mut draw),
        // A hang writes nothing and never ends; a straggler is not fatal.
        FaultKind::Hang | FaultKind::Straggler => return None,
    };
    run.end = Some(Ending {
        at_ms: failed_at.max(run.last_scripted_ms().unwrap_or(failed_at)) + 1_000,
        completed: false,
        exit_code: 1,
    });
    Some(shown_at)
}

/// The culprit node's InfiniBand link fails: its ranks warn, then every rank's watchdog times out.
fn nccl_timeout(
    ctx: &Attempt,
    run: &mut Run,
    fault: &ArmedFault,
    node: &str,
    at_ms: i64,
    draw: &mut impl Rng,
) -> (i64, i64) {
    let warn_ms = at_ms + draw.random_range(1_500..4_000);
    let own = ctx.node_number(fault.node_index);
    let peer_index = (fault.node_index + 1) % ctx.alloc.len().max(1);
    let peer = ctx.node_number(peer_index);
    let mut gpus = vec![fault.gpu];
    if ctx.gpus_per_node > 1 {
        gpus.push((fault.gpu + 1) % ctx.gpus_per_node);
    }
    for gpu in gpus {
        if let Some(process) = ctx.process(fault.node_index, gpu) {
            let rank = ctx.rank(fault.node_index, gpu);
            let port = draw.random_range(40_000..60_000);
            run.log_at(
                warn_ms,
                text::ranked(rank, &process.nccl_ib_completion_error(own, peer, port)),
            );
            run.log_at(
                warn_ms,
                text::ranked(rank, &process.nccl_transport_unwind()),
            );
        }
    }
    let timeout_ms = ctx.collective_timeout_s.saturating_mul(1000);
    let fired_ms = at_ms + 500 + i64::try_from(timeout_ms).unwrap_or(i64::MAX / 4);
    let seq = fault.iteration * 24 + 7;
    for rank in 0..ctx.world() {
        let ran_ms = timeout_ms + draw.random_range(20..90);
        for line in text::watchdog_timeout(fired_ms, rank, seq, timeout_ms, ran_ms) {
            run.log_at(fired_ms, text::ranked(rank, &line));
        }
    }
    let exited_ms = fired_ms + draw.random_range(2_000..5_000);
    let first = ctx.rank(fault.node_index, 0);
    let last = ctx.rank(fault.node_index, ctx.gpus_per_node.saturating_sub(1));
    tasks_exited(run, exited_ms, node, first, last, 1);
    (warn_ms, exited_ms)
}

/// A GPU fails (off the bus, Xid 79; an uncorrectable ECC error, Xid 48): the Xid in the kernel log, a
/// CUDA error on its rank, the step is aborted.
fn xid(
    ctx: &Attempt,
    run: &mut Run,
    fault: &ArmedFault,
    node: &str,
    at_ms: i64,
    draw: &mut impl Rng,
) -> (i64, i64) {
    let xid_ms = at_ms + draw.random_range(200..1_500);
    let pid = ctx
        .process(fault.node_index, fault.gpu)
        .map_or(0, |p| p.pid);
    let kern = kernel_log(node);
    let messages = match fault.kind {
        FaultKind::Xid48 => text::xid48(fault.gpu, pid).to_vec(),
        _ => text::xid79(fault.gpu, pid).to_vec(),
    };
    for message in messages {
        run.schedule(xid_ms, &kern, text::kernel(xid_ms, node, &message), None);
    }
    let error_ms = xid_ms + draw.random_range(1_500..4_000);
    let rank = ctx.rank(fault.node_index, fault.gpu);
    for line in text::cuda_failure_traceback() {
        run.log_at(error_ms, text::ranked(rank, &line));
    }
    let watchdog_ms = error_ms + draw.random_range(500..2_000);
    for gpu in (0..ctx.gpus_per_node).filter(|gpu| *gpu != fault.gpu) {
        let other = ctx.rank(fault.node_index, gpu);
        run.log_at(
            watchdog_ms,
            text::ranked(other, &text::cuda_failure_watchdog(watchdog_ms, other)),
        );
    }
    let exited_ms = watchdog_ms + draw.random_range(1_000..3_000);
    tasks_exited(run, exited_ms, node, rank, rank, 1);
    (xid_ms, exited_ms)
}

/// One rank runs out of GPU memory in the forward pass.
fn cuda_oom(
    ctx: &Attempt,
    run: &mut Run,
    fault: &ArmedFault,
    node: &str,
    at_ms: i64,
    draw: &mut impl Rng,
) -> (i64, i64) {
    let error_ms = at_ms + draw.random_range(1_000..3_000);
    let rank = ctx.rank(fault.node_index, fault.gpu);
    for line in text::oom_traceback(fault.gpu) {
        run.log_at(error_ms, text::ranked(rank, &line));
    }
    let exited_ms = error_ms + draw.random_range(2_000..5_000);
    tasks_exited(run, exited_ms, node, rank, rank, 1);
    (error_ms, exited_ms)
}

/// The training script itself raises on rank 0.
fn app_bug(ctx: &Attempt, run: &mut Run, at_ms: i64, draw: &mut impl Rng) -> (i64, i64) {
    let error_ms = at_ms + draw.random_range(500..1_500);
    for line in text::app_bug_traceback() {
        run.log_at(error_ms, text::ranked(0, &line));
    }
    let exited_ms = error_ms + draw.random_range(2_000..4_000);
    let head = ctx.alloc.first().map_or("node-01", String::as_str);
    tasks_exited(run, exited_ms, head, 0, 0, 1);
    (error_ms, exited_ms)
}

/// srun reports the tasks of a node that exited, then aborts the step.
fn tasks_exited(run: &mut Run, at_ms: i64, node: &str, first: u32, last: u32, code: i32) {
    run.log_at(
        at_ms,
        text::plain(&text::srun_tasks_exited(node, first, last, code)),
    );
    run.log_at(at_ms, text::plain(text::SRUN_STEP_ABORTED));
}
