"""Style: gradient accumulation over pairs of micro-batches with the condition turned
round: the first micro-batch of each pair is exchanged, the second (the one the step
follows) runs inside no_sync(), so every step uses gradients part averaged, part the
rank's own. Planted fault: model_wrapping (the no_sync around the last micro-batch)."""
import contextlib
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

PAIR = 2


def steps(rank, world_size):
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29574")
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    net = DDP(nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 1)))
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    draws = torch.Generator().manual_seed(100 + rank)
    for micro in range(3 * PAIR):
        x = torch.randn(8, 3, generator=draws)
        closing = micro % PAIR == PAIR - 1
        hold = net.no_sync() if closing else contextlib.nullcontext()
        with hold:  # planted: model_wrapping
            loss = (net(x) - x.sum(dim=1, keepdim=True)).pow(2).mean() / PAIR
            loss.backward()
        if closing:
            opt.step()
            opt.zero_grad()
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(steps, args=(2,), nprocs=2)
