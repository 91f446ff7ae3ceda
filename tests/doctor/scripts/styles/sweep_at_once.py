"""Style: a learning-rate sweep whose trainings run all at once, each a
group of its own but all at the same fixed port, which only one group can
hold at a time. Planted fault: process_group (the fixed port)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def fit(rank, world, lr):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29574")
    dist.init_process_group("gloo", rank=rank, world_size=world)  # planted: process_group
    model = DDP(nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    points = torch.arange(40.0).reshape(20, 2) / 40
    data = TensorDataset(points, points.mean(1, keepdim=True))
    for x, y in DataLoader(data, batch_size=2, sampler=DistributedSampler(data)):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    runs = [mp.spawn(fit, args=(2, lr), nprocs=2, join=False) for lr in (0.1, 0.01)]
    for run in runs:
        while not run.join():
            pass
