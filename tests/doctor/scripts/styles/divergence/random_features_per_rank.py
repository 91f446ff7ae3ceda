"""Style: random Fourier features, a fixed projection kept as a plain tensor attribute of
the model and drawn after a seed that includes the rank. DDP copies parameters and
buffers from rank 0 at the wrap, not plain tensors, so each rank projects its inputs
its own way; the parameters stay equal and the ranks still compute different things.
Planted fault: model_wrapping (the projection drawn per rank)."""
import math
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Features(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.projection = torch.randn(2, width)  # planted: model_wrapping
        self.head = nn.Linear(2 * width, 1)

    def forward(self, x):
        angles = x @ self.projection
        return self.head(torch.cat([angles.sin(), angles.cos()], dim=1))


def learn(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29576")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(11 + rank)
    model = DDP(Features(8))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    draws = torch.Generator().manual_seed(rank)
    for _ in range(3):
        x = torch.rand(16, 2, generator=draws) * math.pi
        opt.zero_grad()
        (model(x) - x[:, :1].sin()).pow(2).mean().backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(learn, args=(2,), nprocs=2)
