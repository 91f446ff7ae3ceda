# Right, written differently: each worker re-seeds itself from seed, rank
# and its own number.
from functools import partial

import torch
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


def seed_worker(worker_id, seed, rank):
    torch.manual_seed(10_000 * seed + 100 * rank + worker_id)


def make_loader(dataset, rank, world_size, seed):
    sampler = DistributedSampler(dataset, world_size, rank, seed=seed)
    return DataLoader(
        dataset,
        batch_size=8,
        sampler=sampler,
        num_workers=2,
        worker_init_fn=partial(seed_worker, seed=seed, rank=rank),
    )
