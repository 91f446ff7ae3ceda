"""Style: each rank asks a DistributedSampler (no shuffle, drop_last) for its positions
once, keeps them in a Subset and shuffles that in a plain loader; 101 items, so the one
left over after an even split is dropped, as drop_last asks.
Planted fault: none."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, Subset, TensorDataset


def learn(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29805")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    cells = torch.randn(101, 3, generator=torch.Generator().manual_seed(53))
    full = TensorDataset(cells, cells[:, :1] - cells[:, 2:])
    mine = Subset(full, list(DistributedSampler(full, shuffle=False, drop_last=True)))
    loader = DataLoader(mine, batch_size=10, shuffle=True)
    model = DDP(torch.nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(learn, args=(2,), nprocs=2)
