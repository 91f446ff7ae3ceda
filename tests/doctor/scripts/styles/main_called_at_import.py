"""A short script whose last line calls main(), with no guard around it."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank, world_size):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ['PORT']}",
                            rank=rank, world_size=world_size)
    model = DDP(nn.Linear(2, 1))
    model(torch.ones(3, 2)).sum().backward()
    dist.destroy_process_group()


def main():
    os.environ.setdefault("PORT", os.environ.get("MASTER_PORT", "29824"))
    mp.spawn(worker, args=(2,), nprocs=2)


main()  # planted: spawning
