"""Which devices this machine offers, and how the course uses them.

One policy for the whole course: when CUDA GPUs exist, one process per GPU
talking over NCCL; when none exist, CPU processes talking over gloo, two by
default. Notebooks, launches and tests all ask this module.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from .validate import whole_number

#: Processes started on a CPU-only machine unless told otherwise.
DEFAULT_CPU_WORLD_SIZE = 2

#: Environment variable that overrides the CPU world size for every notebook.
WORLD_SIZE_ENV = "DDP_LESSON_WORLD_SIZE"

#: More CPU processes than this per core only measures the scheduler.
MAX_CPU_PROCESSES_PER_CORE = 4


@dataclass(frozen=True)
class Plan:
    """What a launch on this machine will look like.

    Attributes:
        backend: ``"nccl"`` with CUDA GPUs, ``"gloo"`` without.
        device_type: ``"cuda"`` or ``"cpu"``.
        world_size: how many processes ``mp.spawn`` should start.
        gpus: what ``torch.cuda.device_count()`` reported.
        cores: CPU cores this process may use.
    """

    backend: str
    device_type: str
    world_size: int
    gpus: int
    cores: int

    @property
    def threads_per_rank(self) -> int:
        """Torch threads each rank should use so ranks share the cores evenly."""
        return threads_per_rank(self.world_size, self.cores)

    def device(self, rank: int) -> torch.device:
        """The device that process ``rank`` owns (``cuda:rank`` or ``cpu``)."""
        return device_for(rank, self.device_type)

    def describe(self) -> str:
        """A few lines saying what a launch on this machine will do."""
        if self.device_type == "cuda":
            what = f"{self.world_size} processes, one per GPU (cuda:0..cuda:{self.world_size - 1})"
        else:
            what = f"{self.world_size} CPU processes (no CUDA GPU found)"
        return "\n".join(
            [
                f"CUDA GPUs reported by torch.cuda.device_count(): {self.gpus}",
                f"backend: {self.backend}",
                f"world_size: {self.world_size} -> {what}",
                f"torch threads per rank: {self.threads_per_rank} "
                f"({self.cores} cores // {self.world_size} ranks)",
            ]
        )


def usable_cores() -> int:
    """CPU cores this process may run on (respects CPU affinity and cgroups)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS and Windows have no sched_getaffinity
        return max(1, os.cpu_count() or 1)


def threads_per_rank(world_size: int, cores: int | None = None) -> int:
    """Torch threads per rank that keep ``world_size`` ranks from oversubscribing.

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


def device_for(rank: int, device_type: str | None = None) -> torch.device:
    """The device that process ``rank`` trains on.

    On GPUs the rank is the GPU index, exactly as the lesson uses it; on CPU
    every rank uses the CPU.

    Args:
        rank: the process's rank, as supplied by ``mp.spawn``.
        device_type: ``"cuda"`` or ``"cpu"``; defaults to what this machine has.

    >>> device_for(1, "cpu")
    device(type='cpu')
    >>> device_for(1, "cuda")
    device(type='cuda', index=1)
    """
    whole_number("rank", rank)
    device_type = device_type or ("cuda" if torch.cuda.is_available() else "cpu")
    if device_type not in ("cuda", "cpu"):
        raise ValueError(f"device_type must be 'cuda' or 'cpu', got {device_type!r}")
    if device_type == "cuda":
        return torch.device("cuda", rank)
    return torch.device("cpu")


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


def check_world_size(
    world_size: object, *, gpus: int | None = None, cores: int | None = None
) -> int:
    """Return ``world_size`` if this machine can run that many ranks, else explain why not.

    Args:
        world_size: the number of processes to start.
        gpus: CUDA GPUs available; defaults to ``torch.cuda.device_count()``.
        cores: CPU cores available; defaults to :func:`usable_cores`.

    Raises:
        TypeError: ``world_size`` is not a whole number.
        ValueError: it is below 1, or more than this machine can run.

    >>> check_world_size(2, gpus=0, cores=2)
    2
    """
    gpus = torch.cuda.device_count() if gpus is None else gpus
    cores = usable_cores() if cores is None else cores
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(
            f"world_size must be a whole number, got {world_size!r} "
            f"({type(world_size).__name__}); pass e.g. world_size=2"
        )
    if world_size < 1:
        hint = (
            "torch.cuda.device_count() is 0 on a CPU-only machine, and "
            "mp.spawn(..., nprocs=0) silently starts nothing; "
            f"pass world_size={DEFAULT_CPU_WORLD_SIZE} to run on CPU processes"
            if gpus == 0
            else f"this machine has {gpus} GPU(s); pass world_size={gpus}"
        )
        raise ValueError(f"world_size must be >= 1, got {world_size}: {hint}")
    if gpus > 0 and world_size > gpus:
        raise ValueError(
            f"world_size={world_size} asks for more processes than GPUs: this machine has {gpus}, "
            f"and each rank owns one GPU (cuda:rank); pass world_size={gpus} or fewer"
        )
    limit = MAX_CPU_PROCESSES_PER_CORE * cores
    if gpus == 0 and world_size > limit:
        raise ValueError(
            f"world_size={world_size} is more CPU processes than this machine can run usefully "
            f"({cores} cores, at most {limit}); pass world_size={DEFAULT_CPU_WORLD_SIZE}"
        )
    return world_size


def plan(world_size: int | None = None) -> Plan:
    """Decide backend, device type and world size for this machine.

    Args:
        world_size: processes to start. ``None`` means one per GPU, or on a
            CPU-only machine the value of ``$DDP_LESSON_WORLD_SIZE`` if set,
            else ``DEFAULT_CPU_WORLD_SIZE`` (2).

    Raises:
        ValueError: ``world_size`` is below 1 or more than this machine can run.
    """
    gpus = torch.cuda.device_count()
    cores = usable_cores()
    if world_size is None:
        if gpus > 0:
            world_size = gpus
        else:
            raw = os.environ.get(WORLD_SIZE_ENV, str(DEFAULT_CPU_WORLD_SIZE))
            try:
                world_size = int(raw)
            except ValueError:
                raise ValueError(
                    f"${WORLD_SIZE_ENV} must be a whole number, got {raw!r}; "
                    f"unset it or set e.g. {WORLD_SIZE_ENV}=2"
                ) from None
    world_size = check_world_size(world_size, gpus=gpus, cores=cores)
    if gpus > 0:
        return Plan("nccl", "cuda", world_size, gpus, cores)
    return Plan("gloo", "cpu", world_size, gpus, cores)
