"""The rendezvous store made by hand, each process told it is "the server" because the flag
was copied from a single-process example."""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

SERVER = True


def join(rank, world):
    store = dist.TCPStore("127.0.0.1", 29855, world, SERVER,  # planted: process_group
                          timeout=timedelta(seconds=20))
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    model = DDP(nn.Linear(2, 2))
    model(torch.ones(3, 2)).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(join, args=(2,), nprocs=2)
