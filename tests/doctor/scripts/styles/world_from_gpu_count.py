"""Sized for a GPU box: two workers per machine always, and the world counted from the GPUs
there (at least one), which a machine without GPUs counts as 1."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

WORKERS_PER_MACHINE = 2


def job(slot, machines):
    world = machines * max(torch.cuda.device_count(), 1)  # planted: process_group
    on_gpu = torch.cuda.device_count() > 0
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29848")
    dist.init_process_group("nccl" if on_gpu else "gloo", rank=slot, world_size=world)
    device = torch.device("cuda", slot) if on_gpu else torch.device("cpu")
    model = DDP(nn.Linear(4, 1).to(device), device_ids=[slot] if on_gpu else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(8, 4, device=device)).sum().backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(job, args=(1,), nprocs=WORKERS_PER_MACHINE)
