"""Which devices this machine offers, and how the course uses them.

One policy for the whole course, for every machine shape:

* a GPU for every rank (two GPUs or more, by default one rank per GPU):
  each rank owns ``cuda:rank`` and the ranks talk over NCCL, as the lesson
  does;
* no GPU, or fewer GPUs than ranks (a laptop, Colab's single GPU): CPU
  processes that talk over gloo, two by default. NCCL needs a GPU of its
  own for every rank, and one process alone has nothing to synchronise, so
  a single GPU is not used for the lesson's ranks.

Notebooks, workers, launches and tests all ask this module. The one rule a
worker needs is :func:`device_for`: ``cuda:rank`` when the machine has a
GPU for each of the ``world_size`` ranks, else the CPU.
"""

from __future__ import annotations

import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from .validate import whole_number

#: Processes started when no GPU can be given to every rank, unless told otherwise.
DEFAULT_CPU_WORLD_SIZE = 2

#: Environment variable that sets the world size for every notebook.
WORLD_SIZE_ENV = "DDP_LESSON_WORLD_SIZE"

#: More CPU processes than this per core only measures the scheduler.
MAX_CPU_PROCESSES_PER_CORE = 4

#: Torch threads each rank of a course launch uses (``OMP_NUM_THREADS``).
#: One, as ``torchrun`` sets for multi-process runs: ranks never fight over
#: the cores, and a result never depends on how many cores a machine has.
THREADS_PER_RANK = 1

#: Where Linux keeps this process's CPU quota (cgroup v2, then v1).
CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Plan:
    """What a launch on this machine will look like.

    Attributes:
        backend: ``"nccl"`` when every rank gets a GPU, else ``"gloo"``.
        device_type: ``"cuda"`` or ``"cpu"``.
        world_size: how many processes ``mp.spawn`` should start.
        gpus: what ``torch.cuda.device_count()`` reported.
        cores: CPU cores this process may use (affinity and quota).
        reason: one sentence on why this plan, for this machine.
    """

    backend: str
    device_type: str
    world_size: int
    gpus: int
    cores: int
    reason: str = ""

    @property
    def threads_per_rank(self) -> int:
        """Torch threads each rank of a course launch uses (see :data:`THREADS_PER_RANK`)."""
        return THREADS_PER_RANK

    def device(self, rank: int) -> torch.device:
        """The device that process ``rank`` owns (``cuda:rank`` or ``cpu``)."""
        whole_number("rank", rank)
        if self.device_type == "cuda":
            return torch.device("cuda", rank)
        return torch.device("cpu")

    def describe(self) -> str:
        """A few lines saying what a launch on this machine will do (they describe the machine)."""
        if self.device_type == "cuda":
            what = f"{self.world_size} processes, one per GPU (cuda:0..cuda:{self.world_size - 1})"
        else:
            what = f"{self.world_size} CPU process" + ("es" if self.world_size != 1 else "")
        lines = [
            f"CUDA GPUs reported by torch.cuda.device_count(): {self.gpus}",
            f"backend: {self.backend}",
            f"world_size: {self.world_size} -> {what}",
            f"why: {self.reason}",
            f"torch threads per rank: {self.threads_per_rank} (this machine has {self.cores} "
            f"usable core(s); cores // world_size would be "
            f"{threads_per_rank(self.world_size, self.cores)})",
        ]
        if self.world_size == 1:
            lines.append(
                "note: with one rank there is nobody to share data or gradients with, so "
                "every comparison between ranks is trivially equal"
            )
        return "\n".join(lines)


