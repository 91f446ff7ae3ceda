"""Joining a launch's process group from the course's own rank-side code.

The lesson's workers write their ``ddp_setup`` in full, in the notebook,
as the lesson teaches it. The course's own rank-side code (the exercises'
probes, the views' runs, the benchmark) does the same steps through this
one function, in the same order.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch

from .devices import device_for

#: Seconds a rank waits for the others to join, or at a collective.
GROUP_TIMEOUT_S = 30


def join(rank: int, world_size: int, port: int) -> torch.device:
    """Join the group of ``world_size`` ranks meeting at 127.0.0.1:``port``; return the device.

    The steps of the lesson's ``ddp_setup``: the main node's address and
    port; this rank's device (``cuda:rank`` when every rank has a GPU,
    selected before the group exists, so NCCL binds the right one); then
    ``init_process_group`` with NCCL on GPUs and gloo otherwise.

    Then a barrier, so that every rank has finished connecting before any
    goes on. ``init_process_group`` can return on one rank while another is
    still completing its side of their connection; a rank whose next line
    raises (an exercise's stub, say) would then close it under the other,
    which fails inside ``init_process_group`` ("Connection closed by peer")
    and can be reported instead of the real error.
    """
    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    device = device_for(rank, world_size)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    backend = "nccl" if device.type == "cuda" else "gloo"
    dist.init_process_group(
        backend, rank=rank, world_size=world_size, timeout=timedelta(seconds=GROUP_TIMEOUT_S)
    )
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
