"""Command-line options for a run over several machines, with defaults from the cluster.

The defaults describe two machines of two processes each; run here, on
one machine with its defaults, the group counts two machines.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def options():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nnodes", type=int, default=2)
    parser.add_argument("--procs-per-node", type=int, default=2)
    parser.add_argument("--node-rank", type=int, default=0)
    parser.add_argument("--port", type=int, default=int(os.environ.get("MASTER_PORT", 29822)))
    return parser.parse_args()


def fit(local_rank, opts):
    total = opts.nnodes * opts.procs_per_node  # planted: process_group
    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{opts.port}",
        rank=opts.node_rank * opts.procs_per_node + local_rank,
        world_size=total,
    )
    model = DDP(nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(4, 3)).sum().backward()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    opts = options()
    mp.spawn(fit, args=(opts,), nprocs=opts.procs_per_node)
