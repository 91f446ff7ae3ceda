"""Style: each rank cuts its own slice of the rows, two thirds for rank 0 and a third
for rank 1, so their loaders give different numbers of batches; training runs inside
model.join(), which shadows the missing steps of the rank that finishes first.
Planted fault: none."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset


def work(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29791")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    rows = torch.randn(90, 4, generator=torch.Generator().manual_seed(23))
    cut = 60 if rank == 0 else 30
    mine = rows[:cut] if rank == 0 else rows[60:]
    loader = DataLoader(TensorDataset(mine, mine.sum(dim=1, keepdim=True)), batch_size=10)
    model = DDP(torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with model.join():
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(work, args=(2,), nprocs=2)
