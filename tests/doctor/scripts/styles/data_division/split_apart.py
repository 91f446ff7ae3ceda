"""Style: one fixed table of examples, split into training and held-out parts with
random_split and no generator, in each rank. Each process's default generator starts
from a seed of its own, so every rank trains on another selection of the same rows and
the DistributedSampler's parts overlap.
Planted fault: the split made apart on each rank."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset, random_split


def table():
    grid = torch.linspace(-1, 1, 120).reshape(60, 2)
    return TensorDataset(grid, (grid.sum(dim=1) > 0).long())


def worker(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29571")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    fit, held_out = random_split(table(), [48, 12])
    feed = DataLoader(fit, batch_size=8, sampler=DistributedSampler(fit))  # planted: data_division
    net = DDP(nn.Linear(2, 2))
    step = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(2):
        feed.sampler.set_epoch(epoch)
        for x, y in feed:
            step.zero_grad()
            nn.functional.cross_entropy(net(x), y).backward()
            step.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
