"""Style: a progress check every other step, run by the first process only; the check's
helper counts its correct answers with all_reduce, which the other rank, busy with its
next backward pass, never joins.
Planted fault: the collective inside a branch one rank takes."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def progress(model, probe):
    hits = (model(probe).squeeze(1) > 0).sum().float()
    dist.all_reduce(hits)  # planted: process_group
    return hits.item()


def train(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29581")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    points = torch.randn(64, 3, generator=torch.Generator().manual_seed(2))
    data = TensorDataset(points, points.sum(dim=1, keepdim=True))
    model = DDP(nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step, (x, y) in enumerate(DataLoader(data, batch_size=8, sampler=DistributedSampler(data))):
        opt.zero_grad()
        (model(x) - y).pow(2).mean().backward()
        opt.step()
        if rank == 0 and step % 2 == 1:
            print("positive:", progress(model, points))
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
