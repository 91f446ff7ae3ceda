"""Catch, on a machine without GPUs, the tensors that would break a worker under NCCL.

Under NCCL every tensor that enters a collective must sit on the rank's
GPU; a CPU tensor fails ("No backend type associated with device type
cpu"). On a CPU-only machine the rank's device *is* the CPU, so the mistake
never shows. This guard makes it show: inside a rank, a
``TorchFunctionMode`` marks every tensor made on the host without being
asked for a device (a factory such as ``torch.zeros`` called without
``device=``, or ``.cpu()``), and whatever is computed from marked tensors
alone; ``.to(device)`` and ``.cuda()`` take the mark off. The collectives
of ``torch.distributed`` refuse a marked tensor, naming the worker's line.

Used by tests/test_gpu_path.py: each lesson and solution worker runs
through :func:`main`, which turns the guard on in the rank and then calls
the worker's own ``main``.
"""

from __future__ import annotations

import functools
import importlib
import sys
import traceback
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode

#: Factories that make a tensor on the default device unless told otherwise.
FACTORIES = {
    torch.zeros, torch.ones, torch.empty, torch.full, torch.tensor, torch.arange,
    torch.rand, torch.randn, torch.randint, torch.eye, torch.linspace,
    torch.as_tensor, torch.from_numpy, torch.randperm,
}  # fmt: skip

#: Collectives that take tensors.
COLLECTIVES = (
    "all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
    "reduce_scatter", "reduce_scatter_tensor", "gather", "scatter", "all_to_all",
    "all_to_all_single", "send", "recv", "isend", "irecv",
)  # fmt: skip

MARK = "_made_on_the_host"


class HostTensorError(RuntimeError):
    """A tensor made on the host entered a collective."""


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _tensors(item)


def _mark(value, made: str | None) -> None:
    for tensor in _tensors(value):
        try:
            setattr(tensor, MARK, made)
        except (AttributeError, RuntimeError):
            pass


def _names_a_device(args, kwargs) -> bool:
    if "device" in kwargs:
        return True
    return any(isinstance(a, torch.device | str | int) and not isinstance(a, bool) for a in args)


class HostTensors(TorchFunctionMode):
    """Marks tensors made on the host; ``.to(device)`` unmarks (see the module)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        name = getattr(func, "__name__", "")
        if func in FACTORIES:
            if "device" not in kwargs:
                _mark(out, f"torch.{name}(...) without device=")
        elif name == "cpu":
            _mark(out, ".cpu()")
        elif name in ("to", "cuda"):
            if _names_a_device(args[1:], kwargs) or name == "cuda":
                _mark(out, None)
        else:
            inputs = list(_tensors(args))
            made = [getattr(t, MARK, None) for t in inputs]
            fresh = [o for o in _tensors(out) if not any(o is a for a in inputs)]
            if inputs and all(made) and fresh:
                _mark(fresh, made[0])  # computed from host tensors alone
        return out


def _worker_line() -> str:
    """The innermost line of the learner's code on the stack (not torch, not the course)."""
    machinery = ("site-packages", "/lib/python", "/ddp_lesson/", "device_guard.py", "<frozen")
    frames = [
        f for f in traceback.extract_stack() if not any(m in f.filename for m in machinery)
    ]
    if not frames:
        return "(no line of the worker's own)"
    frame = frames[-1]
    path = Path(frame.filename)
    return f"{path.parent.name}/{path.name}, line {frame.lineno}: {frame.line}"


def _guarded(name: str, real):
    def collective(*args, **kwargs):
        for tensor in _tensors(list(args) + list(kwargs.values())):
            made = getattr(tensor, MARK, None)
            if made:
                raise HostTensorError(
                    f"a tensor made on the host ({made}) entered {name}() at "
                    f"{_worker_line()}; under NCCL it must be on the rank's device: "
                    "create it with device=device or move it with .to(device)"
                )
        return real(*args, **kwargs)

    return collective


def guard() -> HostTensors:
    """Turn the guard on in this process (collectives wrapped); return the mode to enter."""
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    for name in COLLECTIVES:
        real = getattr(c10d, name, None)
        if real is not None and not getattr(real, "guarded", False):
            wrapped = _guarded(name, real)
            wrapped.guarded = True
            setattr(c10d, name, wrapped)
            setattr(dist, name, wrapped)
    return HostTensors()


def main(rank, world_size, port, module, *args):
    """What each rank runs: the guard, then ``module.main(rank, world_size, port, *args)``."""
    mode = guard()
    worker = importlib.import_module(module)  # after guard(): its imports see the wrappers
    with mode:
        worker.main(rank, world_size, port, *args)


def main_waiting_at_most(rank, world_size, port, seconds, module, *args):
    """:func:`main`, with the group's timeout cut to ``seconds`` if the worker asks for longer.

    For a worker whose ranks end up waiting for each other on purpose: they
    stop at ``seconds`` instead of the worker's own timeout, every
    collective they entered before that checked as usual.
    """
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    real = c10d.init_process_group
    limit = timedelta(seconds=seconds)

    @functools.wraps(real)
    def init_process_group(*given, **kwargs):
        if len(given) > 2:  # (backend, init_method, timeout, ...)
            given = (*given[:2], min(given[2] or limit, limit), *given[3:])
        else:
            kwargs["timeout"] = min(kwargs.get("timeout") or limit, limit)
        return real(*given, **kwargs)

    c10d.init_process_group = dist.init_process_group = init_process_group
    main(rank, world_size, port, module, *args)
