"""Style: a data module that draws its samples from a generator of its own, seeded with
the process's index to "make runs reproducible": each process draws another data set.
Planted fault: data_division."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class Points:
    def __init__(self, count, seed):
        draws = torch.Generator().manual_seed(seed)  # planted: data_division
        self.x = torch.randn(count, 3, generator=draws)
        self.y = self.x.sum(dim=1, keepdim=True)

    def dataset(self):
        return TensorDataset(self.x, self.y)


def train(index, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29571")
    dist.init_process_group("gloo", rank=index, world_size=world)
    data = Points(64, seed=100 + index).dataset()
    feed = DataLoader(data, batch_size=8, sampler=DistributedSampler(data, shuffle=False))
    net = DDP(nn.Linear(3, 1))
    step = torch.optim.SGD(net.parameters(), lr=0.05)
    for x, y in feed:
        step.zero_grad()
        nn.functional.mse_loss(net(x), y).backward()
        step.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
