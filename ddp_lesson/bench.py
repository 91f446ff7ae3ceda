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

* :func:`train_worker` trains :class:`~ddp_lesson.models.NeuralNetwork` on
  :func:`~ddp_lesson.data.digits_shifted` through a ``DataLoader`` with a
  ``DistributedSampler``, once per :class:`Trial` (global batch, DDP bucket
  options, gradient accumulation), and times windows of steps;
* :func:`allreduce_worker` times ``all_reduce`` on tensors of several sizes;
* :func:`startup_worker` notes when each stage of a launch finished.
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from .reports import send_report
from .validate import whole_number

#: Global batch sizes of the batch sweep: all ranks' examples per step together.
BATCHES = (64, 256, 1024, 4096)

#: Most steps in one timing window (tiny batches take well under a millisecond).
MAX_STEPS = 400

#: All-reduce tensor sizes in bytes, 4 KB ... 64 MB.
ALLREDUCE_BYTES = tuple(4096 * 4**i for i in range(8))


@dataclass(frozen=True)
class Setup:
    """How one launch runs: how many ranks, how many torch threads each, DDP or not.

    Attributes:
        label: the name printed in tables.
        world_size: ranks to start.
        threads: torch threads per rank (``OMP_NUM_THREADS``).
        ddp: wrap the model in DDP; ``False`` trains a plain model in one
            process, the single-device script.
    """

    label: str
    world_size: int
    threads: int
    ddp: bool = True


@dataclass(frozen=True)
class Trial:
    """One training configuration timed inside a launch.

    Attributes:
        batch: global batch, all ranks together; each rank takes
            ``batch // world_size`` examples per step.
        bucket_cap_mb: DDP's ``bucket_cap_mb`` (``None``: DDP's default, 25).
        bucket_view: DDP's ``gradient_as_bucket_view``.
        sync_every: all-reduce gradients every this many steps; the steps in
            between run under ``model.no_sync()`` and accumulate.
        data: ``"digits_shifted"`` (12942 training images) or ``"digits"``
            (the 1438 that notebook 06 trains on).
    """

    batch: int = 1024
    bucket_cap_mb: float | None = None
    bucket_view: bool = False
    sync_every: int = 1
    data: str = "digits_shifted"

    @property
    def label(self) -> str:
        """A short description, e.g. ``"batch 1024, bucket 1 MB, sync every 4"``."""
        parts = [f"batch {self.batch}"]
        if self.bucket_cap_mb is not None:
            parts.append(f"bucket {self.bucket_cap_mb:g} MB")
        if self.bucket_view:
            parts.append("bucket view")
        if self.sync_every > 1:
            parts.append(f"sync every {self.sync_every}")
        if self.data != "digits_shifted":
            parts.append(self.data)
        return ", ".join(parts)


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
    from .devices import threads_per_rank, usable_cores

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


# -- what the ranks run ----------------------------------------------------------


def _join(rank: int, world_size: int, port: int) -> torch.device:
    """Join the launch's group as the lesson does and return this rank's device."""
    from .devices import device_for
    from .probes import _join_group

    _join_group(rank, world_size, port)  # also selects this rank's GPU, if any
    return device_for(rank)


