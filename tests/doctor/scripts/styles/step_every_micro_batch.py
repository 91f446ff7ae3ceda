"""Gradient accumulation over groups of four micro-batches, the last of each group synced."""

import contextlib
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

GROUP = 4


def micro_batches(rank, count):
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(count):
        x = torch.randn(6, 5, generator=g)
        yield x, x @ torch.arange(5.0)


def train(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}")
    torch.manual_seed(0)
    model = DDP(nn.Linear(5, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i, (x, y) in enumerate(micro_batches(rank, 16)):
        last = (i + 1) % GROUP == 0
        with contextlib.nullcontext() if last else model.no_sync():
            loss = nn.functional.mse_loss(model(x).squeeze(1), y) / GROUP
            loss.backward()
        opt.step()  # planted: model_wrapping
        opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_PORT", "29827")
    mp.spawn(train, args=(2,), nprocs=2)
