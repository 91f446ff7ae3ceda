"""Style: a run in two phases; between them the first process reloads the weights it
saved at the end of the first phase, "to be safe", and the others keep theirs. The
file holds weights one step older than the model, so after the reload the ranks differ.
Planted fault: model_wrapping (the reload on one rank)."""
import io
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset


def phase(model, opt, loader, first, epochs):
    for epoch in range(first, first + epochs):
        loader.sampler.set_epoch(epoch)
        for x, y in loader:
            opt.zero_grad()
            (model(x) - y).pow(2).mean().backward()
            opt.step()


def run(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29582")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    points = torch.randn(80, 2, generator=torch.Generator().manual_seed(4))
    data = TensorDataset(points, points[:, :1] - points[:, 1:])
    loader = DataLoader(data, batch_size=5, sampler=DistributedSampler(data))
    model = DDP(nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    phase(model, opt, loader, 0, 2)
    kept = io.BytesIO()
    torch.save(model.module.state_dict(), kept)
    phase(model, opt, loader, 2, 1)
    if rank == 0:
        kept.seek(0)
        model.module.load_state_dict(torch.load(kept))  # planted: model_wrapping
    phase(model, opt, loader, 3, 1)
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(run, args=(2,), nprocs=2)
