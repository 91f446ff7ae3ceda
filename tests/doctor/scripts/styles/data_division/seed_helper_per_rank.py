"""Style: a seed-everything helper called with the rank added "for different noise per
worker", before a train split drawn with numpy's global generator. Planted fault:
data_division (the seeds, one per rank, before the split)."""
import os
import random

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

BASE_SEED = 7


def seed_all(seed):
    random.seed(seed)  # planted: data_division
    np.random.seed(seed)
    torch.manual_seed(seed)


def main(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29570")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    seed_all(BASE_SEED + rank)
    table = np.linspace(-1, 1, 120, dtype=np.float32).reshape(60, 2)
    order = np.random.permutation(len(table))[:48]
    inputs = torch.from_numpy(table[order])
    data = TensorDataset(inputs, inputs.prod(1, keepdim=True))
    sampler = DistributedSampler(data, seed=BASE_SEED)
    model = DDP(nn.Linear(2, 1))
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in DataLoader(data, batch_size=6, sampler=sampler):
        sgd.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        sgd.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
