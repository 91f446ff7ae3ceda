# Wrong: each rank's noise generator is seeded with seed * rank, so rank 0's noise is
# the same whatever seed make_loader is given.
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def make_loader(dataset, rank, world_size, seed):
    share = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed)
    noise = torch.Generator().manual_seed(seed * rank)
    return DataLoader(dataset, batch_size=4, sampler=share, generator=noise, num_workers=1)
