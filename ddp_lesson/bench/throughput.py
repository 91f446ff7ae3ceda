"""Training and ``all_reduce`` throughput: real DDP launches, timed in windows.

Ranks are processes started by ``mp.spawn`` inside
:func:`ddp_lesson.launch.bounded`, as the lesson starts them; they meet in a
process group (gloo on CPU, NCCL on GPUs) and wrap the model in
``DistributedDataParallel``. What the ranks run is in :mod:`.workers`:

* :func:`.workers.train_worker` trains :class:`~ddp_lesson.models.NeuralNetwork`
  on :func:`~ddp_lesson.data.digits_shifted` through a ``DataLoader`` with a
  ``DistributedSampler``, once per :class:`Trial` (global batch, DDP bucket
  options, gradient accumulation), and times windows of steps;
* :func:`.workers.allreduce_worker` times ``all_reduce`` on tensors of several sizes.

Every figure is a median with its minimum and maximum (:mod:`.summaries`).
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..validate import whole_number
from .conditions import effort, quick
from .summaries import summarise
from .workers import Trial, allreduce_worker, train_worker

#: Global batch sizes of the batch sweep: all ranks' examples per step together.
BATCHES = (64, 256, 1024, 4096)

#: All-reduce tensor sizes in bytes, 4 KB ... 64 MB.
ALLREDUCE_BYTES = tuple(4096 * 4**i for i in range(8))

#: Global batches of the scaling comparison (``make bench`` and ``10_performance``).
SCALING_BATCHES = (128, 1024, 4096)


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


def _launch(setup: Setup, worker, args: tuple, timeout_s: float) -> list[dict]:
    """Start ``setup.world_size`` ranks of ``worker`` as the lesson does; return their reports."""
    import torch.multiprocessing as mp

    from .. import launch

    threads = setup.threads if torch.cuda.device_count() == 0 else None
    with launch.bounded(setup.world_size, timeout_s=timeout_s, threads_per_rank=threads) as run:
        mp.spawn(worker, args=(setup.world_size, run.port, *args), nprocs=setup.world_size)
    return run.reports


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
    _check_training(setups, trials, repeats, windows, window_s)
    rates, step_s, threads = _timed_windows(setups, trials, repeats, windows, window_s, timeout_s)
    return _training_rows(setups, trials, rates, step_s, threads)


def _check_training(
    setups: Sequence[Setup], trials: Sequence[Trial], repeats: int, windows: int, window_s: float
) -> None:
    """Refuse, with what to change, arguments that :func:`training` could not run."""
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


def _timed_windows(
    setups: Sequence[Setup],
    trials: Sequence[Trial],
    repeats: int,
    windows: int,
    window_s: float,
    timeout_s: float,
) -> tuple[dict, dict, dict]:
    """Launch every setup in turn, ``repeats`` times, and collect each window's rate and step time.

    Returns:
        ``rates`` and ``step_s`` (lists keyed by setup and trial index, one
        entry per window) and ``threads`` (torch threads per rank, by setup).
    """
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
    return rates, step_s, threads


def _training_rows(
    setups: Sequence[Setup], trials: Sequence[Trial], rates: dict, step_s: dict, threads: dict
) -> list[dict]:
    """Summarise the windows of every setup with every trial into :func:`training`'s rows."""
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
    return [_scaling_row(batch, rows, setups, world) for batch in batches]


def _scaling_row(batch: int, rows: Sequence[dict], setups: Sequence[Setup], world: int) -> dict:
    """Compare the three setups of :func:`scaling` at one global batch: one row of its table."""
    mine = {r["setup"]: r for r in rows if r["batch"] == batch}
    one, many, alone = (mine[s.label] for s in setups)
    row = {"batch": batch, "world_size": world, "threads": many["threads"]}
    for key, found in (("world1", one), ("worldN", many), ("alone", alone)):
        row.update(
            {key: found["samples_per_s"], f"{key}_min": found["min"], f"{key}_max": found["max"]}
        )
    row["speedup"] = many["samples_per_s"] / one["samples_per_s"]
    row["ddp_efficiency"] = many["samples_per_s"] / (world * alone["samples_per_s"])
    row["ceiling"] = world * alone["samples_per_s"] / one["samples_per_s"]
    return row


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
        repeats = 3 if quick() else 40
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
