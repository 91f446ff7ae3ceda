"""Processes made in a list comprehension, the worker called where it should be handed over:
the list is never built, since the first call already waits for its partners."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank, world):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29851", rank=rank,
                            world_size=world, timeout=__import__("datetime").timedelta(seconds=20))
    model = DDP(nn.Linear(3, 1))
    model(torch.ones(2, 3)).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    spawn = mp.get_context("spawn")
    procs = [spawn.Process(target=train(r, 2)) for r in range(2)]  # planted: spawning
    for p in procs:
        p.start()
    for p in procs:
        p.join()
