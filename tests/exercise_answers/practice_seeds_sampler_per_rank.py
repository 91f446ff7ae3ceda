# Wrong: the sampler's seed differs per rank, so the parts overlap.
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def make_loader(dataset, rank, world_size, seed):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed + rank)
    generator = torch.Generator().manual_seed(seed + rank)
    return DataLoader(dataset, batch_size=8, sampler=sampler, num_workers=2, generator=generator)
