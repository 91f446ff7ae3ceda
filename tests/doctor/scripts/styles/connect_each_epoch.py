"""Style: a reconnect at the top of every epoch: connect() joins the group
inside the training loop, so the second epoch calls init_process_group
while the first epoch's group is still up. Planted fault: process_group."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def connect(rank, world_size):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = "29567"
    dist.init_process_group("gloo", rank=rank, world_size=world_size)


def loop(rank, world_size):
    data = TensorDataset(torch.randn(96, 3), torch.randn(96, 1))
    model = torch.nn.Linear(3, 1)
    for epoch in range(3):
        connect(rank, world_size)  # planted: process_group
        sampler = DistributedSampler(data, num_replicas=world_size, rank=rank)
        sampler.set_epoch(epoch)
        ddp = DDP(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        for x, y in DataLoader(data, batch_size=16, sampler=sampler):
            opt.zero_grad()
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(loop, args=(2,), nprocs=2)
