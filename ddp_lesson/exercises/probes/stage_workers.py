"""Rank-side probes for the checks of the lesson's stages (notebooks 02 to 06)."""

from __future__ import annotations

import os
from typing import TypedDict

import torch
from torch.utils.data import TensorDataset

from ... import group
from ...reports import send_typed, sends
from ...sources import load


class RankReport(TypedDict):
    """What :func:`report_rank` sends."""

    rank: int
    world_size: int
    pid: int
    port: int  # the port main was given
    together: bool  # every rank of its world was running while this one waited for them


class GroupReport(TypedDict):
    """What :func:`process_group` sends."""

    rank: int
    initialized: bool
    rank_in_group: int | None
    size_of_group: int | None
    backend: str | None
    total: float
    after_cleanup: bool
    given_port: int  # the port ddp_setup was given
    met_at: int | None  # the port of the store the group met at (None: not a TCP store)


class SamplerReport(TypedDict):
    """What :func:`sampler` sends."""

    rank: int
    orders: list[list[list[int]]]  # per data set, per epoch: the items in the order met
    sampler: str
    # per data set, what its DistributedSampler went through, in order: ("set", epoch) for a
    # set_epoch call, ("pass", epoch) for a pass over it (None: the loader had no such sampler)
    events: list[list[tuple[str, int | str]] | None]
    drop_last: list[dict[str, bool]]  # per data set: the loader's and the sampler's drop_last
    batch_sizes: list[int | None]  # per data set: the loader's batch size (None: none it says)


class WrapReport(TypedDict):
    """What :func:`model_wrap` sends."""

    rank: int
    wrapper: str
    is_ddp: bool  # a DistributedDataParallel, or a subclass of it
    device: str
    params: torch.Tensor
    grads: torch.Tensor
    reference: torch.Tensor  # the reference's gradients: rank 0's start, averaged over ranks


#: Seconds a rank waits for the others of its world to be running too: a start of
#: processes that runs them at once has them all up within seconds, even on a busy
#: machine; one that waits for each to end before the next never does.
TOGETHER_S = 20.0


@sends(RankReport)
def report_rank(rank: int, world_size: int, port: int) -> None:
    """Report this process's rank, the world size it was given, its pid, and whether every
    rank of that world was running at once (as a process group needs them)."""
    try:
        number = int(port)  # ("29500" works where main writes it into MASTER_PORT)
    except (TypeError, ValueError):
        number = -1
    together = _all_running(world_size, number)
    report = RankReport(
        rank=rank, world_size=world_size, pid=os.getpid(), port=number, together=together
    )
    send_typed(report)


#: The environment variable that tells a rank of check_spawn the port its launch hosts.
LAUNCH_PORT_ENV = "DDP_LESSON_CHECK_PORT"


def _all_running(world_size: int, port: int) -> bool:
    """Count this process in at the launch's store, then wait (up to :data:`TOGETHER_S`)
    until ``world_size`` processes have: True when they all have."""
    import socket
    import time
    from datetime import timedelta

    import torch.distributed as dist

    if str(port) != os.environ.get(LAUNCH_PORT_ENV, str(port)):
        return False  # not the launch's store (another program may hold that port): said so
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10))
        running = store.add("exercise/running", 1)
    except (OSError, OverflowError, RuntimeError, TypeError, ValueError):
        return False
    deadline = time.monotonic() + TOGETHER_S
    while running < world_size and time.monotonic() < deadline:
        time.sleep(0.05)
        running = store.add("exercise/running", 0)
    return running >= world_size


#: The environment variable that tells ``init_process_group`` a store is already hosted.
AGENT_STORE = "TORCHELASTIC_USE_AGENT_STORE"


def _unhosted_port(rank: int, port: int) -> int:
    """A port nothing listens on yet, the same on every rank, for the answer's own group.

    The launch hosts a store at ``port`` and tells the ranks so, which is
    how its own ranks join. The process-group exercise is about that very
    step: an answer may host the store itself (rank 0 is its server, as
    ``init_process_group`` makes it without a launch, or as an explicit
    ``TCPStore(..., is_master=rank == 0)`` does), so it is handed a port
    that is still free, found by rank 0 and passed on through the launch's
    store, and the launch's "already hosted" note is taken away.
    """
    import socket
    from datetime import timedelta

    import torch.distributed as dist

    os.environ.pop(AGENT_STORE, None)
    meeting = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=30))
    if rank == 0:
        with socket.socket() as free:
            free.bind(("127.0.0.1", 0))
            meeting.set("exercise_port", str(free.getsockname()[1]))
    return int(meeting.get("exercise_port"))


def _store_port() -> int | None:
    """The port of the TCP store the default group met at, or ``None`` for another store."""
    from torch.distributed import distributed_c10d as c10d

    store = c10d._get_default_store()
    while hasattr(store, "underlying_store"):  # a PrefixStore around the real one
        store = store.underlying_store
    return getattr(store, "port", None)


