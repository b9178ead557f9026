//! The text of simulated log lines, in the real formats of Megatron-LM, PyTorch, NCCL, Slurm and the
//! Linux kernel, so the engine's production parsers read them as they would read a real run.

use chrono::{DateTime, Utc};

/// Bus ids of the eight GPUs of an HGX board, by local GPU index.
const GPU_BUS: [&str; 8] = ["18", "2a", "3a", "5d", "9a", "ab", "ba", "db"];

/// Megatron's installation in the simulated container.
const MEGATRON: &str = "/workspace/Megatron-LM";

fn at(ms: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(ms).unwrap_or(DateTime::UNIX_EPOCH)
}

/// `2026-01-05 08:14:02`, as Megatron stamps its lines.
pub(super) fn stamp(ms: i64) -> String {
    at(ms).format("%Y-%m-%d %H:%M:%S").to_string()
}

/// `2026-01-05T08:14:02`, as Slurm writes times.
pub(super) fn iso(ms: i64) -> String {
    at(ms).format("%Y-%m-%dT%H:%M:%S").to_string()
}

/// `Jan  5 08:14:02`, as syslog stamps kernel lines.
fn syslog(ms: i64) -> String {
    at(ms).format("%b %e %H:%M:%S").to_string()
}

/// `0105 08:14:02.903881913`, the time of a glog header (after its `E`).
fn glog(ms: i64, rank: u32) -> String {
    let nanos = ms.rem_euclid(1000) * 1_000_000 + i64::from(rank) * 7919 % 1_000_000;
    format!("{}.{nanos:09}", at(ms).format("%m%d %H:%M:%S"))
}

/// One line of `srun -l` output: the rank label, then what the rank printed.
pub(super) fn ranked(rank: u32, message: &str) -> String {
    format!("{rank:>3}: {message}\n")
}

/// A line srun itself prints (no rank label).
pub(super) fn plain(message: &str) -> String {
    format!("{message}\n")
}

/// A kernel line in `/var/log/kern.log`.
pub(super) fn kernel(ms: i64, node: &str, message: &str) -> String {
    format!("{} {node} kernel: {message}\n", syslog(ms))
}

/// Python's `%.NE`: `3.000E-04`, `2.345678E+00`.
pub(super) fn sci(value: f64, decimals: usize) -> String {
    let text = format!("{value:.decimals$E}");
    match text.split_once('E') {
        Some((mantissa, exponent)) => {
            let exponent: i32 = exponent.parse().unwrap_or(0);
            let sign = if exponent < 0 { '-' } else { '+' };
            format!("{mantissa}E{sign}{:02}", exponent.unsigned_abs())
        }
        None => text,
    }
}

/// The IPoIB address of node number `n`.
pub(super) fn node_ip(n: u32) -> String {
    format!("10.0.{}.{}", n / 250, n % 250)
}

/// Where one rank's process lives, for NCCL's `host:pid:tid [dev]` prefix.
pub(super) struct Process<'a> {
    pub host: &'a str,
    pub pid: u32,
    pub gpu: u32,
}

impl Process<'_> {
    fn nccl(&self, thread_offset: u32, level: &str, message: &str) -> String {
        format!(
            "{}:{}:{} [{}] NCCL {level} {message}",
            self.host,
            self.pid,
            self.pid + thread_offset,
            self.gpu
        )
    }

    pub fn nccl_bootstrap(&self, node_number: u32) -> String {
        self.nccl(
            0,
            "INFO",
            &format!("Bootstrap : Using ib0:{}<0>", node_ip(node_number)),
        )
    }

    pub fn nccl_version(&self) -> String {
        self.nccl(0, "INFO", "NCCL version 2.21.5+cuda12.4")
    }

    pub fn nccl_init_complete(&self, rank: u32, world: u32, comm: u64) -> String {
        self.nccl(
            0,
            "INFO",
            &format!(
                "comm 0x{comm:x} rank {rank} nranks {world} cudaDev {gpu} nvmlDev {gpu} busId {bus}000 commId 0x{:x} - Init COMPLETE",
                comm.rotate_left(17) & 0xff_ffff_ffff,
                gpu = self.gpu,
                bus = GPU_BUS[self.gpu as usize % GPU_BUS.len()],
            ),
        )
    }

    /// The InfiniBand completion error NCCL reports when a link or peer fails.
    pub fn nccl_ib_completion_error(&self, own: u32, peer: u32, port: u32) -> String {
        self.nccl(
            677,
            "WARN",
            &format!(
                "NET/IB : Got completion from peer {}<{port}> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid ::ffff:{} remoteGidsfe80::",
                node_ip(peer),
                node_ip(own),
            ),
        )
    }

    pub fn nccl_transport_unwind(&self) -> String {
        self.nccl(677, "INFO", "transport/net.cc:1298 -> 6")
    }
}

