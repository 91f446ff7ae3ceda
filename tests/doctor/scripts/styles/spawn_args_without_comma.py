"""One argument for every rank, in parentheses without the comma that makes a tuple."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

WORLD = 2


def train(rank, run_name):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29840",
                            rank=rank, world_size=WORLD)
    model = DDP(nn.Linear(2, 1))
    model(torch.ones(3, 2)).sum().backward()
    print(f"{run_name}: rank {rank} done")
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=("warmup"), nprocs=WORLD)  # planted: spawning