def _cgroup_cores(root: Path = CGROUP_ROOT) -> float | None:
    """The CPU quota of this process's cgroup in cores (e.g. 1.5), or ``None`` if unlimited.

    Containers (Docker, Binder, Kubernetes) often give a process fewer cores
    than ``os.sched_getaffinity`` lists, as a quota: ``cpu.max`` (cgroup v2)
    or ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (v1).

    Args:
        root: the cgroup file system (a test passes a folder of its own).
    """
    try:
        quota, period = (root / "cpu.max").read_text().split()[:2]
        if quota != "max":
            return int(quota) / int(period)
        return None
    except (OSError, ValueError):
        pass
    try:
        quota = int((root / "cpu" / "cpu.cfs_quota_us").read_text())
        period = int((root / "cpu" / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None


def usable_cores(root: Path = CGROUP_ROOT) -> int:
    """CPU cores this process may use: its CPU affinity, capped by a container's quota.

    >>> usable_cores() >= 1
    True
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no sched_getaffinity
        cores = os.cpu_count() or 1
    quota = _cgroup_cores(root)
    if quota is not None:
        cores = min(cores, math.ceil(quota))
    return max(1, cores)


def threads_per_rank(world_size: int, cores: int | None = None) -> int:
    """Torch threads per rank that share ``cores`` among ``world_size`` ranks evenly.

    The course's own launches use :data:`THREADS_PER_RANK` instead, so that
    their results are the same on every machine; this is the rule for speed
    on your own machine (``10_performance`` measures both).

    Args:
        world_size: number of ranks sharing the machine.
        cores: cores available; defaults to :func:`usable_cores`.

    >>> threads_per_rank(2, cores=8)
    4
    >>> threads_per_rank(4, cores=2)
    1
    """
    cores = usable_cores() if cores is None else cores
    return max(1, cores // max(1, world_size))


def gpus_for(world_size: int, gpus: int | None = None) -> bool:
    """True when this machine has a GPU for each of ``world_size`` ranks (so NCCL can run).

    >>> gpus_for(2, gpus=1), gpus_for(2, gpus=2), gpus_for(1, gpus=0)
    (False, True, False)
    """
    gpus = torch.cuda.device_count() if gpus is None else gpus
    return gpus >= world_size >= 1


def device_for(rank: int, world_size: int, *, gpus: int | None = None) -> torch.device:
    """The device that process ``rank`` of ``world_size`` trains on.

    ``cuda:rank`` when the machine has a GPU for every rank (the rank is the
    GPU number, exactly as the lesson uses it); otherwise the CPU, since
    NCCL cannot put two ranks on one GPU.

    Args:
        rank: the process's rank, as supplied by ``mp.spawn``.
        world_size: how many ranks the launch has.
        gpus: GPUs to assume; defaults to ``torch.cuda.device_count()``.

    >>> device_for(1, 2, gpus=0)
    device(type='cpu')
    >>> device_for(1, 2, gpus=4)
    device(type='cuda', index=1)
    >>> device_for(1, 2, gpus=1)
    device(type='cpu')
    """
    whole_number("rank", rank)
    whole_number("world_size", world_size, minimum=1)
    if rank >= world_size:
        raise ValueError(f"rank must be below world_size ({world_size}), got {rank}")
    if gpus_for(world_size, gpus):
        return torch.device("cuda", rank)
    return torch.device("cpu")


def gpu_named(device: object) -> str | None:
    """``"cuda:N"`` (or ``"cuda"``) when ``device`` names a GPU, else ``None``.

    What ``Module.to`` and the tensor factories would be given: a number, a
    string or a ``torch.device`` (a ``bool`` is no device).

    >>> gpu_named(1), gpu_named("cuda"), gpu_named(torch.device("cpu")), gpu_named(True)
    ('cuda:1', 'cuda', None, None)
    """
    if isinstance(device, bool):
        return None
    if isinstance(device, int):
        return f"cuda:{device}"
    if isinstance(device, str | torch.device):
        try:
            device = torch.device(device)
        except (RuntimeError, TypeError):
            return None
        if device.type == "cuda":
            return "cuda" if device.index is None else f"cuda:{device.index}"
    return None


def ddp_device_ids(device: torch.device) -> list[int] | None:
    """The ``device_ids`` argument DDP wants for a module on ``device``.

    ``[rank]`` for a GPU module, ``None`` for a CPU module: DDP raises a
    ``ValueError`` if it is given ``device_ids`` for a CPU module.

    >>> ddp_device_ids(torch.device("cpu")) is None
    True
    >>> ddp_device_ids(torch.device("cuda", 3))
    [3]
    """
    if device.type == "cuda":
        return [device.index]
    return None


def another_size(world_size: int) -> int | None:
    """One rank more than ``world_size`` if this machine runs it, else one fewer (none below 1):
    the world a check runs an answer in again, so that a number written in for this
    machine's world shows."""
    try:
        return check_world_size(world_size + 1)
    except ValueError:
        return world_size - 1 if world_size > 1 else None


def check_world_size(
    world_size: object,
    *,
    gpus: int | None = None,
    cores: int | None = None,
    source: str = "world_size",
) -> int:
    """Return ``world_size`` if this machine can run that many ranks, else explain why not.

    Any world size from 1 up runs: with a GPU for every rank on the GPUs,
    otherwise as CPU processes, up to :data:`MAX_CPU_PROCESSES_PER_CORE` per
    core.

    Args:
        world_size: the number of processes to start.
        gpus: CUDA GPUs available; defaults to ``torch.cuda.device_count()``.
        cores: CPU cores available; defaults to :func:`usable_cores`.
        source: where the value came from, named in the messages (e.g.
            ``"$DDP_LESSON_WORLD_SIZE"``).

    Raises:
        TypeError: ``world_size`` is not a whole number.
        ValueError: it is below 1, or more CPU processes than this machine can run.

    >>> check_world_size(2, gpus=0, cores=2)
    2
    """
    gpus = torch.cuda.device_count() if gpus is None else gpus
    cores = usable_cores() if cores is None else cores
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(
            f"{source} must be a whole number, got {world_size!r} "
            f"({type(world_size).__name__}); use e.g. {_set(source, DEFAULT_CPU_WORLD_SIZE)}"
        )
    if world_size < 1:
        hint = (
            "torch.cuda.device_count() is 0 on a CPU-only machine, and "
            "mp.spawn(..., nprocs=0) silently starts nothing; "
            f"{_set(source, DEFAULT_CPU_WORLD_SIZE)} to run on CPU processes"
            if gpus == 0
            else f"this machine has {gpus} GPU(s); {_set(source, max(gpus, 2))}"
        )
        raise ValueError(f"{source} must be >= 1, got {world_size}: {hint}")
    limit = MAX_CPU_PROCESSES_PER_CORE * cores
    if not gpus_for(world_size, gpus) and world_size > limit:
        raise ValueError(
            f"{source}={world_size} is more CPU processes than this machine can run usefully "
            f"({cores} core(s), at most {limit}); {_set(source, DEFAULT_CPU_WORLD_SIZE)}"
        )
    return world_size


def _set(source: str, value: int) -> str:
    """How to give ``source`` the value ``value``, in the words a learner would type."""
    if source.startswith("$"):
        return f"set {source[1:]}={value} (or unset it)"
    if " " in source:  # a control of a view: what to type into it
        return f"type {value}"
    return f"pass {source}={value}"


def _reason(world_size: int, gpus: int) -> str:
    if gpus_for(world_size, gpus):
        return f"a GPU for each of the {world_size} ranks: one process per GPU, NCCL"
    if gpus == 0:
        return f"no CUDA GPU: {world_size} CPU processes that talk over gloo"
    if gpus == 1:
        return (
            "one CUDA GPU: NCCL needs a GPU of its own for every rank, and one process alone "
            f"has nothing to synchronise, so {world_size} CPU processes talk over gloo"
        )
    return (
        f"{world_size} ranks but {gpus} GPUs: NCCL needs a GPU of its own for every rank, so "
        f"the ranks run on the CPU over gloo; ask for {gpus} or fewer to use the GPUs"
    )


def _from_environment(gpus: int, cores: int) -> int:
    """The world size ``$DDP_LESSON_WORLD_SIZE`` asks for, or the default; a bad value warns."""
    default = gpus if gpus >= 2 else DEFAULT_CPU_WORLD_SIZE
    raw = os.environ.get(WORLD_SIZE_ENV, "").strip()
    if not raw:
        return default
    try:
        return check_world_size(int(raw), gpus=gpus, cores=cores, source=f"${WORLD_SIZE_ENV}")
    except ValueError as error:
        problem = (
            str(error)
            if "must be" in str(error) or "more CPU" in str(error)
            else f"${WORLD_SIZE_ENV} must be a whole number, got {raw!r}; "
            f"{_set('$' + WORLD_SIZE_ENV, DEFAULT_CPU_WORLD_SIZE)}"
        )
        warnings.warn(f"{problem}. Using world_size={default} instead.", stacklevel=3)
        return default


def plan(
    world_size: int | None = None, *, gpus: int | None = None, cores: int | None = None
) -> Plan:
    """Decide backend, device type and world size for this machine.

    Args:
        world_size: processes to start. ``None`` means ``$DDP_LESSON_WORLD_SIZE``
            if it is set (a bad value warns and is ignored), else one per GPU
            with two GPUs or more, else ``DEFAULT_CPU_WORLD_SIZE`` (2).
        gpus: GPUs to assume; defaults to ``torch.cuda.device_count()``
            (tests and examples pass a number to show other machines).
        cores: cores to assume; defaults to :func:`usable_cores`.

    Raises:
        ValueError: ``world_size`` is below 1 or more than this machine can run.

    >>> [(p.world_size, p.backend) for p in (plan(gpus=g, cores=2) for g in (0, 1, 2, 8))]
    [(2, 'gloo'), (2, 'gloo'), (2, 'nccl'), (8, 'nccl')]
    """
    gpus = torch.cuda.device_count() if gpus is None else gpus
    cores = usable_cores() if cores is None else cores
    if world_size is None:
        world_size = _from_environment(gpus, cores)
    world_size = check_world_size(world_size, gpus=gpus, cores=cores)
    reason = _reason(world_size, gpus)
    if gpus_for(world_size, gpus):
        return Plan("nccl", "cuda", world_size, gpus, cores, reason)
    return Plan("gloo", "cpu", world_size, gpus, cores, reason)
