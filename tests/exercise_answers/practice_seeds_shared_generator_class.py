# Wrong, in a style of its own (a small factory class, DataLoader's keyword arguments kept
# in a dict, the generator seeded in a separate statement): the shuffle is right, but the
# loader's generator gets the same seed on every rank, so every rank's workers draw the
# same augmentation noise.
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


class LoaderFactory:
    options = {"batch_size": 8, "num_workers": 2}

    def __init__(self, seed):
        self.seed = seed

    def build(self, dataset, rank, world_size):
        rng = torch.Generator()
        rng.manual_seed(self.seed)
        share = DistributedSampler(dataset, world_size, rank, shuffle=True, seed=self.seed)
        return DataLoader(dataset, sampler=share, generator=rng, **self.options)


def make_loader(dataset, rank, world_size, seed):
    return LoaderFactory(seed).build(dataset, rank, world_size)
