"""Style: a sampler of the script's own that shuffles with the epoch as seed, repeats
the first items to make the order a multiple of the world size (as DistributedSampler
pads), and keeps every world_size-th index for its rank; 77 items, so one repeats.
Planted fault: none."""
import math
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Sampler, TensorDataset


class StridedShuffle(Sampler):
    def __init__(self, length, rank, world_size):
        self.length, self.rank, self.world_size, self.epoch = length, rank, world_size, 0
        self.per_rank = math.ceil(length / world_size)

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __iter__(self):
        order = torch.randperm(self.length, generator=torch.Generator().manual_seed(self.epoch))
        order = order.tolist()
        order += order[: self.per_rank * self.world_size - self.length]
        return iter(order[self.rank :: self.world_size])

    def __len__(self):
        return self.per_rank


def job(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29793")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    cols = torch.randn(77, 3, generator=torch.Generator().manual_seed(29))
    data = TensorDataset(cols, cols.max(dim=1, keepdim=True).values)
    order = StridedShuffle(len(data), rank, world_size)
    net = DDP(torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 1)))
    opt = torch.optim.SGD(net.parameters(), lr=0.02)
    for epoch in range(3):
        order.set_epoch(epoch)
        for x, y in DataLoader(data, batch_size=13, sampler=order):
            opt.zero_grad()
            torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(job, args=(2,), nprocs=2)
