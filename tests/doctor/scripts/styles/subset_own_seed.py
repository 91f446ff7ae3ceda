"""Style: each rank shuffles the positions with a generator seeded by its rank, then keeps
every world_size-th one in a Subset. The orders differ, so the kept positions overlap and
some are kept by no rank.
Planted fault: the shuffle seeded per rank."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, Subset, TensorDataset


def run(rank, world_size, seed=0):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29801")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    table = torch.randn(100, 3, generator=torch.Generator().manual_seed(43))
    full = TensorDataset(table, table.mean(dim=1, keepdim=True))
    order = torch.randperm(len(full), generator=torch.Generator().manual_seed(seed + rank))
    part = Subset(full, order[rank::world_size].tolist())
    loader = DataLoader(part, batch_size=10)  # planted: data_division
    model = DDP(torch.nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for x, y in loader:
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
