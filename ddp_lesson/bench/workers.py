"""What the benchmark's ranks run: timed training, timed all-reduces, a launch's phases.

Each function runs in every rank of a launch that :mod:`.throughput` or
:mod:`.launch_times` starts, joins the launch's group (gloo on CPU, NCCL on GPUs), and reports
what its clock read.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .. import group
from ..reports import send_report

#: Most steps in one timing window (tiny batches take well under a millisecond).
MAX_STEPS = 400


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

    from .. import data
    from ..devices import ddp_device_ids
    from ..models import NeuralNetwork

    device = group.join(rank, world_size, port)
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

    device = group.join(rank, world_size, port)
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

    from ..data import digits_shifted
    from ..devices import ddp_device_ids
    from ..models import NeuralNetwork

    device = group.join(rank, world_size, port)
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


