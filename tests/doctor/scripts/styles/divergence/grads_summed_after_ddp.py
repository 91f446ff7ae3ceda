"""Style: a script moved from hand-written gradient averaging to DDP that kept its old
helper, which now adds up gradients DDP has already averaged: every step is twice as long
on two ranks, and the ranks stay equal, so nothing looks wrong but the loss.
Planted fault: model_wrapping (the gradients all-reduced again after DDP's backward)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def add_up(model):
    for weight in model.parameters():
        dist.all_reduce(weight.grad)  # planted: model_wrapping


def run(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29587")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    draws = torch.Generator().manual_seed(rank)
    for _ in range(3):
        x = torch.randn(8, 4, generator=draws)
        opt.zero_grad()
        (model(x) - x.mean(dim=1, keepdim=True)).pow(2).mean().backward()
        add_up(model)
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
