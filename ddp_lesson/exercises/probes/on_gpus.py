"""Rank-side probes that run an answer's collectives on stand-in GPUs (13's and 18's exercises).

Each rank joins the group on the CPU, then calls the learner's function
as on a machine with a GPU per rank: it is given ``cuda:rank`` (a
stand-in, :func:`.launchers.simulate_gpus`), the model it evaluates is
on that GPU, and :class:`.gpu_tensors.StandInGPUs` marks what would be on
it. Each collective the answer calls is reported with the GPU of every
tensor handed to it (:func:`.gpu_tensors.note_collectives`).
"""

from __future__ import annotations

import contextlib
from typing import TypedDict

import torch

from ... import group
from ...reports import send_typed, sends
from ...sources import load
from . import gpu_tensors
from .launchers import simulate_gpus
from .practice import EVALUATE_CASES, WatchedTestSet, trained_model
from .stopping import stop_caller


class HandedReport(TypedDict):
    """What the probes here send: the rank's stand-in GPU and the collectives it called."""

    rank: int
    given: str  # the stand-in GPU the answer was given
    handed: list[gpu_tensors.Handed]


@contextlib.contextmanager
def _given_a_gpu(rank: int, world_size: int, port: int, path: str):
    """``with _given_a_gpu(...) as (worker, given):`` the learner's file, and ``cuda:rank``.

    The collectives the file calls are noted from before it loads; the rank
    joins the group on the CPU, then sees stand-in GPUs; when the block
    ends well, the rank reports what the file handed to each collective.
    """
    handed = gpu_tensors.note_collectives(path)
    gpu_tensors.as_on_gpus(path, rank)  # (before the file imports get_backend, say)
    worker = load(path)
    group.join(rank, world_size, port)
    try:
        simulate_gpus(world_size)
        given = torch.device(f"cuda:{rank}")
        yield worker, given
        send_typed(HandedReport(rank=rank, given=str(given), handed=list(handed)))
    finally:
        group.leave()


@sends(HandedReport)
def stop_on_gpus(rank: int, world_size: int, port: int, path: str) -> None:
    """Call the learner's ``stop_everywhere`` twice (flag down, then up on the last rank)."""
    with _given_a_gpu(rank, world_size, port, path) as (worker, given):
        stop = stop_caller(worker.stop_everywhere, given)
        with gpu_tensors.StandInGPUs(str(given)):
            for step in range(2):
                stop(step == 1 and rank == world_size - 1)


@sends(HandedReport)
def evaluate_on_gpus(rank: int, world_size: int, port: int, path: str) -> None:
    """Call the learner's ``evaluate`` with the model on a stand-in ``cuda:rank``."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    from ...data import digits

    used, steps = EVALUATE_CASES[-1]
    features, labels = digits("test").tensors
    with _given_a_gpu(rank, world_size, port, path) as (worker, given):
        model = DDP(trained_model(steps))
        gpu_tensors.place([*model.parameters(), *model.buffers()], str(given))
        with gpu_tensors.StandInGPUs(str(given)):
            worker.evaluate(model, WatchedTestSet(features[:used], labels[:used]), rank,
                            world_size, given)  # fmt: skip
