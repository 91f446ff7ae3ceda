"""What the checkpoint check (``09_checkpoints``) runs in every rank around a learner's functions.

:func:`train` is a short DDP training run (the lesson's model, SGD with
momentum, a ``DistributedSampler`` with ``set_epoch``) that calls the
learner's ``load_checkpoint`` once before the first epoch and
``save_checkpoint`` after every epoch. Around them it watches what a
checkpoint must get right:

* every ``torch.save`` call, per rank (only rank 0 may write); rank 0's
  first one is slowed down, as a busy shared disk would, so that a rank
  that does not wait for it is caught;
* whether the file exists on every rank when ``save_checkpoint`` returns
  after the first epoch (the barrier);
* the ``map_location`` of every ``torch.load`` call;
* the epoch ``load_checkpoint`` says to start at, and the parameters at the end.

With ``crash_after`` rank 1 kills itself (``SIGKILL``) right after that
epoch's checkpoint, as a process killed for memory would be.
"""

from __future__ import annotations

import os
import signal
import time
from typing import TypedDict

import torch

from ... import group
from ...launch import torch_hooks
from ...reports import send_typed, sends
from ...sources import load

#: Images each run trains on (a few steps per epoch per rank).
IMAGES = 256

#: Seconds rank 0's first save is held back.
SLOW_SAVE_S = 0.5


class TrainReport(TypedDict):
    """What :func:`train` sends at the end of a run."""

    rank: int
    start: object
    saves: int
    complete_after_save: bool | None
    map_locations: list[str]
    params: torch.Tensor


#: What this rank's torch.save and torch.load calls did, noted by the hooks the
#: probe puts on them (torch calls those with no argument to carry it).
_seen: dict = {"saves": 0, "loads": []}


def _watch_files(rank: int) -> None:
    real_save, real_load = torch.save, torch.load

    def save(*args, **kwargs):
        _seen["saves"] += 1
        if rank == 0 and _seen["saves"] == 1:
            time.sleep(SLOW_SAVE_S)  # a slow disk: the others must wait for it
        return real_save(*args, **kwargs)

    def load_file(f, map_location=None, *args, **kwargs):
        _seen["loads"].append(repr(map_location))
        return real_load(f, map_location, *args, **kwargs)

    torch_hooks.wrap(torch_hooks.point(torch, "save"), lambda torch_save: save)
    torch_hooks.wrap(torch_hooks.point(torch, "load"), lambda torch_load: load_file)


def _same_everywhere(start: object, world_size: int) -> bool:
    """True when ``load_checkpoint`` returned the same on every rank (a collective: all call it)."""
    import torch.distributed as dist

    starts: list = [None] * world_size
    dist.all_gather_object(starts, repr(start))
    return len(set(starts)) == 1


@sends(TrainReport)
def train(
    rank: int, world_size: int, port: int, path: str, checkpoint: str, epochs: int,
    crash_after: int,
) -> None:  # fmt: skip
    """Train for ``epochs`` with the learner's checkpoint functions; report what happened."""
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, Subset
    from torch.utils.data.distributed import DistributedSampler

    from ...data import digits
    from ...devices import ddp_device_ids
    from ...models import NeuralNetwork, flat_parameters

    _watch_files(rank)
    worker = load(path)
    device = group.join(rank, world_size, port)
    try:
        torch.manual_seed(rank)
        model = DDP(NeuralNetwork().to(device), device_ids=ddp_device_ids(device))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        start = worker.load_checkpoint(model, optimizer, checkpoint, device)
        agreed = _same_everywhere(start, world_size)
        dataset = Subset(digits("train"), range(IMAGES))
        sampler = DistributedSampler(dataset)
        loader = DataLoader(dataset, batch_size=32, sampler=sampler)
        complete = None
        # ranks that would start at different epochs would stop waiting for each other in
        # DDP's all-reduce, with an error that names no line: the check reports their starts
        first = start if isinstance(start, int) and agreed else epochs
        for epoch in range(first, epochs):
            sampler.set_epoch(epoch)
            for features, labels in loader:
                features, labels = features.to(device), labels.to(device)
                loss = F.cross_entropy(model(features), labels)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            worker.save_checkpoint(model, optimizer, epoch, checkpoint)
            if complete is None:
                complete = os.path.exists(checkpoint)
            if epoch == crash_after and rank == 1:
                os.kill(os.getpid(), signal.SIGKILL)  # a crash, right after the save
        report = TrainReport(
            rank=rank,
            start=start if isinstance(start, int | type(None)) else repr(start),
            saves=_seen["saves"],
            complete_after_save=complete,
            map_locations=list(_seen["loads"]),
            params=flat_parameters(model),
        )
        send_typed(report)
        del model
    finally:
        group.leave()
