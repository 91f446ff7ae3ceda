"""Each rank runs a small watcher thread that logs progress; rank 0 stops its watcher at
the end, for the final log line."""

import os
import threading

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


class Watcher(threading.Thread):
    def __init__(self):
        super().__init__(name="watcher")
        self.done = threading.Event()

    def run(self):
        while not self.done.wait(0.2):
            pass


def train(rank, world_size):
    dist.init_process_group("gloo", rank=rank, world_size=world_size,
                            init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}")
    watcher = Watcher()
    watcher.start()  # planted: teardown
    model = DDP(nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 3)).sum().backward()
        opt.step()
    dist.destroy_process_group()
    if rank == 0:
        watcher.done.set()
        watcher.join()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_PORT", "29833")
    mp.spawn(train, args=(2,), nprocs=2)
