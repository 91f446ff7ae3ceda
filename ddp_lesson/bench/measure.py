"""Measure how fast DDP trains on this machine, and where the time goes.

One set of measurements serves both ``make bench`` (``bench/run.py``) and
``notebooks/10_performance.ipynb``. Everything is measured for real: ranks
are processes started by ``mp.spawn`` inside :func:`ddp_lesson.launch.bounded`,
they meet in a process group (gloo on CPU, NCCL on GPUs), and the model is
wrapped in ``DistributedDataParallel``.

Each figure is summarised as a median with the minimum and maximum over
repeated timing windows, and speed-ups are ratios of medians taken in the
same run. Absolute times depend on the machine and on whatever else it is
running; the ratios are what the course reads.

The ranks' work:

Rank side (:mod:`.workers`):

* :func:`train_worker` trains :class:`~ddp_lesson.models.NeuralNetwork` on
  :func:`~ddp_lesson.data.digits_shifted` through a ``DataLoader`` with a
  ``DistributedSampler``, once per :class:`Trial` (global batch, DDP bucket
  options, gradient accumulation), and times windows of steps;
* :func:`allreduce_worker` times ``all_reduce`` on tensors of several sizes;
* :func:`startup_worker` notes when each stage of a launch finished.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import psutil
import torch

from ..validate import whole_number
from .workers import Trial, allreduce_worker, startup_worker, train_worker

#: Global batch sizes of the batch sweep: all ranks' examples per step together.
BATCHES = (64, 256, 1024, 4096)

#: All-reduce tensor sizes in bytes, 4 KB ... 64 MB.
ALLREDUCE_BYTES = tuple(4096 * 4**i for i in range(8))

#: Global batches of the scaling comparison (``make bench`` and ``10_performance``).
SCALING_BATCHES = (128, 1024, 4096)

#: Set to 1 for a quick run (tests): short windows, one launch each; the numbers say little.
QUICK_ENV = "DDP_LESSON_BENCH_QUICK"

#: A spread (max - min) above this share of the median is too wide to read a ratio from.
UNSTEADY = 0.25


def effort() -> dict[str, float]:
    """How long to measure: ``window_s`` per timing window, ``windows`` per launch, ``repeats``.

    Two-second windows, two per launch, three launches per setup: enough
    steps at every batch for a median to hold. With ``$DDP_LESSON_BENCH_QUICK``
    set (the tests do), a run that only shows the code works.
    """
    if os.environ.get(QUICK_ENV):
        return {"window_s": 0.05, "windows": 1, "repeats": 1}
    return {"window_s": 2.0, "windows": 2, "repeats": 3}


#: Share of the machine's cores that other processes may use while figures are
#: measured before the figures get a warning.
OTHERS_MAX = 0.10


class Others:
    """The CPU time the rest of the machine uses from now on, this process's own work excluded.

    A load average cannot tell whether timings were disturbed: it counts this
    process's own ranks (two ranks measuring on two cores are a load of 2 on
    an idle machine), and it trails by a minute, so a job that has just
    ended still shows. This counts what every process of the machine used
    (``psutil.cpu_times``) less what this process and its descendants (the
    warm server, the ranks, their ended children) used, from creation on.
    A descendant that outlives its parent is adopted by the system and
    counts as another process: :func:`first_launch`'s short-lived processes
    leave their warm servers so, about 2 CPU seconds each (about 1% of a
    full ``make bench`` on two cores, 7% of a ``--quick`` one).

    >>> others = Others()
    >>> 0.0 <= others.share() <= 1.0
    True
    """

    def __init__(self) -> None:
        self._started = (time.monotonic(), _machine_busy_s(), _family_s())

    def share(self) -> float:
        """Of the machine's cores since creation, the share other processes kept busy (0-1)."""
        elapsed = max(time.monotonic() - self._started[0], 1e-6)
        return min(1.0, self.others_s() / (elapsed * (os.cpu_count() or 1)))

    def others_s(self) -> float:
        """CPU seconds the machine's other processes used since creation."""
        return max(0.0, _machine_busy_s() - self._started[1] - self.own_s())

    def own_s(self) -> float:
        """CPU seconds this process and its descendants used since creation."""
        return _family_s() - self._started[2]


def _machine_busy_s() -> float:
    """CPU seconds every core of the machine has spent busy (not idle or waiting on disk)."""
    times = psutil.cpu_times()
    fields = ("user", "nice", "system", "irq", "softirq")
    return sum(getattr(times, name, 0.0) for name in fields)


