"""Running a learner's file for the doctor: briefly, for real, bounded, every process recorded.

One way to start each launch style, all under one supervised launch
(:mod:`ddp_lesson.launch`): its deadline, its store on 127.0.0.1 (where
every group the file makes meets) and its tree stop.

* ``worker``: the doctor starts ``world_size`` warm processes that call
  ``main(rank, world_size, *args)``;
* ``script``: one warm process runs the file as ``__main__``; the processes
  it starts (``mp.spawn``, ``start_processes``, ``elastic_launch``,
  ``multiprocessing.Process``) are recorded (see :mod:`.start` and
  :mod:`.start_follow`);
* ``torchrun``: ``torchrun --standalone --nproc-per-node=N file args`` (the
  course's loopback-only runner, :func:`ddp_lesson.launch.torchrun_agent`),
  each process it starts forked warm and recorded (:func:`.start.torchrun_rank`).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .read import SCRIPT, TORCHRUN, WORKER, Reading
from .record import Outcome, ProcessRecord, Settings

if TYPE_CHECKING:
    from ..launch import Supervisor

#: Batches of each epoch the run actually uses (every index is still recorded): odd, and
#: not a multiple of a usual accumulation count, so that an epoch's short tail is run too.
BATCHES = 5

#: Seconds a rank waits for the others (joining the group, at a collective).
WAIT_S = 20


def describe(reading: Reading, world_size: int, args: Sequence) -> str:
    """How the doctor starts the file, in words (what :attr:`Outcome.launch` says)."""
    name = reading.path.name
    tail = " ".join([name, *map(str, args)])
    if reading.mode == TORCHRUN:
        return f"torchrun --standalone --nproc-per-node={world_size} {tail}"
    if reading.mode == SCRIPT:
        return f"python {tail}"
    given = ", ".join(["rank", str(world_size), *map(repr, args)])
    from ..reports import counted

    return f"main({given}) in {counted(world_size, 'process', 'processes')} started by the doctor"


def run_probed(reading: Reading, world_size: int, timeout_s: float, args: Sequence) -> Outcome:
    """Run the file as its launch style asks, under the probe; return what it left."""
    import torch

    from .. import devices, launch
    from ..launch import FOLDER_PREFIX

    # imported before the deadline starts: its import is the doctor's time (_start_file uses it)
    from . import start  # noqa: F401

    if reading.mode != TORCHRUN:
        # the server's start is the doctor's own time, not the script's
        launch.warm_up()
    folder = tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-doctor-")
    path = os.path.realpath(reading.path)
    stand_in = not devices.gpus_for(world_size)
    gpus = world_size if (reading.asks_device_count or reading.gpu_branch) and stand_in else 0
    outcome = Outcome(
        launch=describe(reading, world_size, args),
        timeout_s=timeout_s,
        stand_in=stand_in,
        gpus=torch.cuda.device_count(),
    )
    supervisor = None
    quiet = io.StringIO()  # a launch prints what its ranks printed: kept in the outcome instead
    try:
        with contextlib.redirect_stdout(quiet):
            ranks = None if reading.mode == TORCHRUN else world_size
            if reading.mode == SCRIPT:
                ranks = 1  # the script's own process; it starts the rest
            with launch.Supervisor(ranks, timeout_s) as supervisor:
                settings = Settings(
                    folder=folder,
                    file=path,
                    port=supervisor.port,
                    nprocs=world_size if reading.mode != SCRIPT else 0,
                    batches=BATCHES,
                    wait_s=min(WAIT_S, timeout_s),
                    stand_in=stand_in,
                    gpus=gpus,
                )
                _start_file(reading, supervisor, settings, world_size, args)
    except launch.LaunchError as failed:
        outcome.error = failed
    finally:
        _keep_records(outcome, folder)
    if supervisor is not None:
        _take_output(outcome, supervisor)
    _pool_helpers_aside(outcome)
    if outcome.script is not None and outcome.script.spawns:
        outcome.launch += f" (it starts its processes with {outcome.script.spawns[0]['by']})"
    return outcome


def _pool_helpers_aside(outcome: Outcome) -> None:
    """A Pool's workers whose tasks never joined a group (data prepared before the ranks
    start) are the script's helpers, not ranks: leave them, and such a Pool, out."""
    helpers = [
        r for r in outcome.ranks
        if r.ran and r.init is None and r.error is None and r.stop is None
    ]  # fmt: skip
    if not helpers:
        return
    outcome.ranks = [r for r in outcome.ranks if r not in helpers]
    pooled = any(r.ran for r in outcome.ranks)
    if outcome.script is not None and not pooled:
        outcome.script.spawns = [
            s for s in outcome.script.spawns if s.get("by") != "multiprocessing.Pool"
        ]


def _start_file(
    reading: Reading, supervisor: Supervisor, settings: Settings, world_size: int, args: Sequence
) -> None:
    """Start the file's processes under ``supervisor`` in its launch style, and wait for them."""
    from .. import launch
    from ..launch import LOOPBACK, TORCHRUN_ENV, WARM_START_METHOD
    from . import start

    path = settings.file
    if reading.mode == WORKER:
        launch.start(
            start.worker_process,
            args=(settings, world_size, path, tuple(args)),
            nprocs=world_size,
        )
    elif reading.mode == SCRIPT:
        launch.start(start.script_process, args=(settings, path, list(map(str, args))), nprocs=1)
    else:
        flags = [
            "--standalone",
            f"--nproc-per-node={world_size}",
            f"--local-addr={LOOPBACK}",
        ]
        env: dict[str, str | None] = {key: None for key in TORCHRUN_ENV}
        env.update(settings.to_env())
        argv = [sys.executable, "-c", start.AGENT, *flags, "--run-path", WARM_START_METHOD]
        command = supervisor.command([*argv, path, *map(str, args)], env=env)
        supervisor.wait([command])


def _keep_records(outcome: Outcome, folder: str) -> None:
    """Read what the run left in ``folder`` into ``outcome``, then remove the folder."""
    from . import sandbox

    outcome.ranks = _collect(Path(folder) / "ranks")
    scripts = _collect(Path(folder) / "script")
    outcome.script = scripts[0] if scripts else None
    outcome.kept = [p for p in sandbox.written(sandbox.root(folder)) if not _elastic_log(p)]
    sandbox.remove_torch_files(sandbox.root(folder))
    shutil.rmtree(folder, ignore_errors=True)


def _take_output(outcome: Outcome, supervisor: Supervisor) -> None:
    """Copy what the supervised run showed to ``outcome``: its deadline, output and exit codes."""
    outcome.timed_out = supervisor.timed_out
    outcome.output = supervisor.output
    outcome.codes = [c.returncode for c in supervisor.commands]
    if supervisor.commands:
        outcome.output = supervisor.commands[0].output


#: How torch's elastic agent names the folder of its processes' logs, which it makes in
#: the temporary folder (``torch/distributed/elastic/multiprocessing/api.py``).
ELASTIC_LOG_PREFIX = "torchelastic_"


def _elastic_log(path: str) -> bool:
    """A path under the log folder of an elastic agent the script started: torch's, not its."""
    inside = os.path.relpath(path, tempfile.gettempdir())
    return inside.startswith(ELASTIC_LOG_PREFIX) and not inside.startswith("..")


def _collect(folder: Path) -> list[ProcessRecord]:
    from .. import reports

    found = reports.collect(folder) if folder.is_dir() else []
    return [ProcessRecord.from_report(r) for r in found]
