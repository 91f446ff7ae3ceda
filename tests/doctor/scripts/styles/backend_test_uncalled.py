"""Settings chosen once, at start, from what the machine has."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

SETTINGS = {"backend": "gloo", "device": "cpu"}
if torch.cuda.is_available:  # planted: process_group
    SETTINGS["backend"] = "nccl"
if torch.cuda.is_available():
    SETTINGS["device"] = "cuda"


def work(rank, world_size):
    dist.init_process_group(SETTINGS["backend"], rank=rank, world_size=world_size,
                            init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}")
    device = torch.device(SETTINGS["device"], rank) if SETTINGS["device"] == "cuda" else "cpu"
    model = DDP(nn.Linear(3, 1).to(device))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(5, 3, device=device)).sum().backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_PORT", "29825")
    mp.spawn(work, args=(2,), nprocs=2)
