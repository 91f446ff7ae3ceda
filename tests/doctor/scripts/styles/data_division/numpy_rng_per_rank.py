"""Style: features made with NumPy's newer generator API, seeded with the rank, then turned
into tensors; every rank holds a different table. Planted fault: data_division."""
import os

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def table(rank, rows=48):
    rng = np.random.default_rng(rank)  # planted: data_division
    features = rng.normal(size=(rows, 4)).astype(np.float32)
    return TensorDataset(torch.from_numpy(features), torch.from_numpy(features[:, :1] * 2))


def main(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29573")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    data = table(rank)
    loader = DataLoader(data, batch_size=6, sampler=DistributedSampler(data))
    model = DDP(nn.Linear(4, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for x, y in loader:
        opt.zero_grad()
        nn.functional.l1_loss(model(x), y).backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
