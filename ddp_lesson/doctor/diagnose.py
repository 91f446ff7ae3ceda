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
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..validate import between
from .read import TORCHRUN, WORKER, Reading, read
from .verdict import Diagnosis

if TYPE_CHECKING:
    from .record import Outcome

#: Default deadline for the whole run, in seconds.
TIMEOUT_S = 60

#: The deadlines the doctor accepts, in seconds: a second up to a day.
TIMEOUT_RANGE_S = (1, 86_400)


def _literal(value: object) -> object:
    """A command-line argument as a Python literal where it is one ("3" -> 3)."""
    if not isinstance(value, str):
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def check_options(
    world_size: object, timeout_s: object, *, names: tuple[str, str] = ("world_size", "timeout_s")
) -> tuple[int | None, float]:
    """Return ``(world_size, timeout_s)`` if the doctor can run with them; otherwise explain.

    The message states the range and how to pass a good value, in the
    spelling of ``names`` (the keywords, or the command line's options).

    Args:
        world_size: processes to run, or ``None`` for the course's default;
            from 1 up to what this machine can run (see
            :func:`ddp_lesson.devices.check_world_size`).
        timeout_s: the run's deadline, between :data:`TIMEOUT_RANGE_S` seconds.
        names: how the two are called where they were given.

    Raises:
        TypeError: one of them is not a number (a whole one, for the world size).
        ValueError: one of them is outside its range.
    """
    size_name, timeout_name = names
    low, high = TIMEOUT_RANGE_S
    timeout_s = between(
        timeout_name, timeout_s, low, high, unit="seconds",
        fix=f"pass e.g. {_spelled(timeout_name, TIMEOUT_S)}",
    )  # fmt: skip
    if world_size is not None:
        import torch  # (only for a world size to check)

        from .. import devices

        cores = devices.usable_cores()
        cpu_most = devices.MAX_CPU_PROCESSES_PER_CORE * cores
        gpus = torch.cuda.device_count()
        most = max(cpu_most, gpus if gpus >= 2 else 0)
        on = (
            f"one process per GPU, {gpus} GPUs here" if most == gpus
            else f"at most {devices.MAX_CPU_PROCESSES_PER_CORE} CPU processes per core, "
            f"{cores} core(s) here"
        )  # fmt: skip
        example = gpus if gpus >= 2 else devices.DEFAULT_CPU_WORLD_SIZE
        fix = f"pass e.g. {_spelled(size_name, example)}"
        if world_size == 0 and not gpus:  # what torch.cuda.device_count() gives here
            fix = f"torch.cuda.device_count() is 0 without a GPU; {fix}"
        world_size = int(between(
            size_name, world_size, 1, most, whole=True, unit=f"({on})", fix=fix
        ))  # fmt: skip
    return world_size, timeout_s


def _spelled(name: str, value: object) -> str:
    """How to give ``name`` the value ``value``: ``--timeout 60`` or ``timeout_s=60``."""
    return f"{name} {value}" if name.startswith("--") else f"{name}={value}"


def diagnose(
    path: str | os.PathLike,
    world_size: int | None = None,
    *,
    timeout_s: float = TIMEOUT_S,
    args: Sequence = (),
) -> Diagnosis:
    """Diagnose the DDP script at ``path``: read it, run it briefly for real, judge each stage.

    The file is started the way it is written to be started, which the run
    finds out:

    * a script (a ``__main__`` block, or top-level code that starts
      processes) runs as Python, as a whole (``args`` become its
      command-line arguments), and the processes it starts are followed:
      ``mp.spawn`` or ``start_processes`` wherever it is called,
      ``elastic_launch``, ``multiprocessing.Process``;
    * a script that, run so, needs a variable torchrun sets (``RANK``,
      ``WORLD_SIZE``, ``init_process_group()`` from ``env://``...) before
      it has started any process runs again under ``torchrun --standalone
      --nproc-per-node=world_size``;
    * a file that only defines ``main(rank, world_size, *args)`` (the
      lesson's workers) gets it called in ``world_size`` processes.

    Either way the run is bounded by ``timeout_s``, meets on 127.0.0.1
    whatever address or port the script asks for, and leaves no process
    behind. Never raises for a bad file: the result's ``problem`` says what
    is wrong and how to fix it. A world size or deadline out of range
    raises before anything runs (see :func:`check_options`).

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

    Raises:
        TypeError: ``world_size`` or ``timeout_s`` is not a number.
        ValueError: ``world_size`` or ``timeout_s`` is outside its range; the
            message states the range.
    """
    _, timeout_s = check_options(None, timeout_s)
    reading = read(path)
    if reading.problem:
        return Diagnosis(str(path), problem=reading.problem)
    world_size, _ = check_options(world_size, timeout_s)  # (torch, for the machine's limit)
    if reading.unstartable:  # judged from its code alone: nothing to start, no torch
        return _judge_unstartable(reading, timeout_s, args)
    return _run_and_judge(reading, str(path), world_size, timeout_s, args)


def _judge_unstartable(reading: Reading, timeout_s: float, args: Sequence) -> Diagnosis:
    """Judge a file that cannot be started as written from its code alone, without running it."""
    from .judge import verdict
    from .record import Outcome
    from .run import describe

    outcome = Outcome(launch=describe(reading, 0, args), timeout_s=timeout_s)
    return verdict(
        reading,
        outcome,
        0,
        not_run="the file cannot be started as written, so it was not run",
    )


