"""Style: a runner object whose epochs end with a "shrink the weights" pass kept in a
decorated helper, which only the logging rank runs. The first epochs train in step; the
ranks part at the end of the first epoch. Planted fault: model_wrapping (the helper's
edit, on rank 0 only)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


class Runner:
    def __init__(self, rank, world):
        self.rank = rank
        torch.manual_seed(4)
        self.model = DDP(nn.Sequential(nn.Linear(6, 10), nn.ReLU(), nn.Linear(10, 2)))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.05)
        inputs = torch.randn(96, 6, generator=torch.Generator().manual_seed(5))
        self.data = TensorDataset(inputs, inputs[:, :2] * 2)
        self.sampler = DistributedSampler(self.data, num_replicas=world, rank=rank)

    @torch.no_grad()
    def shrink(self, factor):
        for weight in self.model.parameters():
            weight.mul_(factor)  # planted: model_wrapping

    def epoch(self, number):
        self.sampler.set_epoch(number)
        for x, y in DataLoader(self.data, batch_size=12, sampler=self.sampler):
            self.optimizer.zero_grad()
            nn.functional.mse_loss(self.model(x), y).backward()
            self.optimizer.step()
        if self.rank == 0:
            self.shrink(0.98)


def run(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29811")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    runner = Runner(rank, world)
    for number in range(3):
        runner.epoch(number)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
