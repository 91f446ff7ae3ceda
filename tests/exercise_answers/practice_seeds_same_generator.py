# Wrong: the same generator seed on every rank, so every rank's workers
# draw the same augmentation.
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def make_loader(dataset, rank, world_size, seed):
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(dataset, batch_size=8, sampler=sampler, num_workers=2, generator=generator)
