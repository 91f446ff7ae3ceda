"""Style: a list of samples shuffled with a per-rank random.Random before it
is handed to a DistributedSampler, so rank 0 and rank 1 index different
orders of the samples. Planted fault: data_division."""
import os
import random

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler


class Samples(Dataset):
    def __init__(self, pairs):
        self.pairs = pairs

    def __len__(self):
        return len(self.pairs)

    def __getitem__(self, i):
        return self.pairs[i]


def main(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29566")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    grid = torch.linspace(-1, 1, 60)
    pairs = [(torch.tensor([v]), torch.tensor([2 * v])) for v in grid]
    random.Random(rank).shuffle(pairs)  # planted: data_division
    dataset = Samples(pairs)
    sampler = DistributedSampler(dataset)
    train_loader = DataLoader(dataset, batch_size=6, sampler=sampler)
    model = DDP(nn.Linear(1, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in train_loader:
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
