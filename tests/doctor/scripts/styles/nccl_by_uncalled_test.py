"""A launcher class that picks NCCL and each rank's GPU by a test it never calls.

``torch.cuda.is_available`` without parentheses is a function, always true:
the class takes the GPU's way (NCCL, set_device, cuda:rank) on every
machine, and on one without GPUs every rank fails in its first call.
"""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Launcher:
    def __init__(self, world_size):
        self.world_size = world_size
        self.backend = "nccl" if torch.cuda.is_available else "gloo"  # planted: process_group

    def device(self, rank):
        if self.backend == "nccl":
            torch.cuda.set_device(rank)
            return torch.device("cuda", rank)
        return torch.device("cpu")

    def run(self, rank):
        dist.init_process_group(self.backend, init_method="tcp://127.0.0.1:29836",
                                rank=rank, world_size=self.world_size)
        device = self.device(rank)
        torch.manual_seed(0)
        model = DDP(nn.Linear(4, 2).to(device))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(rank)
        for _ in range(5):
            x = torch.randn(8, 4, generator=g).to(device)
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
        dist.destroy_process_group()


if __name__ == "__main__":
    launcher = Launcher(2)
    mp.spawn(launcher.run, nprocs=2)
