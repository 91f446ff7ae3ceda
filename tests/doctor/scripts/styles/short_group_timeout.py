"""The first process prepares a vocabulary file while the others wait at a barrier; the
group is given a short timeout so that a lost process is noticed quickly."""

import os
import tempfile
import time
from datetime import timedelta

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def prepare(path):
    time.sleep(4)  # the slow part: building the vocabulary
    with open(path, "w") as out:
        out.write("a b c d\n")


def run(rank, world_size, folder):
    dist.init_process_group("gloo", rank=rank, world_size=world_size,  # planted: process_group
                            init_method=f"tcp://127.0.0.1:{os.environ['MASTER_PORT']}",
                            timeout=timedelta(seconds=2))
    vocabulary = os.path.join(folder, "vocabulary.txt")
    if rank == 0:
        prepare(vocabulary)
    dist.barrier()
    with open(vocabulary) as words:
        size = len(words.read().split())
    model = DDP(nn.Embedding(size, 3))
    model(torch.tensor([0, 1])).sum().backward()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("MASTER_PORT", "29830")
    with tempfile.TemporaryDirectory() as folder:
        mp.spawn(run, args=(2, folder), nprocs=2)
