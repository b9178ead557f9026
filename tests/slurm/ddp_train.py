#!/usr/bin/env python3
"""A small real PyTorch DDP training run for the Slurm lab: gloo on CPU, one process per Slurm task.

Run under `srun -l` (see ddp.sbatch): the rank, the world size and the rendezvous come from Slurm's
variables. It logs Megatron-style iteration lines (the format of tests/slurm/train.sh), saves a
checkpoint with torch.save every CKPT_EVERY iterations, resumes from the newest one, and completes at
ITERS. SIGUSR1 makes it save a checkpoint at the end of the current iteration.

Environment:
  CKPT_DIR        checkpoint directory (required; iter_NNNNNNN.pt files)
  ITERS=40  CKPT_EVERY=10  STEP_SECS=0.5   target iteration, checkpoint interval, pace per iteration
  DDP_TIMEOUT=30  seconds a collective of the training group waits before PyTorch gives up (the
                  rendezvous waits at least 120 s)
  MASTER_ADDR / MASTER_PORT   override the rendezvous derived from Slurm's variables
  DDP_FAULT=none|kill|stop|error|cpu_oom   what goes wrong
  DDP_FAULT_AT=15        at which iteration
  DDP_FAULT_RANK=N       which rank (default: the last one, on the last node)
  DDP_FAULT_ON=first|once|always   first: only while SLURM_RESTART_COUNT is 0 (the first run of the
                         job); once: only until the mark it leaves in CKPT_DIR exists (survives a
                         resubmission as a new job); always: on every run
  DDP_REQUEUE_ON_USR1=1  after the save SIGUSR1 asked for, rank 0 requeues the job itself with
                         `scontrol requeue`, as PyTorch Lightning's SLURMEnvironment does
"""

import datetime
import os
import re
import signal
import subprocess
import sys
import time
import zlib

os.environ.setdefault("OMP_NUM_THREADS", "1")
# PyTorch 2.4+ starts the env:// rendezvous store on libuv by default; Debian's torch 2.6 (trixie) is
# built without it ("use_libuv was requested but PyTorch was build without libuv support").
os.environ.setdefault("USE_LIBUV", "0")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402


def env_int(name, default):
    value = os.environ.get(name, "")
    return int(value) if value.strip() else default