def _family_s() -> float:
    """CPU seconds of this process and its live descendants, each with its ended children.

    Every descendant, helpers included: :func:`.launch.processes.descendants`
    leaves out multiprocessing's helpers, and the warm server is one; the
    ranks it forked and reaped count in its ``children_*`` times.
    """
    total = 0.0
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # ended meanwhile: its parent counts it
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def busy(others: Others | None = None, sample_s: float = 0.5) -> str:
    """A sentence when other processes used the machine enough to distort timings, else ``""``.

    Args:
        others: what to judge, from the start of a measurement; without it,
            the machine is watched for ``sample_s`` seconds now.
        sample_s: how long to watch when ``others`` is not given.
    """
    if others is None:
        others = Others()
        time.sleep(sample_s)
    share = others.share()
    if share > OTHERS_MAX:
        return (
            f"warning: other processes kept {share:.0%} of this machine's "
            f"{os.cpu_count() or 1} core(s) busy while measuring; run again on an idle "
            "machine before reading the numbers"
        )
    return ""


def unsteady(rows: Sequence[dict], value: str, low: str = "min", high: str = "max") -> list[dict]:
    """The rows whose spread (``high - low``) is more than :data:`UNSTEADY` of ``value``.

    >>> unsteady([{"v": 10.0, "min": 9.0, "max": 11.0}, {"v": 10.0, "min": 5.0, "max": 20.0}], "v")
    [{'v': 10.0, 'min': 5.0, 'max': 20.0}]
    """
    return [r for r in rows if r[value] and (r[high] - r[low]) / r[value] > UNSTEADY]


