"""Rank-side probes for the checks of the lesson's stages (notebooks 02 to 06)."""

from __future__ import annotations

import os
from typing import TypedDict

import torch

from ... import group
from ...reports import send_report
from ...sources import load


class RankReport(TypedDict):
    """What :func:`report_rank` sends."""

    rank: int
    world_size: int
    pid: int


class GroupReport(TypedDict):
    """What :func:`process_group` sends."""

    rank: int
    initialized: bool
    rank_in_group: int | None
    size_of_group: int | None
    backend: str | None
    total: float
    after_cleanup: bool


class SamplerReport(TypedDict):
    """What :func:`sampler` sends."""

    rank: int
    orders: list[list[int]]
    sampler: str


class WrapReport(TypedDict):
    """What :func:`model_wrap` sends."""

    rank: int
    wrapper: str
    device: str
    params: torch.Tensor
    grads: torch.Tensor


def _send(report: dict) -> None:
    send_report(report["rank"], **{k: v for k, v in report.items() if k != "rank"})


def report_rank(rank: int, world_size: int, port: int) -> None:
    """Report this process's rank, the world size it was given, and its pid."""
    _send(RankReport(rank=rank, world_size=world_size, pid=os.getpid()))


def process_group(rank: int, world_size: int, port: int, path: str) -> None:
    """Run the learner's ``ddp_setup`` and ``cleanup`` and report the group's state."""
    import torch.distributed as dist

    worker = load(path)
    worker.ddp_setup(rank, world_size, port)
    up = dist.is_initialized()
    backend = str(dist.get_backend()) if up else None
    rank_in_group = dist.get_rank() if up else None
    size_of_group = dist.get_world_size() if up else None
    total = torch.tensor([rank + 1.0])
    if up:
        total = total.to(torch.device("cuda", rank) if backend == "nccl" else "cpu")
        dist.all_reduce(total)
    worker.cleanup()
    _send(
        GroupReport(
            rank=rank,
            initialized=up,
            rank_in_group=rank_in_group,
            size_of_group=size_of_group,
            backend=backend,
            total=total.item(),
            after_cleanup=dist.is_initialized(),
        )
    )


def sampler(rank: int, world_size: int, port: int, path: str, size: int, epochs: int) -> None:
    """Build the learner's loader over ``numbered(size)`` and report each epoch's indices."""
    from ...data import numbered

    worker = load(path)
    group.join(rank, world_size, port)
    try:
        train_loader = worker.make_loader(numbered(size))
        orders = worker.epoch_orders(train_loader, epochs)
        _send(
            SamplerReport(
                rank=rank,
                orders=[[int(i) for i in o] for o in orders],
                sampler=type(getattr(train_loader, "sampler", None)).__name__,
            )
        )
    finally:
        group.leave()


def model_wrap(rank: int, world_size: int, port: int, path: str) -> None:
    """Wrap a model with the learner's ``wrap`` and report weights and gradients."""
    import torch.nn.functional as F

    from ...data import digits
    from ...models import NeuralNetwork, flat_gradients, flat_parameters

    worker = load(path)
    device = group.join(rank, world_size, port)
    try:
        torch.manual_seed(rank)  # every rank starts from different weights
        model = worker.wrap(NeuralNetwork(), rank, device)
        features, labels = digits("train")[rank * 32 : (rank + 1) * 32]  # a different batch each
        F.cross_entropy(model(features.to(device)), labels.to(device)).backward()
        _send(
            WrapReport(
                rank=rank,
                wrapper=type(model).__name__,
                device=str(next(model.parameters()).device),
                params=flat_parameters(model),
                grads=flat_gradients(model),
            )
        )
        del model
    finally:
        group.leave()
