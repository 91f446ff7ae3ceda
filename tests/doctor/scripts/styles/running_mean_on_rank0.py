"""Polyak averaging by hand: the running mean of the weights is kept by the logging rank,
and every rank restarts each round from "the" mean, which on the others never moved."""

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def worker(rank, world):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29849", rank=rank,
                            world_size=world)
    torch.manual_seed(1)
    net = DDP(nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)))
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    mean = [p.detach().clone() for p in net.parameters()]
    seen = 1
    for _round in range(3):
        for _ in range(2):
            opt.zero_grad()
            net(torch.randn(16, 4)).pow(2).mean().backward()
            opt.step()
            if rank == 0:
                seen += 1
                for m, p in zip(mean, net.parameters(), strict=True):
                    m += (p.detach() - m) / seen
        with torch.no_grad():
            for p, m in zip(net.parameters(), mean, strict=True):
                p.copy_(m)  # planted: model_wrapping
    dist.destroy_process_group()


if __name__ == "__main__":
    mp.spawn(worker, args=(2,), nprocs=2)
