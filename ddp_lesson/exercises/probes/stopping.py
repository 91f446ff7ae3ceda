"""Rank-side probe for the exercise of 18_stopping_and_resizing: a stop flag every rank shares.

The probe calls the learner's ``stop_everywhere(stop_here, device)`` at every step
of a short loop on every rank, whatever it returns, so that the ranks keep
calling it the same number of times; each rank's own flag goes up at a
step the case sets (or never) and stays up. What the answer returned at
each step is reported, and the check compares where each rank would
have stopped with where the reference stops: at the first step any rank
raised its flag.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TypedDict

import torch

from ... import group
from ...reports import send_typed, sends
from ...sources import load

#: Steps of the probe's loop.
STEPS = 6


def cases(world_size: int) -> list[list[int | None]]:
    """The step at which each rank raises its flag (``None``: never), one list per case.

    One rank (the last) alone; two ranks at different steps, the later one
    first in rank order; every rank at the same step; none at all.

    >>> cases(3)
    [[None, None, 3], [4, None, 1], [2, 2, 2], [None, None, None]]
    """
    last = world_size - 1
    alone = [3 if rank == last else None for rank in range(world_size)]
    several = [1 if rank == last else None for rank in range(world_size)]
    several[0] = 4 if last > 0 else 1
    return [alone, several, [2] * world_size, [None] * world_size]


def stop_caller(stop_everywhere: Callable, device: torch.device) -> Callable[[bool], object]:
    """``stop_everywhere`` as one-argument call: given ``device`` too where it takes two.

    An answer written for ``stop_everywhere(stop_here)`` alone is still run.
    """
    try:
        named = [
            p for p in inspect.signature(stop_everywhere).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]  # fmt: skip
    except (TypeError, ValueError):
        named = [None, None]
    if len(named) >= 2:
        return lambda stop_here: stop_everywhere(stop_here, device)
    return stop_everywhere


class StopReport(TypedDict):
    """What :func:`stop_flag` sends: per case, what the answer returned at each step."""

    rank: int
    returned: list[list[bool]]


@sends(StopReport)
def stop_flag(rank: int, world_size: int, port: int, path: str) -> None:
    """Call the learner's ``stop_everywhere`` at every step of every case; report the answers."""
    worker = load(path)
    device = group.join(rank, world_size, port)
    try:
        stop = stop_caller(worker.stop_everywhere, device)
        returned = []
        for raise_at in cases(world_size):
            mine = raise_at[rank]
            said = [bool(stop(mine is not None and step >= mine))
                    for step in range(STEPS)]  # fmt: skip
            returned.append(said)
        report = StopReport(rank=rank, returned=returned)
        send_typed(report)
    finally:
        group.leave()
