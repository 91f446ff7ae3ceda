"""The training function gets its settings through functools.partial, by keyword."""

import functools
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def fit(world_size, rank, lr):
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}")
    model = DDP(nn.Linear(2, 2))
    torch.optim.SGD(model.parameters(), lr=lr).zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_PORT", "29831")
    entry = functools.partial(fit, world_size=2, lr=0.1)
    mp.spawn(entry, nprocs=2)  # planted: spawning
