"""Style: a loader factory with keyword defaults, called without the rank, so every
process's DistributedSampler is told it is rank 0. Planted fault: data_division (the
sampler's rank, defaulted)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def make_loader(data, replicas, rank=0, batch=8):
    sampler = DistributedSampler(data, num_replicas=replicas, rank=rank)  # planted: data_division
    return DataLoader(data, batch_size=batch, sampler=sampler), sampler


def main(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29569")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    inputs = torch.randn(64, 3, generator=torch.Generator().manual_seed(4))
    loader, sampler = make_loader(TensorDataset(inputs, inputs.sum(1, keepdim=True)), world)
    torch.manual_seed(4)
    model = DDP(nn.Linear(3, 1))
    sgd = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            sgd.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            sgd.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