@dataclass(frozen=True)
class Setup:
    """How one launch runs: how many ranks, how many torch threads each, DDP or not.

    Attributes:
        label: the name printed in tables.
        world_size: ranks to start.
        threads: torch threads per rank (``OMP_NUM_THREADS``).
        ddp: wrap the model in DDP; ``False`` trains a plain model in one
            process, the single-device script.
        share: the setup stands for one rank of a world of ``share`` ranks:
            it trains on ``1/share`` of each trial's global batch.
    """

    label: str
    world_size: int
    threads: int
    ddp: bool = True
    share: int = 1

    def trial(self, trial: Trial) -> Trial:
        """The trial this setup runs: with ``share`` N, one rank's part of the global batch."""
        if self.share == 1:
            return trial
        return dataclasses.replace(trial, batch=trial.batch // self.share)


def default_setups(cores: int | None = None, gpus: int | None = None) -> list[Setup]:
    """The setups compared side by side: one process, DDP on 1 rank, on 2 (or every GPU).

    On CPU two more: world 1 restricted to the threads one rank of world 2
    gets (the same resources per rank, so the comparison shows what DDP
    itself costs), and world 2 with every rank using all cores (torch's
    default, which oversubscribes the cores). World 2 uses ``cores // 2``
    threads per rank, as the course's launches do.

    Args:
        cores: CPU cores; defaults to what this process may use.
        gpus: CUDA GPUs; defaults to ``torch.cuda.device_count()``.

    >>> for setup in default_setups(cores=2, gpus=0):
    ...     print(setup.label, setup.world_size, setup.threads)
    one process 1 2
    DDP world 1 1 2
    DDP world 1, 1 thread(s) 1 1
    DDP world 2 2 1
    DDP world 2, 2 threads each 2 2
    >>> [s.label for s in default_setups(cores=8, gpus=4)]
    ['one process', 'DDP world 1', 'DDP world 4']
    """
    from ..devices import threads_per_rank, usable_cores

    cores = usable_cores() if cores is None else cores
    gpus = torch.cuda.device_count() if gpus is None else gpus
    world = gpus if gpus > 0 else 2
    per_rank = threads_per_rank(world, cores)
    setups = [
        Setup("one process", 1, cores, ddp=False),
        Setup("DDP world 1", 1, cores),
    ]
    if gpus == 0 and per_rank < cores:
        setups.append(Setup(f"DDP world 1, {per_rank} thread(s)", 1, per_rank))
    setups.append(Setup(f"DDP world {world}", world, per_rank))
    if gpus == 0 and per_rank < cores:
        setups.append(Setup(f"DDP world {world}, {cores} threads each", world, cores))
    return setups


# -- what the launching process runs ------------------------------------------------


def _launch(setup: Setup, worker, args: tuple, timeout_s: float) -> list[dict]:
    """Start ``setup.world_size`` ranks of ``worker`` as the lesson does; return their reports."""
    import torch.multiprocessing as mp

    from .. import launch

    threads = setup.threads if torch.cuda.device_count() == 0 else None
    with launch.bounded(setup.world_size, timeout_s=timeout_s, threads_per_rank=threads) as run:
        mp.spawn(worker, args=(setup.world_size, run.port, *args), nprocs=setup.world_size)
    return run.reports


def summarise(values: Iterable[float]) -> dict[str, float]:
    """Median, minimum and maximum of ``values``.

    >>> summarise([3.0, 1.0, 2.0, 10.0])
    {'median': 2.5, 'min': 1.0, 'max': 10.0}
    """
    values = list(values)
    if not values:
        raise ValueError("summarise needs at least one value, got none")
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def training(
    setups: Sequence[Setup],
    trials: Sequence[Trial] = (Trial(),),
    *,
    repeats: int = 2,
    windows: int = 3,
    window_s: float = 0.5,
    timeout_s: float = 300,
) -> list[dict]:
    """Samples per second of every setup with every trial; one row each.

    The setups take turns: repeat 1 launches each setup once, then repeat 2,
    and so on, so a busy moment on the machine does not land on one setup
    only. A window's time is the slowest rank's, since a step is not done
    until every rank has done it.

    Args:
        setups: launches to compare (see :func:`default_setups`).
        trials: configurations each launch times in turn.
        repeats: launches per setup.
        windows: timing windows per trial per launch.
        window_s: seconds each timing window aims for.
        timeout_s: deadline of each launch.

    Returns:
        Rows with ``setup``, ``world_size``, ``threads``, ``trial``,
        ``batch``, ``samples_per_s`` (median), ``min``, ``max``,
        ``step_ms`` (median) and ``windows`` (how many were timed).
    """
    whole_number("repeats", repeats, minimum=1)
    whole_number("windows", windows, minimum=1)
    if not isinstance(window_s, (int, float)) or isinstance(window_s, bool) or window_s <= 0:
        raise ValueError(f"window_s must be a positive number of seconds, got {window_s!r}")
    if not setups or not trials:
        raise ValueError("training needs at least one setup and one trial")
    for trial in trials:
        if trial.data not in ("digits", "digits_shifted"):
            raise ValueError(f"data must be 'digits' or 'digits_shifted', got {trial.data!r}")
    for setup in setups:
        for trial in trials:
            if trial.batch % (setup.world_size * setup.share):
                raise ValueError(
                    f"batch {trial.batch} does not split evenly over {setup.world_size} ranks "
                    f"({setup.label}); pick a batch that is a multiple of the world size"
                )
    rates: dict[tuple[int, int], list[float]] = {}
    step_s: dict[tuple[int, int], list[float]] = {}
    threads: dict[int, int] = {}
    for _ in range(repeats):
        for s, setup in enumerate(setups):
            args = (setup.ddp, [setup.trial(t) for t in trials], window_s, windows)
            reports = _launch(setup, train_worker, args, timeout_s)
            threads[s] = reports[0]["threads"]
            for t, trial in enumerate(trials):
                steps = reports[0]["trials"][t]["steps"]
                per_rank = [r["trials"][t]["seconds"] for r in reports]
                for window in zip(*per_rank, strict=True):
                    slowest = max(window)
                    done = setup.trial(trial).batch * steps  # examples in the window
                    rates.setdefault((s, t), []).append(done / slowest)
                    step_s.setdefault((s, t), []).append(slowest / steps)
    rows = []
    for s, setup in enumerate(setups):
        for t, trial in enumerate(trials):
            rate = summarise(rates[(s, t)])
            rows.append(
                {
                    "setup": setup.label,
                    "world_size": setup.world_size,
                    "threads": threads[s],
                    "trial": trial.label,
                    "batch": trial.batch,
                    "samples_per_s": rate["median"],
                    "min": rate["min"],
                    "max": rate["max"],
                    "step_ms": 1000 * statistics.median(step_s[(s, t)]),
                    "windows": len(rates[(s, t)]),
                }
            )
    return rows


def speedups(rows: Sequence[dict], baseline: str) -> list[dict]:
    """Each row's median samples/s divided by the baseline's with the same trial.

    Adds ``speedup`` and ``efficiency`` (speed-up divided by the world size:
    1.0 means every added rank contributed a full rank's worth).

    Args:
        rows: what :func:`training` returned.
        baseline: the ``setup`` label to divide by, e.g. ``"DDP world 1"``.

    >>> rows = [{"setup": "a", "trial": "t", "world_size": 1, "samples_per_s": 100.0},
    ...         {"setup": "b", "trial": "t", "world_size": 2, "samples_per_s": 190.0}]
    >>> [(r["speedup"], r["efficiency"]) for r in speedups(rows, "a")]
    [(1.0, 1.0), (1.9, 0.95)]
    """
    base = {r["trial"]: r["samples_per_s"] for r in rows if r["setup"] == baseline}
    if not base:
        labels = sorted({r["setup"] for r in rows})
        raise ValueError(f"no row has setup {baseline!r}; choose one of {labels}")
    out = []
    for row in rows:
        if row["trial"] in base:
            speedup = row["samples_per_s"] / base[row["trial"]]
            out.append({**row, "speedup": speedup, "efficiency": speedup / row["world_size"]})
    return out


def scaling(
    batches: Sequence[int] = SCALING_BATCHES,
    *,
    cores: int | None = None,
    gpus: int | None = None,
    window_s: float | None = None,
    windows: int | None = None,
    repeats: int | None = None,
    timeout_s: float = 900,
) -> list[dict]:
    """How DDP scales here, and what it costs, at each global batch; one row per batch.

    Three setups, timed in turns (see :func:`training`):

    * ``world 1``: one rank using the whole machine (every core, or one GPU);
    * ``world N``: N ranks (every GPU; on the CPU two, each with its share
      of the cores), each on ``batch / N`` examples per step;
    * ``one rank alone``: one rank with one rank's resources (its share of
      the cores, or one GPU) on ``batch / N`` examples: what each of the N
      ranks would do without DDP.

    ``speedup`` (world N / world 1) answers "is it faster than one process
    using the same machine?"; ``ddp_efficiency`` (world N / (N x one rank
    alone)) answers "what does DDP itself cost?", since every rank has the
    same resources and batch as the rank alone; ``ceiling`` (N x one rank
    alone / world 1) is the best speed-up those N ranks could reach.

    Returns:
        Rows with ``batch``, ``world1``, ``worldN``, ``alone`` (median
        samples/s, each with ``_min`` and ``_max``), ``speedup``,
        ``ddp_efficiency``, ``ceiling``, ``world_size`` and ``threads``
        (per rank of world N).
    """
    from ..devices import threads_per_rank, usable_cores

    cores = usable_cores() if cores is None else cores
    gpus = torch.cuda.device_count() if gpus is None else gpus
    world = gpus if gpus > 1 else 2
    per_rank = threads_per_rank(world, cores) if gpus == 0 else cores
    setups = [
        Setup("world 1", 1, cores),
        Setup(f"world {world}", world, per_rank),
        Setup("one rank alone", 1, per_rank, share=world),
    ]
    how = {**effort(), **{k: v for k, v in (("window_s", window_s), ("windows", windows),
                                           ("repeats", repeats)) if v is not None}}  # fmt: skip
    rows = training(
        setups, [Trial(b) for b in batches], repeats=int(how["repeats"]),
        windows=int(how["windows"]), window_s=how["window_s"], timeout_s=timeout_s,
    )  # fmt: skip
    out = []
    for batch in batches:
        mine = {r["setup"]: r for r in rows if r["batch"] == batch}
        one, many, alone = (mine[s.label] for s in setups)
        row = {"batch": batch, "world_size": world, "threads": many["threads"]}
        for key, found in (("world1", one), ("worldN", many), ("alone", alone)):
            row.update({key: found["samples_per_s"], f"{key}_min": found["min"],
                        f"{key}_max": found["max"]})  # fmt: skip
        row["speedup"] = many["samples_per_s"] / one["samples_per_s"]
        row["ddp_efficiency"] = many["samples_per_s"] / (world * alone["samples_per_s"])
        row["ceiling"] = world * alone["samples_per_s"] / one["samples_per_s"]
        out.append(row)
    return out


def allreduce(
    sizes: Sequence[int] = ALLREDUCE_BYTES,
    *,
    world_size: int = 2,
    repeats: int | None = None,
    timeout_s: float = 300,
) -> list[dict]:
    """Time ``all_reduce`` between ``world_size`` ranks for each tensor size in bytes.

    Each call starts at a barrier; the slowest rank's time counts. The
    minimum answers "what does an all-reduce of this size cost" (the other
    calls were slowed by something else); the median and maximum say how
    steady the machine was.

    Args:
        sizes: tensor sizes in bytes.
        world_size: ranks.
        repeats: timed calls per size (default 40; 3 in a quick run).
        timeout_s: the launch's deadline.

    Returns:
        One row per size: ``bytes``, ``size``, ``ms`` (median), ``min_ms``,
        ``max_ms``, ``MB_per_s`` (bytes per second at the minimum time).
    """
    from ..devices import threads_per_rank

    if repeats is None:
        repeats = 3 if os.environ.get(QUICK_ENV) else 40
    whole_number("repeats", repeats, minimum=1)
    setup = Setup(f"world {world_size}", world_size, threads_per_rank(world_size))
    reports = _launch(setup, allreduce_worker, (list(sizes), repeats), timeout_s)
    rows = []
    for i, size in enumerate(sizes):
        # a call is done when the slowest rank is done
        slowest = [max(times) for times in zip(*(r["seconds"][i] for r in reports), strict=True)]
        ms = summarise(1000 * s for s in slowest)
        rows.append(
            {
                "bytes": size,
                "size": _size_label(size),
                "ms": ms["median"],
                "min_ms": ms["min"],
                "max_ms": ms["max"],
                "MB_per_s": size / 1e6 / (ms["min"] / 1000),
            }
        )
    return rows


def _size_label(size: int) -> str:
    """``4096`` -> ``"4 KB"``, ``1048576`` -> ``"1 MB"``.

    >>> _size_label(4096), _size_label(64 * 2**20)
    ('4 KB', '64 MB')
    """
    for unit, scale in (("MB", 2**20), ("KB", 2**10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} B"


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
    import shutil
    import sys
    import tempfile
    from pathlib import Path

    import torch.multiprocessing as mp

    from .. import launch, sources
    from ..devices import plan

    if repeats is None:
        repeats = 1 if os.environ.get(QUICK_ENV) else 5
    whole_number("repeats", repeats, minimum=1)
    world_size = plan().world_size
    folder = Path(tempfile.mkdtemp(prefix="ddp-lesson-stages-"))
    (folder / "workers").mkdir()
    (folder / "workers" / "__init__.py").write_text("")
    for stage in stages:
        (folder / "workers" / f"stage_{stage}.py").write_text(sources.worker_source(stage))
    # a `workers` package imported before (the notebook's own folder, say) would
    # shadow this folder's: set it aside while measuring, and put it back after
    aside = {m: sys.modules.pop(m) for m in list(sys.modules) if m.split(".")[0] == "workers"}
    sys.path.insert(0, str(folder))
    rows = []
    try:
        for n, stage in enumerate(stages):
            worker = importlib.import_module(f"workers.stage_{stage}")
            seconds = []
            for attempt in range(repeats + (n == 0 and warm)):
                started = time.perf_counter()
                # (what the ranks print is the lesson's, not the measurement's)
                with contextlib.redirect_stdout(io.StringIO()):
                    with launch.bounded(world_size, timeout_s=timeout_s, warm=warm) as run:
                        mp.spawn(worker.main, args=(world_size, run.port), nprocs=world_size)
                if not (n == 0 and warm and attempt == 0):  # that one started the server
                    seconds.append(time.perf_counter() - started)
            rows.append({"stage": stage, **summarise(seconds)})
    finally:
        sys.path.remove(str(folder))
        for name in [m for m in sys.modules if m.split(".")[0] == "workers"]:
            del sys.modules[name]
        sys.modules.update(aside)
        shutil.rmtree(folder, ignore_errors=True)
    return rows


def first_launch(stage: str = "05", *, repeats: int | None = None) -> dict[str, float]:
    """Seconds of a new kernel's first launch of a stage, server start included.

    Each repeat runs a new Python process that imports the course and
    launches the stage's worker once, as a notebook's first launch cell
    does; the time counted runs from entering ``launch.bounded`` to leaving
    it.
    """
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    from .. import sources

    if repeats is None:
        repeats = 1 if os.environ.get(QUICK_ENV) else 3
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
            "    print('SECONDS', time.perf_counter() - started)\n"
        )
        (Path(folder) / "first.py").write_text(script)
        seconds = []
        for _ in range(repeats):
            out = subprocess.run(
                [sys.executable, "first.py"], cwd=folder, capture_output=True, text=True,
                timeout=300, check=True,
            ).stdout  # fmt: skip
            seconds.append(float(out.split("SECONDS")[-1]))
    return summarise(seconds)


def notebook_times(paths: Sequence[str], *, timeout_s: float = 600) -> list[dict]:
    """Execute each notebook top to bottom in its own folder and time it (nothing is saved).

    Returns:
        One row per notebook: ``notebook`` and ``seconds``.
    """
    from pathlib import Path

    import nbformat
    from nbclient import NotebookClient

    rows = []
    for path in paths:
        path = Path(path)
        notebook = nbformat.read(path, as_version=4)
        client = NotebookClient(
            notebook,
            timeout=timeout_s,
            kernel_name="python3",
            resources={"metadata": {"path": str(path.parent)}},
        )
        start = time.perf_counter()
        client.execute()
        rows.append({"notebook": path.stem, "seconds": time.perf_counter() - start})
    return rows


