"""Style: each process picks "its own free port" for the group, a habit from running
several jobs on one machine: the ranks wait at different ports and never meet.
Planted fault: process_group."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

FIRST_PORT = 29596


def connect(rank, world_size):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(FIRST_PORT + rank)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)  # planted: process_group


def main(rank, world_size):
    connect(rank, world_size)
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(48, 3), torch.randn(48, 1))
    sampler = DistributedSampler(data)
    loader = DataLoader(data, batch_size=6, sampler=sampler)
    model = DDP(nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
