"""Style: training divided by a DistributedSampler, then an accuracy over a held-out set
of an odd size, divided the same way and summed over the ranks with all_reduce.
Planted fault: none (the padding's one repeated item is a remark, not a fault)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29817")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    points = torch.randn(97, 2, generator=torch.Generator().manual_seed(8))
    labels = (points[:, 0] > points[:, 1]).long()
    train, held = TensorDataset(points[:64], labels[:64]), TensorDataset(points[64:], labels[64:])
    sampler = DistributedSampler(train)
    torch.manual_seed(8)
    model = DDP(nn.Linear(2, 2))
    sgd = torch.optim.SGD(model.parameters(), lr=0.2)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(train, batch_size=8, sampler=sampler):
            sgd.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            sgd.step()
    tally = torch.zeros(2)
    with torch.no_grad():
        for x, y in DataLoader(held, batch_size=8, sampler=DistributedSampler(held, shuffle=False)):
            tally += torch.tensor([(model(x).argmax(1) == y).sum().item(), len(y)])
    dist.all_reduce(tally)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
