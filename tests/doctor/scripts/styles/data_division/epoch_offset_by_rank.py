"""Style: an epoch counter kept by a small schedule object, numbered across the whole
world so that no two processes ever reuse an epoch number. Planted fault: data_division."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Schedule:
    def __init__(self, rank, world):
        self.rank, self.world = rank, world

    def tag(self, epoch):
        return epoch * self.world + self.rank


def main(rank, world):
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            init_method=f"tcp://127.0.0.1:{os.environ.get('MASTER_PORT', 29828)}")
    g = torch.Generator().manual_seed(11)
    data = TensorDataset(torch.randn(96, 4, generator=g), torch.randn(96, 1, generator=g))
    sampler = DistributedSampler(data, seed=5)
    loader = DataLoader(data, batch_size=12, sampler=sampler)
    schedule = Schedule(rank, world)
    torch.manual_seed(3)
    model = DDP(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        sampler.set_epoch(schedule.tag(epoch))  # planted: data_division
        for x, y in loader:
            opt.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
