"""Style: a warm-up schedule advanced inside the main process's logging branch, so only
rank 0's learning rate changes; from the second step the ranks' optimisers differ.
Planted fault: model_wrapping (the scheduler stepped on one rank)."""
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def fit(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29580")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.25, total_iters=3)
    draws = torch.Generator().manual_seed(rank)
    for step in range(3):
        x = torch.randn(8, 2, generator=draws)
        opt.zero_grad()
        loss = (model(x) - x.prod(dim=1, keepdim=True)).pow(2).mean()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}")
            warm.step()  # planted: model_wrapping
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(fit, args=(2,), nprocs=2)
