"""Joining a launch's process group: the lesson's ``ddp_setup``, and the course's own.

``03_process_group`` writes :func:`ddp_setup` in full where it teaches it;
the lesson's later workers import it from here, word for word the same
(``tests/test_project.py`` keeps the two equal), so a learner reads it
once. The course's own rank-side code (the exercises' probes, the views'
runs, the benchmark) joins through :func:`join`: the same steps, then a
barrier.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
from torch.distributed import init_process_group

from .devices import device_for


def ddp_setup(rank, world_size, port):
    # 1. where the main node listens (often "localhost", "12355")
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    # 2. this rank's device, chosen first: calls naming no device use it
    device = device_for(rank, world_size)  # cuda:rank, or the CPU
    if device.type == "cuda":
        torch.cuda.set_device(device)
    # 3. create the group and join it as `rank` of `world_size`
    backend = "nccl" if device.type == "cuda" else "gloo"
    init_process_group(backend, rank=rank, world_size=world_size,
                       timeout=timedelta(seconds=30))
    return device


def join(rank: int, world_size: int, port: int) -> torch.device:
    """Join the group of ``world_size`` ranks meeting at 127.0.0.1:``port``; return the device.

    The steps of 03's ``ddp_setup``: the main node's address and
    port; this rank's device (``cuda:rank`` when every rank has a GPU,
    selected before the group exists, since calls that name no device use
    the current one); then
    ``init_process_group`` with NCCL on GPUs and gloo otherwise.

    Then a barrier, so that every rank has finished connecting before any
    goes on. ``init_process_group`` can return on one rank while another is
    still completing its side of their connection; a rank whose next line
    raises (an exercise's stub, say) would then close it under the other,
    which fails inside ``init_process_group`` ("Connection closed by peer")
    and can be reported instead of the real error.
    """
    import torch.distributed as dist

    device = ddp_setup(rank, world_size, port)
    dist.barrier(device_ids=[device.index] if device.type == "cuda" else None)
    return device


def across_ranks(tensor: torch.Tensor) -> float:
    """The largest elementwise difference of ``tensor`` between any two ranks of the group.

    Measured with two all-reduces (MAX and MIN) on this rank's device, as
    NCCL requires.
    """
    import torch.distributed as dist

    if dist.get_backend() == "nccl":
        tensor = tensor.to(torch.device("cuda", torch.cuda.current_device()))
    high, low = tensor.clone(), tensor.clone()
    dist.all_reduce(high, op=dist.ReduceOp.MAX)
    dist.all_reduce(low, op=dist.ReduceOp.MIN)
    return float((high - low).max())


def leave() -> None:
    """Free what the rank no longer uses, then release the group (``destroy_process_group``).

    A DDP model still alive when its group goes away can make the rank
    crash at exit; collecting first frees any the caller dropped.
    """
    import gc

    import torch.distributed as dist

    gc.collect()
    if dist.is_initialized():
        dist.destroy_process_group()
