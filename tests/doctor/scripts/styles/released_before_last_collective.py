"""Rank 0 writes the weights and hands the group back in one tidy helper, and every rank then
gathers its final loss for the summary: by then rank 0 has no group to gather with."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def wrap_up(model, rank):
    if rank == 0:
        _ = {k: v.clone() for k, v in model.module.state_dict().items()}  # (kept, as a save)
        dist.destroy_process_group()  # planted: teardown


def fit(rank, world):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29847", rank=rank,
                            world_size=world)
    model = DDP(nn.Linear(5, 2))
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(4):
        opt.zero_grad()
        loss = model(torch.randn(6, 5)).pow(2).mean()
        loss.backward()
        opt.step()
    wrap_up(model, rank)
    losses = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(losses, loss.detach().reshape(1))
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(fit, args=(2,), nprocs=2)
