"""Callbacks run at the end of training; the one that saves the model waits for the others.

The "end" callback meets the other ranks at a
barrier, but only rank 0 runs the callbacks; rank 1 releases the group and
leaves.
"""

import os
import tempfile

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

CALLBACKS = {}


def on(event):
    def register(fn):
        CALLBACKS.setdefault(event, []).append(fn)
        return fn

    return register


@on("end")
def save_weights(state):
    torch.save(state["model"].module.state_dict(), os.path.join(state["out"], "final.pt"))
    dist.barrier()  # planted: process_group


def fire(event, state):
    if state["rank"] == 0:
        for fn in CALLBACKS.get(event, []):
            fn(state)


def run(rank, world_size, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    torch.manual_seed(0)
    model = DDP(nn.Linear(6, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(rank)
    for _ in range(4):
        x = torch.randn(8, 6, generator=g)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    fire("end", {"rank": rank, "model": model, "out": out})
    dist.destroy_process_group()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as out:
        mp.spawn(run, args=(2, int(os.environ.get("MASTER_PORT", 29821)), out), nprocs=2)
