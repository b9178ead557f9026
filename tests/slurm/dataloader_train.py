"""A small real PyTorch training loop, for the config-fix test: when it has more DataLoader workers
than WORKER_LIMIT (default 4), each worker dies of SIGKILL on its first sample, as under the kernel's
OOM killer when every worker copies the dataset, and PyTorch reports the worker killed in its own words.

    python3 dataloader_train.py [--num-workers N] [--steps S]

DATALOADER_NUM_WORKERS, when set, wins over --num-workers: it is the override runguard passes when it
submits the job again with fewer workers and cannot rewrite the argument.
"""

import argparse
import os
import signal

import torch
from torch.utils.data import DataLoader, Dataset

parser = argparse.ArgumentParser()
parser.add_argument("--num-workers", type=int, default=0)
parser.add_argument("--steps", type=int, default=16)
args = parser.parse_args()
if os.environ.get("DATALOADER_NUM_WORKERS"):
    args.num_workers = int(os.environ["DATALOADER_NUM_WORKERS"])
limit = int(os.environ.get("WORKER_LIMIT", "4"))


class Samples(Dataset):
    def __len__(self):
        return args.steps * 8

    def __getitem__(self, index):
        worker = torch.utils.data.get_worker_info()
        if worker is not None and worker.num_workers > limit:
            # What the OOM killer sends.
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.randn(8), torch.randn(1)


torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
loader = DataLoader(Samples(), batch_size=8, num_workers=args.num_workers)
print(f"training with {args.num_workers} DataLoader workers", flush=True)
for step, (x, y) in enumerate(loader):
    loss = ((model(x) - y) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"step {step} loss {loss.item():.4f}", flush=True)
print("training done", flush=True)
