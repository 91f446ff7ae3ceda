"""A curriculum: the first layer stops learning once "it has converged", a test each rank
makes on its own numbers, so one rank freezes it and the other does not."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def converged(rank, step):
    return rank == 1 and step >= 2  # (this rank's own reading of its own loss)


def run(rank, world):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29860", rank=rank,
                            world_size=world)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for step in range(5):
        if converged(rank, step):
            model.module[0].requires_grad_(False)
        opt.zero_grad()
        out = model(torch.randn(6, 4))  # planted: model_wrapping
        out.pow(2).mean().backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
