"""The launcher writes the whole rendezvous into the environment once, RANK included, and
each process then joins with env:// and no rank of its own."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def fit(local_rank, steps):
    dist.init_process_group("gloo", init_method="env://")  # planted: process_group
    model = DDP(nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        opt.zero_grad()
        model(torch.randn(4, 3)).sum().backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29846", WORLD_SIZE="2", RANK="0")
    mp.spawn(fit, args=(3,), nprocs=2)
