"""Style: the same data module with one fixed seed for its generator, so every process
draws the same data set and the sampler splits it. Planted fault: none."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def build(count):
    draws = torch.Generator()
    draws.manual_seed(2024)
    x = torch.randn(count, 3, generator=draws)
    return TensorDataset(x, x.sum(dim=1, keepdim=True))


def train(index, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29572")
    dist.init_process_group("gloo", rank=index, world_size=world)
    data = build(64)
    sampler = DistributedSampler(data)
    feed = DataLoader(data, batch_size=8, sampler=sampler)
    net = DDP(nn.Linear(3, 1))
    step = torch.optim.SGD(net.parameters(), lr=0.05)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in feed:
            step.zero_grad()
            nn.functional.mse_loss(net(x), y).backward()
            step.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
