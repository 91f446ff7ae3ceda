"""Workers that go wrong in one specific way each."""

import os
import time
from datetime import timedelta

import torch
from torch.distributed import all_reduce, init_process_group


def _join(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=60))


def raises(rank, world_size, port):
    if rank == 1:
        raise ValueError("rank 1 cannot continue")
    _join(rank, world_size, port)


def never_arrives(rank, world_size, port):
    _join(rank, world_size, port)
    if rank == 1:
        time.sleep(3600)
    all_reduce(torch.ones(1))


def exits_early(rank, world_size, port):
    if rank == 1:
        os._exit(3)
    _join(rank, world_size, port)


def prints(rank, world_size, port):
    print(f"hello from rank {rank}", flush=True)
