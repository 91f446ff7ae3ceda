"""How long launches take: each stage of one, a lesson's launch cell, a new kernel's first.

Every launch here is real and started as the lesson starts it (``mp.spawn``
inside :func:`ddp_lesson.launch.bounded`); a new kernel's first launch runs
as a whole program under :func:`ddp_lesson.launch.run_script`. Each figure is
a median with its minimum and maximum over launches (:mod:`.summaries`).
What the ranks of :func:`startup` run is :func:`.workers.startup_worker`.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from types import ModuleType

import torch

from ..validate import whole_number
from .conditions import quick
from .summaries import summarise
from .workers import startup_worker

#: The phases of a launch, in order, as :func:`startup` names them.
PHASES = (
    "start + import",
    "init_process_group",
    "first DDP()",
    "training",
    "destroy_process_group",
    "exit + join",
)

#: What :func:`startup_worker` reports: the clock at the end of each rank's stage.
_MARKS = ("entered", "joined", "wrapped", "trained", "destroyed")


def startup(
    world_size: int = 2, *, repeats: int = 3, timeout_s: float = 120, warm: bool = False
) -> list[dict]:
    """How long each stage of a small DDP launch takes, seconds, median/min/max over launches.

    ``start + import`` runs from the ``mp.spawn`` call to the ranks entering
    their function (a new interpreter, importing torch and the worker's
    module); ``exit + join`` from the last rank's ``destroy_process_group``
    to ``mp.spawn`` returning. Each stage ends when its slowest rank ends it.

    Args:
        world_size: ranks per launch.
        repeats: launches measured.
        timeout_s: deadline of each launch.
        warm: let the launch fork the ranks from its warm server (what the
            course's launches do) instead of starting fresh interpreters (what
            plain ``mp.spawn`` does); one launch
            before the measured ones starts that server.

    Returns:
        One row per stage in :data:`PHASES` order, plus a ``total`` row.
    """
    import torch.multiprocessing as mp

    from .. import launch
    from ..devices import threads_per_rank

    whole_number("repeats", repeats, minimum=1)
    threads = None if torch.cuda.device_count() else threads_per_rank(world_size)
    spans: dict[str, list[float]] = {name: [] for name in (*PHASES, "total")}
    for attempt in range(repeats + warm):
        with launch.bounded(
            world_size, timeout_s=timeout_s, threads_per_rank=threads, warm=warm
        ) as run:
            spawned = time.time()
            mp.spawn(startup_worker, args=(world_size, run.port), nprocs=world_size)
            returned = time.time()
        if warm and attempt == 0:
            continue  # this one started the server
        # each stage ends when its slowest rank ends it; the next starts there
        marks = [spawned, *(max(r[key] for r in run.reports) for key in _MARKS), returned]
        for name, start, end in zip(PHASES, marks[:-1], marks[1:], strict=True):
            spans[name].append(end - start)
        spans["total"].append(returned - spawned)
    return [{"stage": name, **summarise(values)} for name, values in spans.items()]


def stage_launches(
    stages: Sequence[str] = ("02", "03", "04", "05", "06"),
    *,
    repeats: int | None = None,
    warm: bool = True,
    timeout_s: float = 120,
) -> list[dict]:
    """Seconds a lesson stage's launch cell takes, as the notebook runs it; one row per stage.

    Each stage's worker is written from its notebook's ``%%writefile`` cell
    into a folder of its own and launched exactly as the notebook's launch
    cell does (``mp.spawn`` inside ``launch.bounded``, one epoch). One
    launch first starts the warm server (it is paid once per kernel and
    timed by :func:`first_launch`).

    Returns:
        Rows with ``stage``, ``median``, ``min``, ``max`` (seconds).
    """
    import importlib

    from ..devices import plan

    if repeats is None:
        repeats = 1 if quick() else 5
    whole_number("repeats", repeats, minimum=1)
    world_size = plan().world_size
    folder = _stage_workers(stages)
    rows = []
    with _importing_workers_from(folder):
        for n, stage in enumerate(stages):
            worker = importlib.import_module(f"workers.stage_{stage}")
            seconds = _launch_cell_seconds(worker, n, world_size, repeats, warm, timeout_s)
            rows.append({"stage": stage, **summarise(seconds)})
    return rows


def _stage_workers(stages: Sequence[str]) -> Path:
    """Write each stage's worker into ``workers/`` of a new temporary folder; return the folder."""
    from .. import sources

    folder = Path(tempfile.mkdtemp(prefix="ddp-lesson-stages-"))
    (folder / "workers").mkdir()
    (folder / "workers" / "__init__.py").write_text("")
    for stage in stages:
        (folder / "workers" / f"stage_{stage}.py").write_text(sources.worker_source(stage))
    return folder


