"""A torchrun recipe pasted into an mp.spawn script: the rank is read from the environment,
with 0 when it is missing, and the index spawn hands over is kept for the device only."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main(local_index, world):
    rank = int(os.getenv("RANK", "0"))  # planted: process_group
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29856")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = DDP(nn.Linear(2, 1))
    model(torch.ones(2, 2)).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
