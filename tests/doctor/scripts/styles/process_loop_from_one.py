"""Workers numbered for the log, from 1, each started with multiprocessing."""

import multiprocessing
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def work(number, count, port):
    dist.init_process_group("gloo", rank=number, world_size=count,
                            init_method=f"tcp://127.0.0.1:{port}")
    model = DDP(nn.Linear(2, 1))
    model(torch.ones(2, 2)).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    port = int(os.environ.get("MASTER_PORT", 29832))
    context = multiprocessing.get_context("spawn")
    team = [context.Process(target=work, args=(n, 2, port))  # planted: spawning
            for n in range(1, 3)]
    for member in team:
        member.start()
    for member in team:
        member.join()
