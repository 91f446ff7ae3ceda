"""Style: accumulation that keeps every micro-batch inside no_sync(), the last one too,
so no gradient is ever averaged and each rank steps with its own.
Planted fault: model_wrapping (no micro-batch outside no_sync)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

MICRO = 3


def accumulate(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29579")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    draws = torch.Generator().manual_seed(7 + rank)
    for _ in range(2):
        opt.zero_grad()
        with model.no_sync():  # planted: model_wrapping
            for _ in range(MICRO):
                x = torch.randn(4, 3, generator=draws)
                (model(x).squeeze(1) - x.sum(dim=1)).pow(2).mean().div(MICRO).backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(accumulate, args=(2,), nprocs=2)
