"""Style: a script that warm-starts its first layer from statistics of the data, worked
out by the logging rank alone once the model is wrapped and written into model.module.
Planted fault: model_wrapping (the copy, on rank 0 only, after DDP(...))."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def main(rank, world):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29812")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    features = torch.randn(64, 4, generator=torch.Generator().manual_seed(9))
    data = TensorDataset(features, features.sum(1, keepdim=True))
    torch.manual_seed(9)
    model = DDP(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 1)))
    if rank == 0:
        spread = features.std(0)
        with torch.no_grad():
            model.module[0].weight.copy_(torch.diag(1 / spread))  # planted: model_wrapping
    sampler = DistributedSampler(data)
    adam = torch.optim.Adam(model.parameters(), lr=0.01)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(data, batch_size=8, sampler=sampler):
            adam.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            adam.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(main, args=(2,), nprocs=2)