@sends(GroupReport)
def process_group(rank: int, world_size: int, port: int, path: str) -> None:
    """Run the learner's ``ddp_setup`` and ``cleanup`` and report the group's state."""
    import torch.distributed as dist

    worker = load(path)
    given = _unhosted_port(rank, port)
    worker.ddp_setup(rank, world_size, given)
    up = dist.is_initialized()
    met_at = _store_port() if up else None
    backend = str(dist.get_backend()) if up else None
    rank_in_group = dist.get_rank() if up else None
    size_of_group = dist.get_world_size() if up else None
    total = torch.tensor([rank + 1.0])
    if up:
        total = total.to(torch.device("cuda", rank) if backend == "nccl" else "cpu")
        dist.all_reduce(total)
    worker.cleanup()
    send_typed(
        GroupReport(
            rank=rank,
            initialized=up,
            rank_in_group=rank_in_group,
            size_of_group=size_of_group,
            backend=backend,
            total=total.item(),
            after_cleanup=dist.is_initialized(),
            given_port=given,
            met_at=met_at,
        )
    )


#: What item ``i`` of the sampler probe's ``k``-th data set holds: ``(k + 1) * OFFSET + i``.
#: Numbers that are not the indices themselves, so that lists built without iterating
#: the loader (from the indices alone) show as such.
OFFSET = 100


@sends(SamplerReport)
def sampler(
    rank: int, world_size: int, port: int, path: str, sizes: list[int], epochs: int
) -> None:
    """Build the learner's loader over data sets of each size; report each epoch's items.

    Item ``i`` of the ``k``-th data set holds the number ``(k + 1) * OFFSET + i``.
    """
    worker = load(path)
    group.join(rank, world_size, port)
    try:
        orders, samplers, events, drops, batches = [], [], [], [], []
        for k, size in enumerate(sizes):
            train_loader = worker.make_loader(TensorDataset(torch.arange(size) + (k + 1) * OFFSET))
            distributed = _distributed_sampler(train_loader)
            events.append(_watch_epochs(distributed) if distributed is not None else None)
            drops.append(
                {
                    "loader": bool(getattr(train_loader, "drop_last", False)),
                    "sampler": bool(getattr(distributed, "drop_last", False)),
                }
            )
            got = worker.epoch_orders(train_loader, epochs)
            orders.append([[int(i) for i in o] for o in got])
            samplers.append(type(getattr(train_loader, "sampler", None)).__name__)
            batches.append(_batch_size(train_loader))
        send_typed(
            SamplerReport(
                rank=rank, orders=orders, sampler=samplers[0], events=events, drop_last=drops,
                batch_sizes=batches,
            )
        )  # fmt: skip
    finally:
        group.leave()


def _batch_size(loader: object) -> int | None:
    """The batch size a loader was built with (its own, or its batch sampler's), if it has one."""
    for owner in (loader, getattr(loader, "batch_sampler", None)):
        size = getattr(owner, "batch_size", None)
        if isinstance(size, int):
            return size
    return None


def _distributed_sampler(loader: object) -> object | None:
    """The DistributedSampler a loader draws from (its sampler, or its batch sampler's), if any."""
    from torch.utils.data.distributed import DistributedSampler

    for found in (
        getattr(loader, "sampler", None),
        getattr(getattr(loader, "batch_sampler", None), "sampler", None),
    ):
        if isinstance(found, DistributedSampler):
            return found
    return None


def _watch_epochs(sampler: object) -> list[tuple[str, int | str]]:
    """Note, in the list returned, each set_epoch call on ``sampler`` and each pass over it.

    The sampler's class is swapped for a subclass that notes both (a pass
    is looked up on the class, so a wrapper on the instance would miss it).
    """
    noted: list[tuple[str, int | str]] = []  # (an epoch that is not an int: its repr)
    kind = type(sampler)

    class Watched(kind):
        def set_epoch(self, epoch):
            noted.append(("set", epoch if isinstance(epoch, int) else repr(epoch)))
            return super().set_epoch(epoch)

        def __iter__(self):
            noted.append(("pass", self.epoch if isinstance(self.epoch, int) else repr(self.epoch)))
            return super().__iter__()

    Watched.__name__ = Watched.__qualname__ = kind.__name__
    sampler.__class__ = Watched
    return noted


@sends(WrapReport)
def model_wrap(rank: int, world_size: int, port: int, path: str) -> None:
    """Wrap a model with the learner's ``wrap`` and report weights and gradients."""
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    from ...data import digits
    from ...models import NeuralNetwork, flat_gradients, flat_parameters

    worker = load(path)
    device = group.join(rank, world_size, port)
    try:
        features, labels = digits("train")[rank * 32 : (rank + 1) * 32]  # a different batch each
        features, labels = features.to(device), labels.to(device)
        # the reference: rank 0's starting weights (what DDP broadcasts), each rank's
        # gradient on its own batch, averaged over the ranks
        torch.manual_seed(0)
        plain = NeuralNetwork().to(device)
        F.cross_entropy(plain(features), labels).backward()
        reference = flat_gradients(plain).to(device)
        dist.all_reduce(reference)
        reference /= world_size
        torch.manual_seed(rank)  # every rank starts from different weights
        model = worker.wrap(NeuralNetwork(), rank, device)
        F.cross_entropy(model(features), labels).backward()
        send_typed(
            WrapReport(
                rank=rank,
                wrapper=type(model).__name__,
                is_ddp=isinstance(model, DistributedDataParallel),
                device=str(next(model.parameters()).device),
                params=flat_parameters(model),
                grads=flat_gradients(model),
                reference=reference.cpu(),
            )
        )
        del model
    finally:
        group.leave()
