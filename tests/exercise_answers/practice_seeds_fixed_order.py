# Wrong: the ranks' shares fit together and the noise differs per rank, but the
# sampler never shuffles (shuffle=False), so the items' order does not follow
# from seed.
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def make_loader(dataset, rank, world_size, seed):
    noise = torch.Generator()
    noise.manual_seed(seed * 1000 + rank)
    share = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=False)
    return DataLoader(dataset, batch_size=5, sampler=share, generator=noise, num_workers=1)
