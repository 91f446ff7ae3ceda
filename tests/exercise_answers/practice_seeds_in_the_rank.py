# Wrong: no loader workers at all (the exercise asks for two). Seeding the rank's
# own random numbers with seed and rank then gives noise per rank that repeats,
# but the question the exercise asks, what each worker process draws, never arises.
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def make_loader(dataset, rank, world_size, seed):
    torch.manual_seed(1000 * seed + rank)
    share = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed)
    return DataLoader(dataset, batch_size=8, sampler=share)