@contextlib.contextmanager
def _importing_workers_from(folder: Path) -> Iterator[None]:
    """Make ``workers`` import from ``folder`` inside the block, then remove the folder."""
    # a `workers` package imported before (the notebook's own folder, say) would
    # shadow this folder's: set it aside while measuring, and put it back after
    aside = {m: sys.modules.pop(m) for m in list(sys.modules) if m.split(".")[0] == "workers"}
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))
        for name in [m for m in sys.modules if m.split(".")[0] == "workers"]:
            del sys.modules[name]
        sys.modules.update(aside)
        shutil.rmtree(folder, ignore_errors=True)


def _launch_cell_seconds(
    worker: ModuleType, n: int, world_size: int, repeats: int, warm: bool, timeout_s: float
) -> list[float]:
    """Time ``repeats`` launches of the ``n``-th stage's worker as its notebook's cell runs them."""
    import torch.multiprocessing as mp

    from .. import launch

    seconds = []
    for attempt in range(repeats + (n == 0 and warm)):
        started = time.perf_counter()
        # (what the ranks print is the lesson's, not the measurement's)
        with contextlib.redirect_stdout(io.StringIO()):
            with launch.bounded(world_size, timeout_s=timeout_s, warm=warm) as run:
                mp.spawn(worker.main, args=(world_size, run.port), nprocs=world_size)
        if not (n == 0 and warm and attempt == 0):  # that one started the server
            seconds.append(time.perf_counter() - started)
    return seconds


#: What ``first_launch``'s script prints before the seconds its launch took.
_LAUNCHED_IN = "SECONDS"


def first_launch(
    stage: str = "05", *, repeats: int | None = None, timeout_s: float = 300
) -> dict[str, float]:
    """Seconds of a new kernel's first launch of a stage, server start included.

    Each repeat runs a new Python process that imports the course and
    launches the stage's worker once, as a notebook's first launch cell
    does; that process runs as a whole program under
    :func:`ddp_lesson.launch.run_script`, which stops it and everything it
    started at ``timeout_s``. The time counted runs from entering
    ``launch.bounded`` to leaving it.

    Args:
        stage: the lesson stage whose worker is launched.
        repeats: new processes, one launch each (default 3; 1 in a quick run).
        timeout_s: deadline of each process.

    Returns:
        ``median``, ``min`` and ``max`` in seconds.

    Raises:
        LaunchError, LaunchTimeout: as :func:`ddp_lesson.launch.run_script`.
    """
    from .. import launch, sources

    if repeats is None:
        repeats = 1 if quick() else 3
    whole_number("repeats", repeats, minimum=1)
    with tempfile.TemporaryDirectory(prefix="ddp-lesson-first-") as folder:
        (Path(folder) / "workers").mkdir()
        (Path(folder) / "workers" / "__init__.py").write_text("")
        (Path(folder) / "workers" / f"stage_{stage}.py").write_text(sources.worker_source(stage))
        script = (
            "import sys, time\n"
            "import torch.multiprocessing as mp\n"
            "from ddp_lesson import devices, launch\n"
            f"import workers.stage_{stage} as worker\n"
            "if __name__ == '__main__':\n"
            "    world_size = devices.plan().world_size\n"
            "    started = time.perf_counter()\n"
            "    with launch.bounded(world_size, timeout_s=120) as run:\n"
            "        mp.spawn(worker.main, args=(world_size, run.port), nprocs=world_size)\n"
            f"    print({_LAUNCHED_IN!r}, time.perf_counter() - started)\n"
        )
        (Path(folder) / "first.py").write_text(script)
        seconds = []
        for _ in range(repeats):
            out = launch.run_script(Path(folder) / "first.py", timeout_s=timeout_s)
            seconds.append(float(out.rsplit(_LAUNCHED_IN, 1)[-1].split()[0]))
    return summarise(seconds)
