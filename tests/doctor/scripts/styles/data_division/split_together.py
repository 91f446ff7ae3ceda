"""Style: the same split as split_apart.py, with a generator seeded alike on every rank:
every rank holds the same training part, and the DistributedSampler divides it.
Planted fault: none."""
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
    os.environ.setdefault("MASTER_PORT", "29572")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    fit, held_out = random_split(table(), [48, 12], generator=torch.Generator().manual_seed(7))
    batches = DataLoader(fit, batch_size=8, sampler=DistributedSampler(fit))
    net = DDP(nn.Linear(2, 2))
    step = torch.optim.SGD(net.parameters(), lr=0.1)
    for epoch in range(2):
        batches.sampler.set_epoch(epoch)
        for x, y in batches:
            step.zero_grad()
            nn.functional.cross_entropy(net(x), y).backward()
            step.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