/// The torch watchdog's report of a timed-out collective, as `[rankN]:` prefixed glog lines.
pub(super) fn watchdog_timeout(
    ms: i64,
    rank: u32,
    seq: u64,
    timeout_ms: u64,
    ran_ms: u64,
) -> [String; 2] {
    let numel = 125_829_120;
    [
        format!(
            "[rank{rank}]:[E{} ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn={numel}, NumelOut={numel}, Timeout(ms)={timeout_ms}) ran for {ran_ms} milliseconds before timing out.",
            glog(ms, rank)
        ),
        format!(
            "[rank{rank}]:[E{} ProcessGroupNCCL.cpp:1785] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Exception (either an error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL work: {seq}, last completed NCCL work: {}.",
            glog(ms + 1, rank),
            seq.saturating_sub(1)
        ),
    ]
}

/// `srun: error: node-07: tasks 48-55: Exited with exit code 1` (or `task 52` for one task).
pub(super) fn srun_tasks_exited(node: &str, first: u32, last: u32, code: i32) -> String {
    if first == last {
        format!("srun: error: {node}: task {first}: Exited with exit code {code}")
    } else {
        format!("srun: error: {node}: tasks {first}-{last}: Exited with exit code {code}")
    }
}

pub(super) const SRUN_STEP_ABORTED: &str =
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.";

/// What slurmstepd writes into the output of a job it kills.
pub(super) fn step_cancelled(job_id: u64, node: &str, ms: i64, requeue: bool) -> String {
    let due = if requeue { " DUE TO JOB REQUEUE" } else { "" };
    format!(
        "slurmstepd: error: *** JOB {job_id} ON {node} CANCELLED AT {}{due} ***",
        iso(ms)
    )
}

/// Kernel messages of a node booting its GPU and network drivers.
pub(super) const KERNEL_BOOT: [&str; 3] = [
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.90.07  Fri May 31 09:35:42 UTC 2024",
    "nvidia-nvlink: Nvlink Core is being initialized, major device number 508",
    "mlx5_core 0000:0c:00.0: mlx5e: IPoIB: ib0: Link up",
];

/// The driver's lines for an uncorrectable double-bit error in the GPU's memory (Xid 48) and the row
/// remap it asks for (Xid 63).
pub(super) fn xid48(gpu: u32, pid: u32) -> [String; 2] {
    let bus = GPU_BUS[gpu as usize % GPU_BUS.len()];
    [
        format!(
            "NVRM: Xid (PCI:0000:{bus}:00): 48, pid={pid}, name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."
        ),
        format!(
            "NVRM: Xid (PCI:0000:{bus}:00): 63, pid={pid}, name=python, Row Remapper: New row marked for remapping, reset gpu to activate."
        ),
    ]
}

/// The kernel's report of a GPU that fell off the bus (Xid 79).
pub(super) fn xid79(gpu: u32, pid: u32) -> [String; 5] {
    let bus = GPU_BUS[gpu as usize % GPU_BUS.len()];
    [
        format!(
            "NVRM: Xid (PCI:0000:{bus}:00): 79, pid={pid}, name=python, GPU has fallen off the bus."
        ),
        format!("NVRM: GPU 0000:{bus}:00.0: GPU has fallen off the bus."),
        "NVRM: A GPU crash dump has been created. If possible, please run".to_string(),
        "NVRM: nvidia-bug-report.sh as root to collect this data before".to_string(),
        "NVRM: the NVIDIA kernel module is unloaded.".to_string(),
    ]
}

/// Megatron's start-up banner.
pub(super) fn world_banner(world: u32, nodes: u32, gpus_per_node: u32) -> String {
    format!(
        "using world size: {world}, data-parallel size: {nodes}, context-parallel size: 1, tensor-model-parallel size: {gpus_per_node}, pipeline-model-parallel size: 1"
    )
}

/// One of Megatron's `[after ...] datetime:` progress markers.
pub(super) fn datetime_marker(what: &str, ms: i64) -> String {
    format!("[{what}] datetime: {} ", stamp(ms))
}

