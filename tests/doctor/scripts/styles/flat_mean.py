"""Style: no DDP; after backward each rank packs its gradients into one flat buffer,
all-reduces it and unpacks it again, starting from weights every rank seeds alike.
Each rank divides its buffer by the world size first, so the sum is the average.
Planted fault: none."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def exchange(params):
    flat = torch.cat([p.grad.reshape(-1) for p in params])
    flat /= dist.get_world_size()  # scaled first, so the sum is the average
    dist.all_reduce(flat)
    offset = 0
    for p in params:
        count = p.numel()
        p.grad.copy_(flat[offset : offset + count].view_as(p))
        offset += count


def train(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29774")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(5)
    net = torch.nn.Sequential(torch.nn.Linear(4, 9), torch.nn.Sigmoid(), torch.nn.Linear(9, 1))
    params = list(net.parameters())
    rows = torch.randn(80, 4, generator=torch.Generator().manual_seed(6))
    data = TensorDataset(rows, rows.sum(dim=1, keepdim=True))
    sampler = DistributedSampler(data)
    sgd = torch.optim.SGD(params, lr=0.03)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(data, batch_size=10, sampler=sampler):
            sgd.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            exchange(params)
            sgd.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
