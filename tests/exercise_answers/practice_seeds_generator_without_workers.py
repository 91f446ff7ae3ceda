# Wrong: a generator seeded per rank, but no loader workers: the generator only seeds
# workers, so the augmentation is drawn in each rank's own process.
import torch
from torch.utils.data import DataLoader, DistributedSampler


def make_loader(dataset, rank, world_size, seed):
    split = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed)
    per_rank = torch.Generator().manual_seed(seed * 1000 + rank)
    return DataLoader(dataset, batch_size=4, sampler=split, generator=per_rank)