pub(super) fn loading_checkpoint(dir: &str, iteration: u64) -> String {
    format!(" loading checkpoint from {dir} at iteration {iteration}")
}

pub(super) fn loaded_checkpoint(dir: &str, iteration: u64) -> String {
    format!(" successfully loaded checkpoint from {dir} [ t 1/1, p 1/1 ] at iteration {iteration}")
}

pub(super) fn no_checkpoint(dir: &str) -> [String; 2] {
    [
        format!(
            "WARNING: could not find the metadata file {dir}/latest_checkpointed_iteration.txt"
        ),
        "    will not load any checkpoints and will start from random".to_string(),
    ]
}

pub(super) fn saving_checkpoint(dir: &str, iteration: u64) -> String {
    format!(" saving checkpoint at iteration {iteration:7} to {dir}")
}

pub(super) fn saved_checkpoint(dir: &str, iteration: u64) -> String {
    format!(" successfully saved checkpoint from iteration {iteration:7} to {dir} [ t 1/1, p 1/1 ]")
}

/// Megatron's timer report after a save.
pub(super) fn save_timers(min_ms: f64, max_ms: f64) -> [String; 2] {
    [
        "(min, max) time across ranks (ms):".to_string(),
        format!("    save-checkpoint ................................: ({min_ms:.2}, {max_ms:.2})"),
    ]
}

/// The numbers of one Megatron iteration log line.
pub(super) struct IterationLine {
    pub ms: i64,
    pub iteration: u64,
    pub total: u64,
    pub global_batch_size: u64,
    pub elapsed_ms: f64,
    pub tflops: f64,
    pub learning_rate: f64,
    pub loss: f64,
    pub grad_norm: f64,
}

impl IterationLine {
    /// Megatron's `training_log` line, field for field.
    pub fn text(&self) -> String {
        format!(
            " [{}] iteration {:8}/{:8} | consumed samples: {:12} | elapsed time per iteration (ms): {:.1} | throughput per GPU (TFLOP/s/GPU): {:.1} | learning rate: {} | global batch size: {:5} | lm loss: {} | loss scale: 1.0 | grad norm: {:.3} | number of skipped iterations: {:3} | number of nan iterations: {:3} |",
            stamp(self.ms),
            self.iteration,
            self.total,
            self.iteration * self.global_batch_size,
            self.elapsed_ms,
            self.tflops,
            sci(self.learning_rate, 3),
            self.global_batch_size,
            sci(self.loss, 6),
            self.grad_norm,
            0,
            0,
        )
    }
}

/// Megatron's straggler detector summary (`--log-straggler`): fastest and slowest rank of the interval.
pub(super) fn straggler_report(ms: i64, fastest: (f64, u32), slowest: (f64, u32)) -> String {
    format!(
        " [{}] | MnRtt/Rnk: {:.2}ms/{} | MxRtt/Rnk: {:.2}ms/{} | MnPwr/Rnk: 598000mW/{} | MxPwr/Rnk: 699000mW/{} | MnTmp/Rnk: 55C/{} | MxTmp/Rnk: 86C/{} | MnUtl/Rnk: 71%/{} | MxUtl/Rnk: 100%/{} | MnClk/Rnk: 1275MHz/{} | MxClk/Rnk: 1980MHz/{} |",
        stamp(ms),
        fastest.0,
        fastest.1,
        slowest.0,
        slowest.1,
        slowest.1,
        fastest.1,
        fastest.1,
        slowest.1,
        slowest.1,
        fastest.1,
        slowest.1,
        fastest.1,
    )
}

/// The frames every failure inside a training step starts with.
fn train_step_frames() -> Vec<String> {
    vec![
        "Traceback (most recent call last):".to_string(),
        format!("  File \"{MEGATRON}/pretrain_gpt.py\", line 245, in <module>"),
        "    pretrain(".to_string(),
        format!("  File \"{MEGATRON}/megatron/training/training.py\", line 386, in pretrain"),
        "    iteration, num_floating_point_operations_so_far = train(".to_string(),
        format!("  File \"{MEGATRON}/megatron/training/training.py\", line 1421, in train"),
        "    train_step(forward_step_func,".to_string(),
        format!("  File \"{MEGATRON}/megatron/training/training.py\", line 754, in train_step"),
        "    losses_reduced = forward_backward_func(".to_string(),
        format!(
            "  File \"{MEGATRON}/megatron/core/pipeline_parallel/schedules.py\", line 452, in forward_backward_no_pipelining"
        ),
    ]
}

