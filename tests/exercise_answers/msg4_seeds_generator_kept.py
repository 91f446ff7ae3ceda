# Wrong: one generator for the whole module, seeded on the first call only; a loader built
# again goes on from where the last one's random numbers stopped.
import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

_state = {"rng": None}


def make_loader(dataset, rank, world_size, seed):
    if _state["rng"] is None:
        _state["rng"] = torch.Generator().manual_seed(1000 * seed + rank)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed)
    return DataLoader(
        dataset, batch_size=8, sampler=sampler, num_workers=2, generator=_state["rng"]
    )
