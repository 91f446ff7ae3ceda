"""Starting and supervising processes: the launch layer, used by every notebook and helper.

The notebooks start ranks exactly as the lesson teaches, inside a bounded
block::

    with launch.bounded(world_size, timeout_s=60) as run:
        mp.spawn(worker.main, args=(world_size, run.port), nprocs=world_size)
    print(run.summary(["rank", "device"]))

One supervisor (:mod:`.supervisor`) owns every process the course starts:
lesson cells, the checks', widgets' and doctor's ranks, whole scripts and
``torchrun``. Its parts: :mod:`.processes` (the process tree and how it is
stopped), :mod:`.capture` (what processes print), :mod:`.ranks` (what every
rank does before its function), :mod:`.errors` (the messages), :mod:`.scripts`
and :mod:`.elastic` (whole programs and ``torchrun``), :mod:`.membership`
(an elastic ``torchrun`` job whose nodes join and leave). What the warm server
imports once is :mod:`ddp_lesson.warm`.
"""

from __future__ import annotations

from collections.abc import Callable

from . import torch_hooks
from .capture import OUTPUT_KEPT_BYTES
from .elastic import LOOPBACK, TORCHRUN_ENV, WARM_START_METHOD, TorchrunRun, torchrun
from .elastic import main as torchrun_agent
from .errors import LaunchError, LaunchInterrupted, LaunchTimeout
from .folders import FOLDER_PREFIX
from .membership import torchrun_resizing
from .notebooks import execute_notebook
from .processes import STOP_GRACE_S
from .processes import descendants as child_processes
from .ranks import pause_after_destroy
from .scripts import run_script
from .supervisor import Supervisor
from .warm_server import warm_up
from .watching import AGENT_STORE_ENV, active


def as_python_u() -> None:
    """Make this process, forked from a warm server, what a fresh ``python -u`` would be.

    For a torchrun worker of the course's own (the doctor's); see
    :func:`.script_main.as_python_u`. (``script_main`` runs as ``python -m``,
    so this package imports it only when asked.)
    """
    from .script_main import as_python_u as fresh

    fresh()


def bounded(
    world_size: int,
    *,
    timeout_s: float = 120,
    threads_per_rank: int | None = None,
    warm: bool = True,
) -> Supervisor:
    """Supervise the ``mp.spawn`` call inside a ``with`` block.

    Inside the block, ``mp.spawn`` starts its ranks through the launch. Each
    rank is forked from a server process that imported torch once (a launch
    takes a fraction of a second instead of seconds), sets itself up for
    the launch, then imports the worker's function by module and name, as
    ``mp.spawn`` does; when the launching process runs a file, each rank
    runs that file's top level again first, as with ``mp.spawn``. Outside a
    launch ``mp.spawn`` is untouched.

    Args:
        world_size: the number of ranks the block will start; checked here,
            so that 0 (what ``torch.cuda.device_count()`` says on a CPU-only
            machine) fails with an explanation instead of starting nothing,
            and again at ``mp.spawn``: a call with another ``nprocs`` fails
            at once, before any rank starts, naming both numbers.
        timeout_s: seconds after which every process still running is
            stopped and :class:`LaunchTimeout` is raised.
        threads_per_rank: torch threads for each rank; defaults to
            :data:`ddp_lesson.devices.THREADS_PER_RANK` (1).
        warm: ``False`` starts every rank as a fresh interpreter, as plain
            ``mp.spawn`` does (seconds per launch; ``make bench``
            measures both).

    Returns:
        A :class:`Supervisor`; ``run.port`` is where the group meets.

    Raises:
        LaunchError: a rank raised or died (the message names it), or
            ``mp.spawn``'s ``nprocs`` is not ``world_size``.
        LaunchTimeout: the block ran past ``timeout_s``.
        LaunchInterrupted: the cell was interrupted; the ranks were stopped.
    """
    return Supervisor(world_size, timeout_s, threads_per_rank, warm=warm)


def start(fn: Callable, args: tuple = (), nprocs: int = 1) -> None:
    """Start ``nprocs`` ranks running ``fn(rank, *args)`` in the running launch, warm.

    What ``mp.spawn`` does inside a ``bounded`` block, for the course's own
    helpers, which call it where ``mp.spawn`` would go.

    Raises:
        RuntimeError: not called inside a ``with launch.bounded(...)`` block.
    """
    run = active()
    if run is None or not run.running:
        raise RuntimeError(
            "launch.start must be called inside `with launch.bounded(...) as run:`, where "
            "mp.spawn would go"
        )
    run.start_ranks(fn, args, nprocs, warm=True)


def run_ranks(
    fn: Callable,
    world_size: int,
    *args: object,
    timeout_s: float = 60,
    watch: Callable[[Supervisor], object] | None = None,
) -> list[dict]:
    """Run ``fn(rank, world_size, port, *args)`` on ``world_size`` warm ranks; return their reports.

    The course's helpers (checks, views, the doctor) call this: every rank
    must report, and one that ends without its report stops the launch
    with a message naming it.

    Args:
        fn: a module-level function that joins the group at ``port`` and reports.
        world_size: how many ranks.
        *args: what follows ``port``.
        timeout_s: the launch's deadline.
        watch: called with the running launch before the ranks start
            (a view follows its progress).

    Raises:
        LaunchError, LaunchTimeout: as :func:`bounded`.
    """
    with Supervisor(world_size, timeout_s, expect_reports=True) as run:
        if watch is not None:
            watch(run)
        run.start_ranks(fn, (world_size, run.port, *args), world_size, warm=True)
    return run.reports


__all__ = [
    "AGENT_STORE_ENV",
    "FOLDER_PREFIX",
    "LOOPBACK",
    "TORCHRUN_ENV",
    "WARM_START_METHOD",
    "as_python_u",
    "pause_after_destroy",
    "torchrun_agent",
    "LaunchError",
    "OUTPUT_KEPT_BYTES",
    "LaunchInterrupted",
    "LaunchTimeout",
    "STOP_GRACE_S",
    "Supervisor",
    "TorchrunRun",
    "bounded",
    "child_processes",
    "execute_notebook",
    "run_ranks",
    "run_script",
    "start",
    "torch_hooks",
    "torchrun",
    "torchrun_resizing",
    "warm_up",
]
