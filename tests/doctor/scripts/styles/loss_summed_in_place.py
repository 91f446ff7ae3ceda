"""Style: to log a loss averaged over the ranks, each step all-reduces the loss tensor
itself, in place, before backward. The gradients are untouched (the collective is not
part of autograd's graph) and DDP averages them as usual; the report notes it.
Planted fault: none."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def step_all(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29803")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    rows = torch.randn(40, 2, generator=torch.Generator().manual_seed(47))
    data = TensorDataset(rows, rows.prod(dim=1, keepdim=True))
    sampler = DistributedSampler(data)
    model = DDP(torch.nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        for x, y in DataLoader(data, batch_size=5, sampler=sampler):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            dist.all_reduce(loss)
            loss.backward()
            opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(step_all, args=(2,), nprocs=2)
