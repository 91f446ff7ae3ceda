"""Style: records streamed from an IterableDataset, two loader workers per
rank. The stream is split by rank inside __iter__, but not by loader worker,
so each worker of a rank streams the same records: every record is trained
on twice per epoch. Planted fault: data_division."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset


class Records(IterableDataset):
    def __init__(self, count, rank, world_size):
        self.rank, self.world_size = rank, world_size
        generator = torch.Generator().manual_seed(3)
        self.features = torch.randn(count, 6, generator=generator)
        self.targets = self.features.sum(dim=1, keepdim=True)

    def __iter__(self):
        for i in range(self.rank, len(self.features), self.world_size):
            yield self.features[i], self.targets[i]


def train(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29561")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    records = Records(96, rank, world_size)
    loader = DataLoader(records, batch_size=8, num_workers=2)  # planted: data_division
    model = DDP(nn.Linear(6, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for features, targets in loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(features), targets).backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
