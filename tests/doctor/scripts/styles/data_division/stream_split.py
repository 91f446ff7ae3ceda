"""Style: records streamed from an IterableDataset, two loader workers per
rank, the stream split by rank and by loader worker, so every record is
read once across all ranks and workers. Planted fault: none."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class Records(IterableDataset):
    def __init__(self, count, rank, world_size):
        self.rank, self.world_size = rank, world_size
        generator = torch.Generator().manual_seed(3)
        self.features = torch.randn(count, 6, generator=generator)
        self.targets = self.features.sum(dim=1, keepdim=True)

    def __iter__(self):
        info = get_worker_info()
        workers, worker = (info.num_workers, info.id) if info else (1, 0)
        shards = self.world_size * workers
        shard = self.rank * workers + worker
        for i in range(shard, len(self.features), shards):
            yield self.features[i], self.targets[i]


def train(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29562")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    loader = DataLoader(Records(96, rank, world_size), batch_size=8, num_workers=2)
    model = DDP(nn.Linear(6, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(2):
        for features, targets in loader:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(features), targets).backward()
            optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(train, args=(2,), nprocs=2)