/// The traceback of a CUDA out-of-memory error in the attention of the forward pass.
pub(super) fn oom_traceback(gpu: u32) -> Vec<String> {
    let mut lines = train_step_frames();
    lines.extend([
        "    output_tensor, num_tokens = forward_step(".to_string(),
        format!("  File \"{MEGATRON}/megatron/core/pipeline_parallel/schedules.py\", line 274, in forward_step"),
        "    output_tensor, loss_func = forward_step_func(data_iterator, model)".to_string(),
        format!("  File \"{MEGATRON}/pretrain_gpt.py\", line 190, in forward_step"),
        "    output_tensor = model(tokens, position_ids, attention_mask,".to_string(),
        "  File \"/usr/local/lib/python3.10/dist-packages/torch/nn/modules/module.py\", line 1736, in _wrapped_call_impl".to_string(),
        "    return self._call_impl(*args, **kwargs)".to_string(),
        format!("  File \"{MEGATRON}/megatron/core/transformer/attention.py\", line 315, in forward"),
        "    core_attn_out = self.core_attention(".to_string(),
        format!("  File \"{MEGATRON}/megatron/core/transformer/dot_product_attention.py\", line 134, in forward"),
        "    attention_probs = self.scale_mask_softmax(attention_scores, attention_mask)".to_string(),
        format!(
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU {gpu} has a total capacity of 79.15 GiB of which 1.02 GiB is free. Including non-PyTorch memory, this process has 78.11 GiB memory in use. Of the allocated memory 74.52 GiB is allocated by PyTorch, and 1.87 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        ),
    ]);
    lines
}

/// The traceback of a rank whose GPU failed under it.
pub(super) fn cuda_failure_traceback() -> Vec<String> {
    let mut lines = train_step_frames();
    lines.extend([
        "    backward_step(input_tensor, output_tensor, output_tensor_grad, model_type, config)".to_string(),
        format!("  File \"{MEGATRON}/megatron/core/pipeline_parallel/schedules.py\", line 366, in backward_step"),
        "    torch.autograd.backward(output_tensor[0], grad_tensors=output_tensor_grad[0])".to_string(),
        "  File \"/usr/local/lib/python3.10/dist-packages/torch/autograd/__init__.py\", line 347, in backward".to_string(),
        "    _engine_run_backward(".to_string(),
        "  File \"/usr/local/lib/python3.10/dist-packages/torch/autograd/graph.py\", line 825, in _engine_run_backward".to_string(),
        "    return Variable._execution_engine.run_backward(  # Calls into the C++ engine to run the backward pass".to_string(),
        "RuntimeError: CUDA error: unspecified launch failure".to_string(),
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.".to_string(),
        "For debugging consider passing CUDA_LAUNCH_BLOCKING=1".to_string(),
        "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.".to_string(),
    ]);
    lines
}

/// The watchdog of a rank on the same node, once the failed GPU poisons its communicator.
pub(super) fn cuda_failure_watchdog(ms: i64, rank: u32) -> String {
    format!(
        "[rank{rank}]:[E{} ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank {rank}] Process group watchdog thread terminated with exception: CUDA error: unspecified launch failure",
        glog(ms, rank)
    )
}

/// A bug in the training script: a batch without the field the model needs.
pub(super) fn app_bug_traceback() -> Vec<String> {
    let mut lines = train_step_frames();
    lines.extend([
        "    output_tensor, num_tokens = forward_step(".to_string(),
        format!("  File \"{MEGATRON}/megatron/core/pipeline_parallel/schedules.py\", line 274, in forward_step"),
        "    output_tensor, loss_func = forward_step_func(data_iterator, model)".to_string(),
        format!("  File \"{MEGATRON}/pretrain_gpt.py\", line 181, in forward_step"),
        "    tokens, labels, loss_mask, attention_mask, position_ids = get_batch(".to_string(),
        format!("  File \"{MEGATRON}/pretrain_gpt.py\", line 112, in get_batch"),
        "    batch = get_batch_on_this_tp_rank(data_iterator)".to_string(),
        format!("  File \"{MEGATRON}/megatron/training/utils.py\", line 301, in get_batch_on_this_tp_rank"),
        "    'attention_mask': data[\"attention_mask\"].cuda(non_blocking = True),".to_string(),
        "KeyError: 'attention_mask'".to_string(),
    ]);
    lines
}
