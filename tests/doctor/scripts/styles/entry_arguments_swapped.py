"""Style: a worker whose parameters list the world size before the rank, started with
mp.spawn, which hands each process its number first. Planted fault: spawning (the order
of the worker's parameters)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def worker(world_size, rank, lr):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29820")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    data = TensorDataset(torch.randn(16, 2), torch.randn(16, 1))
    model = DDP(nn.Linear(2, 1))
    sgd = torch.optim.SGD(model.parameters(), lr=lr)
    for x, y in DataLoader(data, batch_size=4, sampler=DistributedSampler(data)):
        sgd.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        sgd.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    ranks = 2
    mp.spawn(worker, args=(ranks, 0.1), nprocs=ranks)  # planted: spawning
