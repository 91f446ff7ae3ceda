"""Rank 0 alone validates each epoch, through a helper whose helper averages over the ranks."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def averaged(value):
    total = value.clone()
    dist.all_reduce(total)  # planted: process_group
    return total / dist.get_world_size()


def validate(model, inputs):
    with torch.no_grad():
        return averaged(model.module(inputs).pow(2).mean())


def train(rank, world_size):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29841",
                            rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    held_out = torch.randn(16, 4)
    for epoch in range(3):
        for _ in range(4):
            opt.zero_grad()
            model(torch.randn(8, 4)).pow(2).mean().backward()
            opt.step()
        if rank == 0:
            print(f"epoch {epoch}: {validate(model, held_out).item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