def first_host(nodelist):
    """The first host name of a Slurm host list: `n[1-2]`, `n[3,5-6],m1`, `gpu01`."""
    match = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist)
    if not match:
        return nodelist
    prefix, ranges = match.group(1), match.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def node_address(node):
    """The address Slurm knows for `node` (its NodeAddr), else what the resolver says."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "node", "-o", node],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
        for field in out.split():
            if field.startswith("NodeAddr="):
                return field.split("=", 1)[1]
    except (OSError, subprocess.SubprocessError):
        pass
    import socket

    return socket.gethostbyname(node)


def stamp():
    return datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S")


def checkpoints(directory):
    found = []
    for name in os.listdir(directory):
        match = re.fullmatch(r"iter_(\d{7})\.pt", name)
        if match:
            found.append((int(match.group(1)), os.path.join(directory, name)))
    return sorted(found)


class Run:
    def __init__(self):
        self.rank = env_int("SLURM_PROCID", 0)
        self.world = env_int("SLURM_NTASKS", 1)
        self.node = os.environ.get("SLURMD_NODENAME", "localhost")
        self.job_id = env_int("SLURM_JOB_ID", 0)
        self.restarts = env_int("SLURM_RESTART_COUNT", 0)
        self.iters = env_int("ITERS", 40)
        self.every = env_int("CKPT_EVERY", 10)
        self.step_secs = float(os.environ.get("STEP_SECS", "0.5"))
        self.timeout = env_int("DDP_TIMEOUT", 30)
        self.ckpt_dir = os.environ.get("CKPT_DIR", "")
        if not self.ckpt_dir:
            sys.exit("CKPT_DIR must name the checkpoint directory")
        self.fault = os.environ.get("DDP_FAULT", "none")
        self.fault_at = env_int("DDP_FAULT_AT", 15)
        self.fault_rank = env_int("DDP_FAULT_RANK", self.world - 1)
        self.fault_on = os.environ.get("DDP_FAULT_ON", "first")
        self.save_now = False
        self.last = self.rank == self.world - 1
        self.group = None

    def say(self, text):
        print(text, flush=True)

    def rendezvous(self):
        if "MASTER_ADDR" not in os.environ:
            nodelist = os.environ.get("SLURM_JOB_NODELIST", self.node)
            os.environ["MASTER_ADDR"] = node_address(first_host(nodelist))
        if "MASTER_PORT" not in os.environ:
            # One port per job and run: a requeued job keeps its id, and a process of its earlier
            # run that never ended (a frozen node) may still hold the previous port. The checkpoint
            # directory sets it apart from another lab cluster's job of the same id on this machine.
            # Below the kernel's ephemeral range (where any client's connection may hold a port) and
            # below the lab clusters' own ports (20000 and up, tests/slurm/cluster.sh).
            lab = zlib.crc32(self.ckpt_dir.encode()) % 1000
            port = 12000 + ((lab + self.job_id) % 1000) * 8 + self.restarts % 8
            os.environ["MASTER_PORT"] = str(port)
        # Starting four interpreters with torch on a loaded 2-core machine can take longer than the
        # collectives' timeout: the rendezvous waits longer, the training group fails fast.
        dist.init_process_group(
            backend="gloo",
            init_method="env://",
            rank=self.rank,
            world_size=self.world,
            timeout=datetime.timedelta(seconds=max(self.timeout, 120)),
        )
        self.group = dist.new_group(
            backend="gloo", timeout=datetime.timedelta(seconds=self.timeout)
        )
        if self.rank == 0:
            self.say(
                f"> initialized torch.distributed (gloo) with {self.world} ranks, "
                f"master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}, "
                f"torch {torch.__version__}, restart {self.restarts}"
            )

    def fault_fires(self):
        if self.fault == "none" or self.rank != self.fault_rank:
            return False
        if self.fault_on == "always":
            return True
        if self.fault_on == "once":
            return not os.path.exists(os.path.join(self.ckpt_dir, ".ddp_failed_once"))
        return self.restarts == 0

    def inject(self):
        if self.fault_on == "once":
            open(os.path.join(self.ckpt_dir, ".ddp_failed_once"), "w").close()
        if self.fault == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif self.fault == "stop":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif self.fault == "error":
            # A real shape mismatch, raised by torch.
            torch.zeros(8, 16) @ torch.zeros(8, 16)
        elif self.fault == "cpu_oom":
            # A real allocation failure: far more than any machine has.
            torch.empty(1 << 50, dtype=torch.uint8)
        else:
            raise SystemExit(f"unknown DDP_FAULT {self.fault}")

    def save(self, model, optimizer, iteration, why=""):
        # The iteration's line is out before the save starts, as in Megatron's log.
        dist.barrier(group=self.group)
        if self.rank == 0:
            self.say(f"saving checkpoint at iteration {iteration} to {self.ckpt_dir}{why}")
            path = os.path.join(self.ckpt_dir, f"iter_{iteration:07d}.pt")
            partial = path + ".partial"
            torch.save(
                {
                    "iteration": iteration,
                    "model": model.module.state_dict(),
                    "optimizer": optimizer.state_dict(),
                },
                partial,
            )
            os.replace(partial, path)
            self.say(
                f"  successfully saved checkpoint from iteration {iteration} to {self.ckpt_dir} "
                f"[ t 0/1, p 0/1 ]"
            )
        dist.barrier(group=self.group)

    def main(self):
        torch.set_num_threads(env_int("OMP_NUM_THREADS", 1))
        signal.signal(signal.SIGUSR1, self.on_usr1)
        self.rendezvous()
        torch.manual_seed(1234)
        model = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 1))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        start = 0
        found = checkpoints(self.ckpt_dir)
        if found:
            start, path = found[-1]
            if self.rank == 0:
                self.say(f" loading checkpoint from {self.ckpt_dir} at iteration {start}")
            state = torch.load(path, map_location="cpu")
            model.load_state_dict(state["model"])
            optimizer.load_state_dict(state["optimizer"])
            if self.rank == 0:
                self.say(
                    f"  successfully loaded checkpoint from {self.ckpt_dir} [ t 0/1, p 0/1 ] "
                    f"at iteration {start}"
                )
        ddp = DistributedDataParallel(model, process_group=self.group)
        batch = 64
        params = sum(p.numel() for p in model.parameters())
        generator = torch.Generator().manual_seed(self.rank)
        firing = self.fault_fires()
        for iteration in range(start + 1, self.iters + 1):
            if firing and iteration == self.fault_at:
                self.inject()
            began = time.monotonic()
            x = torch.randn(batch, 32, generator=generator)
            y = x[:, :1] * 0.5 - x[:, 1:2]
            loss = nn.functional.mse_loss(ddp(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            norm = torch.sqrt(sum((p.grad.detach() ** 2).sum() for p in model.parameters()))
            # Every rank agrees on the loss shown and on a save asked for by SIGUSR1 on any rank.
            shared = torch.tensor([loss.item(), 1.0 if self.save_now else 0.0])
            dist.all_reduce(shared, group=self.group)
            work = time.monotonic() - began
            time.sleep(max(0.0, self.step_secs - work))
            elapsed = time.monotonic() - began
            if self.last:
                tflops = 6 * params * batch / work / 1e12
                self.say(
                    f" [{stamp()}] iteration {iteration:8d}/{self.iters:8d} | consumed samples: "
                    f"{iteration * batch * self.world:12d} | elapsed time per iteration (ms): "
                    f"{elapsed * 1000:.1f} | throughput per GPU (TFLOP/s/GPU): {tflops:.6f} | "
                    f"learning rate: 5.000000E-02 | lm loss: {shared[0].item() / self.world:.6E} | "
                    f"loss scale: 1.0 | grad norm: {norm.item():.3f} | number of skipped "
                    f"iterations:   0 | number of nan iterations:   0 |"
                )
            if shared[1].item() > 0:
                self.save_now = False
                self.save(ddp, optimizer, iteration, " (SIGUSR1)")
                if os.environ.get("DDP_REQUEUE_ON_USR1") == "1":
                    self.requeue_self()
            elif iteration % self.every == 0:
                self.save(ddp, optimizer, iteration)
        if self.rank == 0:
            self.say(f"training complete at iteration {self.iters}")
        dist.destroy_process_group()

    def requeue_self(self):
        """Lightning's way: rank 0 asks Slurm to requeue the job; every rank waits to be ended."""
        if self.rank == 0:
            command = ["scontrol", "requeue", str(self.job_id)]
            result = subprocess.run(command, capture_output=True, text=True)
            self.say(f"requeued the job itself: {' '.join(command)} -> {result.returncode}")
        while True:
            time.sleep(1)

    def on_usr1(self, signum, frame):
        self.save_now = True
        # os.write: print() may be in the middle of a line of the main code.
        os.write(1, f"[rank {self.rank}] SIGUSR1: saving a checkpoint at the end of this iteration\n".encode())


if __name__ == "__main__":
    Run().main()
