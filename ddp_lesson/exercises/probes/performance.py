"""What the exchange check (``10_performance``) runs in every rank: a DDP step, its all-reduces.

A communication hook (``DistributedDataParallel.register_comm_hook``) sees
every bucket DDP hands to the all-reduce, with its size; it counts them,
then all-reduces them exactly as DDP's default does.
"""

from __future__ import annotations

from typing import TypedDict

import torch

from ... import group
from ...reports import send_typed, sends


class ExchangeReport(TypedDict):
    """What :func:`exchange` sends: the all-reduces of one training step."""

    rank: int
    calls: int
    bytes: int


@sends(ExchangeReport)
def exchange(rank: int, world_size: int, port: int, batch: int, steps: int) -> None:
    """Train ``steps`` steps at a global ``batch``; report the last step's all-reduces."""
    import torch.nn.functional as F
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ...devices import ddp_device_ids
    from ...models import NeuralNetwork

    device = group.join(rank, world_size, port)
    try:
        torch.manual_seed(rank)
        model = DDP(NeuralNetwork().to(device), device_ids=ddp_device_ids(device))
        seen = {"calls": 0, "bytes": 0}

        def counted(state, bucket):
            buffer = bucket.buffer()
            seen["calls"] += 1
            seen["bytes"] += buffer.numel() * buffer.element_size()
            return allreduce_hook(state, bucket)

        model.register_comm_hook(None, counted)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        features = torch.rand(batch // world_size, 64, device=device)
        labels = torch.randint(0, 10, (batch // world_size,), device=device)
        for _ in range(steps):  # DDP may regroup its buckets after the first step
            seen.update(calls=0, bytes=0)
            optimizer.zero_grad()
            F.cross_entropy(model(features), labels).backward()
            optimizer.step()
        send_typed(ExchangeReport(rank=rank, calls=seen["calls"], bytes=seen["bytes"]))
        del model
    finally:
        group.leave()
