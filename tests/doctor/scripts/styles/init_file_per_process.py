"""Style: ranks that meet through a shared file (init_method="file://..."), each naming
the file itself from what it knows of its own process. Planted fault: process_group (a
file per process: the ranks never meet)."""
import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def rendezvous_file():
    return os.path.join(tempfile.gettempdir(), f"meet_{os.getpid()}")


def main(rank, world):
    where = rendezvous_file()
    meet = f"file://{where}"
    dist.init_process_group("gloo", meet, rank=rank, world_size=world)  # planted: process_group
    torch.manual_seed(6)
    data = TensorDataset(torch.randn(40, 2), torch.randn(40, 1))
    sampler = DistributedSampler(data)
    model = DDP(nn.Linear(2, 1))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(data, batch_size=5, sampler=sampler):
        sgd.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        sgd.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
