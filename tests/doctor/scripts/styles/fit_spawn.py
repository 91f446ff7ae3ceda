"""Style: a small Trainer object whose fit() starts the ranks itself with
mp.spawn, handing each rank its own settings; the __main__ block only builds
the Trainer and calls fit(). Planted fault: none."""
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


@dataclass
class Settings:
    world_size: int = 2
    epochs: int = 2
    lr: float = 0.05


def run_rank(rank, settings):
    dist.init_process_group("gloo", rank=rank, world_size=settings.world_size)
    torch.manual_seed(7)
    xs = torch.randn(160, 6)
    ys = xs.sum(dim=1, keepdim=True)
    data = TensorDataset(xs, ys)
    sampler = DistributedSampler(data, num_replicas=settings.world_size, rank=rank)
    batches = DataLoader(data, batch_size=10, sampler=sampler)
    net = DistributedDataParallel(torch.nn.Linear(6, 1))
    opt = torch.optim.SGD(net.parameters(), lr=settings.lr)
    for epoch in range(settings.epochs):
        sampler.set_epoch(epoch)
        for xb, yb in batches:
            opt.zero_grad()
            torch.nn.functional.mse_loss(net(xb), yb).backward()
            opt.step()
    dist.destroy_process_group()


class Trainer:
    def __init__(self, settings):
        self.settings = settings

    def fit(self):
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        mp.spawn(run_rank, args=(self.settings,), nprocs=self.settings.world_size)


if __name__ == "__main__":
    Trainer(Settings()).fit()
