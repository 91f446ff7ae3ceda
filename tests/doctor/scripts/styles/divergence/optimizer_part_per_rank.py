"""Style: fine-tuning where the head alone was meant to train on the second process (a
half-finished experiment): its optimiser holds the head's parameters only, rank 0's the
whole model's, so after the first step the bodies differ.
Planted fault: model_wrapping (the optimiser built from other parameters per rank)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def run(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29585")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 1)))
    trained = model.parameters() if rank == 0 else model.module[2].parameters()
    opt = torch.optim.SGD(trained, lr=0.1)  # planted: model_wrapping
    draws = torch.Generator().manual_seed(rank)
    for _ in range(3):
        x = torch.randn(8, 3, generator=draws)
        opt.zero_grad()
        (model(x) - x.sum(dim=1, keepdim=True)).pow(2).mean().backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
