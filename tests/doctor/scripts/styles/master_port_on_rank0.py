"""The address is set for everyone, but the port only where the store will be hosted, as if
the other ranks could learn it from rank 0."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def host_settings(rank):
    if rank == 0:
        os.environ["MASTER_PORT"] = "29858"


def train(rank, world):
    host_settings(rank)
    dist.init_process_group("gloo", rank=rank, world_size=world)  # planted: process_group
    model = DDP(nn.Linear(2, 1))
    model(torch.ones(2, 2)).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    mp.spawn(train, args=(2,), nprocs=2)
