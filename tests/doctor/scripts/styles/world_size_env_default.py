"""Style: a script for torchrun with a fallback for plain Python: started without torchrun,
it spawns its processes and sets each one's RANK itself, but not WORLD_SIZE, which the
setup then reads with a default of one. Planted fault: process_group (the default)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def setup():
    rank = int(os.environ["RANK"])
    world_size = int(os.environ.get("WORLD_SIZE", 1))  # planted: process_group
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    return rank


def train():
    setup()
    torch.manual_seed(2)
    data = TensorDataset(torch.randn(24, 3), torch.randn(24, 1))
    model = DDP(nn.Linear(3, 1))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(data, batch_size=4, sampler=DistributedSampler(data)):
        sgd.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        sgd.step()
    dist.destroy_process_group()


def spawned(rank):
    os.environ.update(RANK=str(rank), MASTER_ADDR="127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29815")
    train()


if __name__ == "__main__":
    if "RANK" in os.environ:
        train()
    else:
        mp.spawn(spawned, nprocs=2)
