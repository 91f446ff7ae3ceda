"""A module-level start of processes through torch's start_processes, with no main guard."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def fit(rank, world_size):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29839",
                            rank=rank, world_size=world_size)
    model = DDP(nn.Linear(2, 1))
    model(torch.ones(3, 2)).sum().backward()
    dist.destroy_process_group()


mp.start_processes(fit, args=(2,), nprocs=2, start_method="spawn")  # planted: spawning
