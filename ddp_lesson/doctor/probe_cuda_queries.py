"""``torch.cuda``'s questions, timers and streams answered on the CPU stand-ins.

A script written for GPUs asks more of ``torch.cuda`` than where its tensors
go: the GPU's name and memory, CUDA events to time an epoch, a side stream
for its copies, ``with torch.cuda.device(rank):``, the CUDA random state for
a checkpoint. On a machine without CUDA each of those raises ("Torch not
compiled with CUDA enabled"), and the diagnosis would end at a line that is
right on the GPUs the script was written for. :func:`install` (called by
:func:`.probe_devices.install_cpu_stand_ins`) gives each a CPU answer that
says what it is: the device is named "CPU stand-in for cuda:N", memory figures
are the CPU's, an event times with the CPU clock, a stream runs at once.

A call this module does not cover still raises; :func:`.judge_crash.crash_finding`
then says that the stand-ins ended the run there, not the script
(:data:`.judge_crash.NO_CUDA`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from types import SimpleNamespace

import torch

from ..devices import gpu_named
from .probe_state import process_state, set_for_good


def _index(device: object = None) -> int:
    """The GPU number ``device`` names, or the one ``torch.cuda.set_device`` chose."""
    name = gpu_named(device) if device is not None else None
    if name and ":" in name:
        return int(name.split(":")[1])
    if isinstance(device, int):
        return device
    return (process_state.get("chosen") or [0])[0]


def _memory() -> tuple[int, int]:
    """This machine's free and total memory in bytes (what ``mem_get_info`` reports)."""
    page = os.sysconf("SC_PAGE_SIZE")
    return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page


def properties(device: object = None) -> SimpleNamespace:
    """What ``torch.cuda.get_device_properties`` reports for a stand-in."""
    return SimpleNamespace(
        name=f"CPU stand-in for cuda:{_index(device)}",
        total_memory=_memory()[1],
        major=0,
        minor=0,
        multi_processor_count=os.cpu_count() or 1,
        is_integrated=True,
    )


class Event:
    """A CUDA event on the CPU: ``record`` notes the CPU clock, ``elapsed_time`` is in ms."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False,
                 interprocess: bool = False) -> None:  # fmt: skip
        self.at: float | None = None

    def record(self, stream: object = None) -> None:
        self.at = time.perf_counter()

    def elapsed_time(self, end: Event) -> float:
        return ((end.at or 0.0) - (self.at or 0.0)) * 1000.0

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        """Nothing to wait for: the CPU ran the work already."""

    def wait(self, stream: object = None) -> None:
        """Nothing to wait for: the CPU ran the work already."""


class Stream:
    """A CUDA stream on the CPU: work on it has run by the time the call returns."""

    def __init__(self, device: object = None, priority: int = 0, **kwargs) -> None:
        self.device = torch.device("cuda", _index(device))

    def synchronize(self) -> None:
        """Nothing to wait for: the CPU ran the work already."""

    def wait_stream(self, stream: object) -> None:
        """Nothing to wait for: the CPU ran the work already."""

    def wait_event(self, event: object) -> None:
        """Nothing to wait for: the CPU ran the work already."""

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record()
        return event

    def query(self) -> bool:
        return True


class device:  # noqa: N801 (torch.cuda.device's own name)
    """``with torch.cuda.device(n):``: the stand-in GPU ``n`` is the current one inside."""

    def __init__(self, device: object) -> None:
        self.index = _index(device)
        self.before = 0

    def __enter__(self) -> device:
        chosen = process_state.get("chosen") or [0]
        self.before, chosen[0] = chosen[0], self.index
        return self

    def __exit__(self, *exc: object) -> None:
        (process_state.get("chosen") or [0])[0] = self.before


def _nothing(name: str) -> Callable:
    """``torch.cuda.<name>`` as a call with nothing to do on the CPU (reset memory
    statistics, a profiler mark): a function of its own for each name, since
    ``torch._dynamo`` refuses one object that stands under two torch names."""

    def nothing(*args, **kwargs) -> None:
        return None

    nothing.__name__ = nothing.__qualname__ = name
    return nothing


def install(gpus: int) -> None:
    """Answer ``torch.cuda``'s questions, timers and streams as ``gpus`` stand-in GPUs would."""
    cuda = torch.cuda
    answers = {
        "get_device_name": lambda device=None: properties(device).name,
        "get_device_properties": properties,
        "get_device_capability": lambda device=None: (0, 0),
        "mem_get_info": lambda device=None: _memory(),
        "memory_summary": lambda device=None, abbreviated=False: "CPU stand-in: no GPU memory",
        "utilization": lambda device=None: 0,
        "get_rng_state": lambda device="cuda": torch.get_rng_state(),
        "get_rng_state_all": lambda: [torch.get_rng_state() for _ in range(gpus or 1)],
        "current_stream": lambda device=None: Stream(device),
        "default_stream": lambda device=None: Stream(device),
        "stream": lambda stream=None: contextlib.nullcontext(stream),
        "Event": Event,
        "Stream": Stream,
        "device": device,
        "init": _nothing("init"),
    }
    for name in ("reset_peak_memory_stats", "reset_max_memory_allocated",
                 "reset_accumulated_memory_stats", "set_per_process_memory_fraction",
                 "ipc_collect", "set_rng_state", "set_rng_state_all"):  # fmt: skip
        answers[name] = _nothing(name)
    for name, answer in answers.items():
        set_for_good(cuda, name, answer)
    for name in ("range_push", "range_pop", "mark"):
        set_for_good(cuda.nvtx, name, _nothing(name))
    set_for_good(cuda.nvtx, "range", lambda *args, **kwargs: contextlib.nullcontext())
    set_for_good(torch.Tensor, "pin_memory", lambda self, *args, **kwargs: self)
    set_for_good(torch, "set_default_device", _default_device(torch.set_default_device))


def _default_device(original):
    """``torch.set_default_device`` with a GPU as the CPU, noted as GPU tensors asked for."""

    def set_default_device(device):
        if gpu_named(device):
            record = process_state["record"]
            if record is not None:
                record.gpu_tensors += 1  # what is made from here on asked for a GPU
            device = "cpu"
        return original(device)

    return set_default_device