def _wait(device: torch.device) -> None:
    """Wait until the device has finished queued work, so a clock reading means done."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _batches(dataset, batch: int, world_size: int, rank: int):
    """Endless batches of this rank's shard, a new shuffle each epoch (``set_epoch``)."""
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, drop_last=True)
    loader = DataLoader(dataset, batch_size=batch // world_size, sampler=sampler, drop_last=True)
    if len(loader) == 0:
        raise ValueError(
            f"a global batch of {batch} is more than the {len(dataset)} examples of the "
            "data set: pick a smaller batch or the larger data set (digits_shifted)"
        )
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def _step(i, model, optimizer, batches, device, ddp: bool, sync_every: int) -> None:
    """One training step; gradients are exchanged only on every ``sync_every``-th step."""
    import torch.nn.functional as F

    features, labels = next(batches)
    features, labels = features.to(device), labels.to(device)
    exchange = (i + 1) % sync_every == 0
    if ddp and not exchange:
        with model.no_sync():  # accumulate locally, no all-reduce
            F.cross_entropy(model(features), labels).backward()
        return
    F.cross_entropy(model(features), labels).backward()
    if exchange:
        optimizer.step()
        optimizer.zero_grad()


def _timed(work: tuple, steps: int) -> float:
    """Seconds this rank takes for ``steps`` steps, started together with the others."""
    import torch.distributed as dist

    device = work[3]
    _wait(device)
    dist.barrier()
    start = time.perf_counter()
    for i in range(steps):
        _step(i, *work)
    _wait(device)
    return time.perf_counter() - start


def _steps_per_window(work: tuple, window_s: float, sync_every: int) -> int:
    """Time one step (every rank, the slowest counts) and say how many fill ``window_s``."""
    import torch.distributed as dist

    probe = torch.tensor([_timed(work, sync_every) / sync_every], device=work[3])
    dist.all_reduce(probe, op=dist.ReduceOp.MAX)
    steps = min(MAX_STEPS, max(2, round(window_s / max(probe.item(), 1e-6))))
    return -(-steps // sync_every) * sync_every  # whole exchanges only


def train_worker(
    rank: int,
    world_size: int,
    port: int,
    ddp: bool,
    trials: Sequence[Trial],
    window_s: float,
    windows: int,
    warmup: int = 2,
) -> None:
    """Train with each trial in turn and report the seconds each timing window took.

    Every window starts at a barrier, so all ranks start its clock together.
    Its number of steps is chosen from one timed step after the warm-up (the
    slowest rank's, so every rank runs the same steps): enough to fill about
    ``window_s`` seconds, at least 2, and whole exchanges when ``sync_every``
    is above 1.

    Args:
        rank, world_size, port: as ``mp.spawn`` and :func:`launch.bounded` give them.
        ddp: wrap the model in DDP (``False``: the plain single-process script).
        trials: the configurations to time, in order.
        window_s: the length a timing window aims for, in seconds.
        windows: timing windows per trial.
        warmup: untimed steps before the first window of each trial.
    """
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from . import data
    from .devices import ddp_device_ids
    from .models import NeuralNetwork

    device = _join(rank, world_size, port)
    try:
        results = []
        for trial in trials:
            dataset = {"digits": data.digits, "digits_shifted": data.digits_shifted}[trial.data]()
            torch.manual_seed(0)
            model = NeuralNetwork().to(device)
            if ddp:
                options = {"gradient_as_bucket_view": trial.bucket_view}
                if trial.bucket_cap_mb is not None:
                    options["bucket_cap_mb"] = trial.bucket_cap_mb
                model = DDP(model, device_ids=ddp_device_ids(device), **options)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
            batches = _batches(dataset, trial.batch, world_size, rank)

            work = (model, optimizer, batches, device, ddp, trial.sync_every)
            for i in range(warmup):
                _step(i, *work)
            steps = _steps_per_window(work, window_s, trial.sync_every)
            seconds = [_timed(work, steps) for _ in range(windows)]
            results.append({"steps": steps, "seconds": seconds})
            del model, optimizer, batches, work, dataset
            gc.collect()
        send_report(rank, threads=torch.get_num_threads(), trials=results)
    finally:
        gc.collect()  # no DDP model may outlive its group
        dist.destroy_process_group()


def allreduce_worker(
    rank: int, world_size: int, port: int, sizes: Sequence[int], repeats: int
) -> None:
    """Time ``all_reduce`` of a float32 tensor of each size in bytes and report the seconds.

    Each timed call starts at a barrier; one untimed call per size comes first.
    """
    import torch.distributed as dist

    device = _join(rank, world_size, port)
    try:
        seconds = []
        for size in sizes:
            tensor = torch.ones(max(1, size // 4), device=device)
            dist.all_reduce(tensor)
            times = []
            for _ in range(repeats):
                _wait(device)
                dist.barrier()
                start = time.perf_counter()
                dist.all_reduce(tensor)
                _wait(device)
                times.append(time.perf_counter() - start)
            seconds.append(times)
        send_report(rank, seconds=seconds)
    finally:
        dist.destroy_process_group()


def startup_worker(rank: int, world_size: int, port: int, steps: int = 5) -> None:
    """Note the clock after each stage of a small DDP run and report the readings.

    The stages are the lesson's: joining the group (``init_process_group``),
    wrapping the model (the first ``DDP(...)`` call of the process), a few
    training steps, and ``destroy_process_group``. The clock is
    ``time.time()``, which all processes of the machine share, so the
    launching process can put the readings on its own time line.
    """
    entered = time.time()
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel as DDP

    from .data import digits_shifted
    from .devices import ddp_device_ids
    from .models import NeuralNetwork

    device = _join(rank, world_size, port)
    joined = time.time()
    model = DDP(NeuralNetwork().to(device), device_ids=ddp_device_ids(device))
    wrapped = time.time()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    batches = _batches(digits_shifted("train"), 256, world_size, rank)
    for _ in range(steps):
        features, labels = next(batches)
        loss = F.cross_entropy(model(features.to(device)), labels.to(device))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    _wait(device)
    trained = time.time()
    del model, optimizer
    gc.collect()
    dist.destroy_process_group()
    send_report(
        rank,
        entered=entered,
        joined=joined,
        wrapped=wrapped,
        trained=trained,
        destroyed=time.time(),
    )


# -- what the launching process runs ------------------------------------------------


def _launch(setup: Setup, worker, args: tuple, timeout_s: float) -> list[dict]:
    """Start ``setup.world_size`` ranks of ``worker`` as the lesson does; return their reports."""
    import torch.multiprocessing as mp

    from . import launch

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
            if trial.batch % setup.world_size:
                raise ValueError(
                    f"batch {trial.batch} does not split evenly over {setup.world_size} ranks "
                    f"({setup.label}); pick a batch that is a multiple of the world size"
                )
    rates: dict[tuple[int, int], list[float]] = {}
    step_s: dict[tuple[int, int], list[float]] = {}
    threads: dict[int, int] = {}
    for _ in range(repeats):
        for s, setup in enumerate(setups):
            args = (setup.ddp, list(trials), window_s, windows)
            reports = _launch(setup, train_worker, args, timeout_s)
            threads[s] = reports[0]["threads"]
            for t, trial in enumerate(trials):
                steps = reports[0]["trials"][t]["steps"]
                per_rank = [r["trials"][t]["seconds"] for r in reports]
                for window in zip(*per_rank, strict=True):
                    slowest = max(window)
                    rates.setdefault((s, t), []).append(trial.batch * steps / slowest)
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


def allreduce(
    sizes: Sequence[int] = ALLREDUCE_BYTES,
    *,
    world_size: int = 2,
    repeats: int = 10,
    timeout_s: float = 300,
) -> list[dict]:
    """Time ``all_reduce`` between ``world_size`` ranks for each tensor size in bytes.

    Returns:
        One row per size: ``bytes``, ``ms`` (median), ``min_ms``, ``max_ms``
        and ``MB_per_s`` (bytes reduced per second at the median time).
    """
    from .devices import threads_per_rank

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
                "MB_per_s": size / 1e6 / (ms["median"] / 1000),
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


#: The stages of a launch, in order, as :func:`startup` names them.
STAGES = (
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
        warm: start the ranks with :func:`ddp_lesson.launch.start` (forked from
            a server with torch imported) instead of ``mp.spawn``; one launch
            before the measured ones starts that server.

    Returns:
        One row per stage in :data:`STAGES` order, plus a ``total`` row.
    """
    import torch.multiprocessing as mp

    from . import launch
    from .devices import threads_per_rank

    whole_number("repeats", repeats, minimum=1)
    threads = None if torch.cuda.device_count() else threads_per_rank(world_size)
    spans: dict[str, list[float]] = {name: [] for name in (*STAGES, "total")}
    starter = launch.start if warm else mp.spawn
    for attempt in range(repeats + warm):
        with launch.bounded(world_size, timeout_s=timeout_s, threads_per_rank=threads) as run:
            spawned = time.time()
            starter(startup_worker, args=(world_size, run.port), nprocs=world_size)
            returned = time.time()
        if warm and attempt == 0:
            continue  # this one started the server
        # each stage ends when its slowest rank ends it; the next starts there
        marks = [spawned, *(max(r[key] for r in run.reports) for key in _MARKS), returned]
        for name, start, end in zip(STAGES, marks[:-1], marks[1:], strict=True):
            spans[name].append(end - start)
        spans["total"].append(returned - spawned)
    return [{"stage": name, **summarise(values)} for name, values in spans.items()]


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


# -- pictures ------------------------------------------------------------------------


def _axes(ax, size=(5.0, 3.2)):
    import matplotlib.pyplot as plt

    if ax is not None:
        return ax.figure, ax
    return plt.subplots(figsize=size)


def _done(fig, own: bool):
    import matplotlib.pyplot as plt

    if own:
        fig.tight_layout()
        plt.close(fig)
    return fig


def throughput_picture(rows: Sequence[dict], ax=None):
    """Samples per second against global batch, one line per setup, bars from min to max.

    Args:
        rows: what :func:`training` returned.
        ax: draw into this matplotlib axes instead of a new figure.
    """
    from .plots import RANK_COLOURS

    fig, axes = _axes(ax)
    setups = list(dict.fromkeys(r["setup"] for r in rows))
    for n, setup in enumerate(setups):
        mine = sorted((r for r in rows if r["setup"] == setup), key=lambda r: r["batch"])
        batches = [r["batch"] for r in mine]
        median = [r["samples_per_s"] for r in mine]
        spread = [
            [m - r["min"] for m, r in zip(median, mine, strict=True)],
            [r["max"] - m for m, r in zip(median, mine, strict=True)],
        ]
        axes.errorbar(
            batches,
            median,
            yerr=spread,
            marker="o",
            capsize=3,
            label=setup,
            color=RANK_COLOURS[n % 10],
        )
    axes.set_xscale("log", base=2)
    axes.set_xlabel("global batch (all ranks together)")
    axes.set_ylabel("samples per second")
    axes.set_title("training throughput (median, min-max)")
    axes.legend(fontsize=8)
    return _done(fig, ax is None)


def allreduce_picture(rows: Sequence[dict], ax=None):
    """Time of one ``all_reduce`` against tensor size, log-log, bars from min to max."""
    fig, axes = _axes(ax)
    sizes = [r["bytes"] for r in rows]
    median = [r["ms"] for r in rows]
    spread = [[r["ms"] - r["min_ms"] for r in rows], [r["max_ms"] - r["ms"] for r in rows]]
    axes.errorbar(sizes, median, yerr=spread, marker="o", capsize=3, color="tab:blue")
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xticks(sizes, [r["size"] for r in rows], rotation=45, fontsize=8)
    axes.set_xlabel("tensor size")
    axes.set_ylabel("ms per all_reduce")
    axes.set_title("all_reduce between the ranks (median, min-max)")
    return _done(fig, ax is None)


def startup_picture(rows: Sequence[dict], ax=None):
    """One horizontal bar per launch stage: median seconds, with min to max."""
    fig, axes = _axes(ax)
    stages = [r for r in rows if r["stage"] != "total"]
    names = [r["stage"] for r in stages]
    median = [r["median"] for r in stages]
    spread = [[r["median"] - r["min"] for r in stages], [r["max"] - r["median"] for r in stages]]
    axes.barh(names, median, xerr=spread, capsize=3, color="tab:grey")
    axes.invert_yaxis()
    axes.set_xlabel("seconds")
    axes.set_title("where a small DDP launch spends its time")
    return _done(fig, ax is None)
