"""The DDP doctor's entry point: read a file, run it briefly for real, judge each stage.

A faulty DDP script rarely crashes: its processes keep running but stop
acting as one training run. :func:`diagnose` finds out which stage is
responsible, from what a short, bounded, real run on gloo shows
(:mod:`.run`, recorded in every process by :mod:`.probe`): which processes
started, the group they formed, the indices each rank iterated, whether
parameters agree across ranks after a few steps, whether the group was
released, and where a rank raised. The code, read without running it
(:mod:`.read`), explains and locates what the run shows.

:mod:`.judge` turns both into one :class:`~.verdict.StageVerdict` per stage.
Nothing heavier than :mod:`ast` is imported until the file is worth running,
so a file that cannot be diagnosed gets its answer at once.
"""

from __future__ import annotations

import ast
import os
from collections.abc import Sequence

from ..validate import seconds
from .read import WORKER, read
from .verdict import Diagnosis

#: Default deadline for the whole run, in seconds.
TIMEOUT_S = 60


def _literal(value: object) -> object:
    """A command-line argument as a Python literal where it is one ("3" -> 3)."""
    if not isinstance(value, str):
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def diagnose(
    path: str | os.PathLike,
    world_size: int | None = None,
    *,
    timeout_s: float = TIMEOUT_S,
    args: Sequence = (),
) -> Diagnosis:
    """Diagnose the DDP script at ``path``: read it, run it briefly for real, judge each stage.

    The file is started the way it is written to be started:

    * a script whose ``__main__`` block calls ``mp.spawn`` runs as a whole
      (``args`` become its command-line arguments);
    * a script that takes its rank from the environment (``RANK``,
      ``LOCAL_RANK``, ``init_process_group()`` with ``env://``) runs under
      ``torchrun --standalone --nproc-per-node=world_size``;
    * a file that only defines ``main(rank, world_size, *args)`` (the
      lesson's workers) gets it called in ``world_size`` processes.

    Either way the run is bounded by ``timeout_s``, meets on 127.0.0.1
    whatever address or port the script asks for, and leaves no process
    behind. Never raises for a bad file: the result's ``problem`` says what
    is wrong and how to fix it.

    Args:
        path: the learner's Python file.
        world_size: processes to run; defaults to this machine's (see
            :func:`ddp_lesson.devices.plan`).
        timeout_s: deadline for the whole run, in seconds.
        args: what follows ``world_size`` in ``main``'s arguments (worker
            file), or the script's command-line arguments.

    Returns:
        A :class:`Diagnosis`; ``print`` it, or read ``.stages``, ``.faults``,
        ``.failure`` and ``.exit_code``.
    """
    try:
        timeout_s = seconds("timeout", timeout_s)
    except (TypeError, ValueError) as error:
        return Diagnosis(str(path), problem=str(error))
    reading = read(path)
    if reading.problem:
        return Diagnosis(str(path), problem=reading.problem)
    from .judge import import_problem, nothing_checked, verdict
    from .run import Outcome, describe, run_probed

    if reading.unstartable:  # judged from its code alone: nothing to start, no torch
        outcome = Outcome(launch=describe(reading, 0, args), timeout_s=timeout_s)
        return verdict(
            reading, outcome, 0,
            not_run="the file cannot be started as written, so it was not run",
        )  # fmt: skip
    from .. import devices  # torch is imported only once the file is worth running

    try:
        world_size = devices.plan(world_size).world_size
    except (TypeError, ValueError) as error:
        return Diagnosis(str(path), problem=str(error).replace("world_size", "--world-size", 1))
    if reading.mode == WORKER:
        args = tuple(_literal(a) for a in args)
    outcome = run_probed(reading, world_size, timeout_s, args)
    problem = import_problem(reading, outcome)
    if problem:
        return Diagnosis(str(path), problem=problem, ranks=outcome.ranks, output=outcome.output)
    diagnosis = verdict(reading, outcome, world_size)
    diagnosis.output = outcome.output
    problem = nothing_checked(diagnosis, outcome, reading)
    if problem:
        diagnosis.problem = problem
    return diagnosis
