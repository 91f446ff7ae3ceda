"""A launcher object that starts the ranks in the background and reports their pids."""

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def rank_main(rank, world_size, port):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world_size)
    model = DDP(nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(20):
        opt.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()
    dist.destroy_process_group()


class Launcher:
    def __init__(self, world_size):
        self.world_size = world_size
        self.port = int(os.environ.get("MASTER_PORT", 29826))

    def start(self):
        ctx = mp.spawn(rank_main, args=(self.world_size, self.port),  # planted: spawning
                       nprocs=self.world_size, join=False, daemon=True)
        print("started", len(ctx.pids()), "ranks")
        return ctx


if __name__ == "__main__":
    Launcher(2).start()
