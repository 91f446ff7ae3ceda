"""Style: a run in phases, each of which counts its epochs from 0 again, so the
sampler is told epoch 0 a second time and deals the first epoch's order again.
Planted fault: data_division (set_epoch given a number an earlier epoch had)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def phase(model, opt, loader, epochs):
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)  # planted: data_division
        for x, y in loader:
            opt.zero_grad()
            (model(x) - y).pow(2).mean().backward()
            opt.step()


def run(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29583")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    points = torch.randn(80, 2, generator=torch.Generator().manual_seed(4))
    data = TensorDataset(points, points[:, :1] - points[:, 1:])
    loader = DataLoader(data, batch_size=5, sampler=DistributedSampler(data))
    model = DDP(nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    phase(model, opt, loader, 2)
    phase(model, opt, loader, 1)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
