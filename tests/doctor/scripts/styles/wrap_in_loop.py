"""Style: a worker started through functools.partial (its settings bound in advance),
whose training loop builds the DDP wrapper afresh for every batch: each wrap sends
rank 0's weights to every rank again and rebuilds the gradient buckets.
Planted fault: the wrap inside the loop."""
import functools
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def worker(rank, world_size, lr):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29761")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    table = torch.randn(96, 6, generator=torch.Generator().manual_seed(8))
    dataset = TensorDataset(table, table[:, :2].prod(dim=1, keepdim=True))
    sampler = DistributedSampler(dataset)
    layers = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.GELU(), torch.nn.Linear(10, 1))
    optimizer = torch.optim.Adam(layers.parameters(), lr=lr)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(dataset, batch_size=12, sampler=sampler):
            wrapped = DistributedDataParallel(layers)  # planted: model_wrapping
            optimizer.zero_grad()
            torch.nn.functional.l1_loss(wrapped(x), y).backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(functools.partial(worker, lr=0.003), args=(2,), nprocs=2)
