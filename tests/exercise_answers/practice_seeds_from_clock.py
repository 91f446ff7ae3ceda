# Wrong: each rank seeds its loader from the clock, so its augmentation is its own
# but can never be drawn again.
import time

import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def make_loader(dataset, rank, world_size, seed):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed)
    generator = torch.Generator().manual_seed(time.time_ns() + rank)
    return DataLoader(dataset, batch_size=8, sampler=sampler, num_workers=2, generator=generator)
