"""Style: a training class whose sampler is seeded with the rank added, meant to give each
rank "its own randomness". Each rank's DistributedSampler then shuffles the indices in
another order before taking its part, so the parts overlap.
Planted fault: the sampler's seed differs per rank."""
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


@dataclass
class Setup:
    seed: int = 3
    items: int = 64


def fit(rank, world_size, setup):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29573")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    points = torch.arange(2 * setup.items, dtype=torch.float32).reshape(setup.items, 2)
    data = TensorDataset(points, points.sum(dim=1, keepdim=True))
    order = DistributedSampler(data, seed=setup.seed + rank)  # planted: data_division
    feed = DataLoader(data, batch_size=8, sampler=order)
    net = DDP(nn.Linear(2, 1))
    opt = torch.optim.SGD(net.parameters(), lr=1e-4)
    for epoch in range(2):
        order.set_epoch(epoch)
        for x, y in feed:
            opt.zero_grad()
            nn.functional.mse_loss(net(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(fit, args=(2, Setup()), nprocs=2)
