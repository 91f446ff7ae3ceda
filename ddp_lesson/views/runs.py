"""What the views' real launches run in every rank, and what each rank reports.

The views (:mod:`ddp_lesson.views`) draw from these reports: who each
process is, which indices a sampler really handed out, how gradients and
parameters compare across ranks with and without DDP.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import TypedDict

import torch

from .. import group
from ..reports import send_progress, send_report


class IdentityReport(TypedDict):
    """What :func:`identity` sends."""

    rank: int
    world_size: int
    rank_in_group: int
    device: str
    backend: str
    pid: int


class PartitionReport(TypedDict):
    """What :func:`partition` sends: the indices of every epoch iterated."""

    rank: int
    epochs: list[int]
    orders: list[list[int]]
    num_replicas: int
    sampler_rank: int


class SyncReport(TypedDict):
    """What :func:`sync_check` sends: per step, per-parameter norms and cross-rank gaps."""

    rank: int
    device: str
    backend: str
    names: list[str]
    own_norms: list[list[float]]
    synced_norms: list[list[float]]
    plain_norms: list[list[float]]
    own_gap: list[float]
    synced_gap: list[float]
    plain_gap: list[float]
    ddp_param_gap: list[float]
    plain_param_gap: list[float]


def _send(report: dict) -> None:
    send_report(report["rank"], **{k: v for k, v in report.items() if k != "rank"})


def identity(rank: int, world_size: int, port: int) -> None:
    """Join the group and report who this process is: rank, device, backend, pid."""
    import torch.distributed as dist

    device = group.join(rank, world_size, port)
    try:
        _send(
            IdentityReport(
                rank=rank,
                world_size=dist.get_world_size(),
                rank_in_group=dist.get_rank(),
                device=str(device),
                backend=str(dist.get_backend()),
                pid=os.getpid(),
            )
        )
    finally:
        group.leave()


def partition(
    rank: int,
    world_size: int,
    port: int,
    size: int,
    epochs: list[int],
    shuffle: bool,
    seed: int,
    drop_last: bool,
    set_epoch: bool,
) -> None:
    """Iterate a loader over ``numbered(size)`` in the given epochs and report the indices.

    The sampler is built the lesson's way, from the process group
    (``DistributedSampler(dataset)`` finds ``num_replicas`` and ``rank``
    itself), so the report shows what a real rank really iterated. Only the
    epochs asked for are iterated: the order of epoch ``e`` depends on
    ``set_epoch(e)`` alone, not on the epochs before it.
    """
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    from ..data import numbered

    group.join(rank, world_size, port)
    try:
        dataset = numbered(size)
        train_sampler = DistributedSampler(dataset, shuffle=shuffle, seed=seed, drop_last=drop_last)
        loader = DataLoader(dataset, batch_size=4, sampler=train_sampler)
        orders = []
        for n, epoch in enumerate(epochs):
            if set_epoch:
                train_sampler.set_epoch(epoch)
            orders.append([int(i) for (batch,) in loader for i in batch])
            send_progress(rank, n + 1, len(epochs))
        _send(
            PartitionReport(
                rank=rank,
                epochs=list(epochs),
                orders=orders,
                num_replicas=train_sampler.num_replicas,
                sampler_rank=train_sampler.rank,
            )
        )
    finally:
        group.leave()


def sync_check(rank: int, world_size: int, port: int, steps: int) -> None:
    """Train two copies of one model side by side, one wrapped in DDP, one not.

    Both start from the same weights on every rank (seed 0), so any
    difference between ranks comes from their different batches. Each step
    records, per parameter, the norm of the gradient computed from this
    rank's batch alone (``no_sync``), after DDP's all-reduce, and of the
    unwrapped copy; and, across ranks, the largest difference of gradients
    and of parameters (measured with all-reduce MAX and MIN).
    """
    device = group.join(rank, world_size, port)
    try:
        plain, ddp, optimizers = _twin_models(device)
        names = [name for name, _ in plain.named_parameters()]
        batches = _digit_batches()
        record: dict[str, list] = {key: [] for key in _SERIES}
        for step, (features, labels) in zip(range(steps), batches, strict=False):
            features, labels = features.to(device), labels.to(device)
            _sync_step(ddp, plain, optimizers, features, labels, record)
            send_progress(rank, step + 1, steps)
        import torch.distributed as dist

        _send(
            SyncReport(
                rank=rank,
                device=str(device),
                backend=str(dist.get_backend()),
                names=names,
                **record,
            )
        )
        del ddp, plain, optimizers
    finally:
        group.leave()


#: The lists :func:`sync_check` fills, one entry per step (see :class:`SyncReport`).
_SERIES = (
    "own_norms",
    "synced_norms",
    "plain_norms",
    "own_gap",
    "synced_gap",
    "plain_gap",
    "ddp_param_gap",
    "plain_param_gap",
)


def _twin_models(device: torch.device) -> tuple:
    """Build the lesson's model twice from seed 0, one wrapped in DDP, each with its SGD."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ..devices import ddp_device_ids
    from ..models import NeuralNetwork

    torch.manual_seed(0)  # the same starting weights on every rank
    plain = NeuralNetwork().to(device)
    ddp = DDP(NeuralNetwork().to(device), device_ids=ddp_device_ids(device))
    ddp.module.load_state_dict(plain.state_dict())
    optimizers = {
        "plain": torch.optim.SGD(plain.parameters(), lr=0.1),
        "ddp": torch.optim.SGD(ddp.parameters(), lr=0.1),
    }
    return plain, ddp, optimizers


def _digit_batches() -> Iterator:
    """Build this rank's loader of the digits' training split and iterate it without end."""
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    from ..data import digits

    train = digits("train")
    train_sampler = DistributedSampler(train, seed=0)
    loader = DataLoader(train, batch_size=32, sampler=train_sampler)
    return _epochs(loader, train_sampler)


def _epochs(loader, train_sampler) -> Iterator:
    """Yield the loader's batches epoch after epoch, telling the sampler each new epoch."""
    epoch = 0
    while True:
        train_sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def _grad_norms(model: torch.nn.Module) -> list[float]:
    """The norm of each parameter's gradient, of the module inside DDP or of a plain one."""
    module = getattr(model, "module", model)
    return [float(p.grad.norm()) for p in module.parameters()]


def _sync_step(ddp, plain, optimizers: dict, features, labels, record: dict) -> None:
    """Train one step of both copies on one batch and add what it showed to ``record``."""
    import torch.nn.functional as F

    from ..models import flat_gradients, flat_parameters

    # this rank's own gradient: DDP skips its all-reduce inside no_sync
    optimizers["ddp"].zero_grad()
    with ddp.no_sync():
        F.cross_entropy(ddp(features), labels).backward()
    record["own_norms"].append(_grad_norms(ddp))
    record["own_gap"].append(group.across_ranks(flat_gradients(ddp)))
    # the same batch again, this time synchronised
    optimizers["ddp"].zero_grad()
    F.cross_entropy(ddp(features), labels).backward()
    record["synced_norms"].append(_grad_norms(ddp))
    record["synced_gap"].append(group.across_ranks(flat_gradients(ddp)))
    # the unwrapped copy
    optimizers["plain"].zero_grad()
    F.cross_entropy(plain(features), labels).backward()
    record["plain_norms"].append(_grad_norms(plain))
    record["plain_gap"].append(group.across_ranks(flat_gradients(plain)))
    for optimizer in optimizers.values():
        optimizer.step()
    record["ddp_param_gap"].append(group.across_ranks(flat_parameters(ddp)))
    record["plain_param_gap"].append(group.across_ranks(flat_parameters(plain)))