def _run_and_judge(
    reading: Reading, path: str, world_size: int | None, timeout_s: float, args: Sequence
) -> Diagnosis:
    """Run the file in the planned number of processes, then judge each stage from the run."""
    from .. import devices  # torch is imported only once the file is worth running

    try:
        world_size = devices.plan(world_size).world_size
    except (TypeError, ValueError) as error:
        return Diagnosis(path, problem=str(error).replace("world_size", "--world-size", 1))
    if reading.mode == WORKER:
        args = tuple(_literal(a) for a in args)
    asks = reading.gpu_branch or reading.asks_device_count
    if not (asks and not devices.gpus_for(world_size)):
        return _judged_run(reading, path, world_size, timeout_s, args)[0]
    return _both_branches(reading, path, world_size, timeout_s, args)


def _both_branches(
    reading: Reading, path: str, world_size: int, timeout_s: float, args: Sequence
) -> Diagnosis:
    """Judge a script that asks whether there are GPUs, or how many, on a machine short of them.

    It runs first as this machine runs it (no stand-ins): a fault there is
    what the learner meets here, and is the diagnosis. Otherwise its GPU
    branch runs on CPU stand-ins, where the device each rank asks for is
    checked; a GPU branch that needs a real GPU leaves the first diagnosis.
    A script that never asks ``is_available()`` (it counts GPUs, and
    is written for them) and fails here only for want of a GPU is judged on
    the stand-ins alone.
    """
    started = time.monotonic()
    asked = reading.gpu_branch, reading.asks_device_count
    reading.gpu_branch = reading.asks_device_count = False
    here, ran_here = _judged_run(reading, path, world_size, timeout_s, args)
    reading.gpu_branch, reading.asks_device_count = asked
    for_gpus_only = not asked[0] and _needs_a_real_gpu(ran_here) is not None
    if ran_here.ranks and not _clean(here) and not for_gpus_only:
        return here
    left = timeout_s - (time.monotonic() - started)
    if left < TIMEOUT_RANGE_S[0]:
        return here
    on_gpus, outcome = _judged_run(reading, path, world_size, left, args)
    needs = _needs_a_real_gpu(outcome)
    if (needs is not None or on_gpus.problem) and ran_here.ranks:
        said, line = needs or (on_gpus.problem, None)
        at = f" at line {line}" if line else ""
        here.notes.append(
            f"no GPU here, and the script's GPU branch could not run on CPU stand-ins ({said}"
            f"{at}): the doctor checked the branch this machine takes; its GPU lines were "
            "not run"
        )
        return here
    if ran_here.ranks:
        on_gpus.notes.append(
            "the branch this machine takes without GPUs ran first and showed no fault; the "
            "stages above are the GPU branch's"
        )
    return on_gpus


def _clean(diagnosis: Diagnosis) -> bool:
    """No problem, no fault and no failure: a run worth a second look on stand-in GPUs."""
    return not (diagnosis.problem or diagnosis.faults or diagnosis.failure is not None)


def _judged_run(
    reading: Reading, path: str, world_size: int, timeout_s: float, args: Sequence
) -> tuple[Diagnosis, Outcome]:
    """Run the file once as read, and judge the run: the diagnosis and what the run left."""
    from .judge import import_problem, nothing_checked, verdict

    outcome = _run_as_written(reading, world_size, timeout_s, args)
    problem = import_problem(reading, outcome)
    if problem:
        return Diagnosis(path, problem=problem, ranks=outcome.ranks, output=outcome.output), outcome
    diagnosis = verdict(reading, outcome, world_size)
    diagnosis.output = outcome.output
    problem = nothing_checked(diagnosis, outcome, reading)
    if problem:
        diagnosis.problem = problem
    return diagnosis, outcome


#: What torch says when code asks for a GPU that a CPU stand-in cannot be.
NEEDS_A_GPU = ("Torch not compiled with CUDA", "Found no NVIDIA driver", "No CUDA GPUs",
               "CUDA driver", "no CUDA-capable device")  # fmt: skip


def _needs_a_real_gpu(outcome: Outcome) -> tuple[str, int | None] | None:
    """The error and its line, if a process raised because only a real GPU would do."""
    for record in [*outcome.ranks, *([outcome.script] if outcome.script else [])]:
        error = record.error or {}
        message = str(error.get("message", ""))
        if any(words in message for words in NEEDS_A_GPU):
            return f"{error.get('type', 'an error')}: {message.splitlines()[0]}", error.get("line")
    return None


def _run_as_written(reading: Reading, world_size: int, timeout_s: float, args: Sequence) -> Outcome:
    """Run the file as read; run it again under torchrun if, as Python, it asked for torchrun."""
    from .record import SELF_LAUNCH, SELF_SUBPROCESS
    from .run import run_probed

    started = time.monotonic()
    outcome = run_probed(reading, world_size, timeout_s, args)
    wanted = outcome.script.torchrun if outcome.script is not None else None
    if wanted and not outcome.ranks:  # run as Python, it asked for torchrun's variables
        reading.mode = TORCHRUN
        if wanted["variable"] in (SELF_LAUNCH, SELF_SUBPROCESS):
            reading.agent_line = wanted["line"]
            reading.self_subprocess = wanted["variable"] == SELF_SUBPROCESS
        left = max(TIMEOUT_RANGE_S[0], timeout_s - (time.monotonic() - started))
        outcome = run_probed(reading, world_size, left, args)
        outcome.timeout_s = timeout_s
    return outcome
