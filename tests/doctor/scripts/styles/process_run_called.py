"""A small launcher object that keeps its processes in a dict and "runs" them: run() is the
method a started process calls, so nothing is started and the first rank works alone."""

from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def train(rank, world):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29857", rank=rank,
                            world_size=world, timeout=timedelta(seconds=20))
    model = DDP(nn.Linear(2, 1))
    model(torch.ones(2, 2)).sum().backward()
    dist.destroy_process_group()


class Launcher:
    def __init__(self, world):
        context = mp.get_context("spawn")
        self.procs = {r: context.Process(target=train, args=(r, world)) for r in range(world)}

    def go(self):
        for proc in self.procs.values():
            proc.run()  # planted: spawning
        for proc in self.procs.values():
            if proc.pid is not None:
                proc.join()


if __name__ == "__main__":
    Launcher(2).go()
