"""Tensors on stand-in GPUs, and the collectives they are handed to, in a rank without GPUs.

NCCL, the backend on GPUs, reduces only tensors on the rank's GPU: a flag
or a count made on the CPU (``torch.tensor([correct, seen])``) fails there,
and passes every CPU run, where gloo takes the CPU tensors a CPU machine
has. Inside :class:`StandInGPUs` every tensor is still on the CPU, but one
that would be on a GPU carries the GPU's name:

* a tensor made with ``device=`` a GPU, or sent to one (``.to(device)``,
  ``.cuda()``), is marked with it (``.cpu()`` and ``.to("cpu")`` give an
  unmarked copy);
* what any torch operation returns is marked as its first marked input
  was, as on a GPU the result is where its inputs are;
* ``.device``, ``.is_cuda`` and ``.get_device()`` of a marked tensor answer
  as on that GPU, so that ``torch.zeros(2, device=x.device)`` follows.

:func:`note_collectives` records, for every ``all_reduce`` (and the other
collectives of ``torch.distributed``) the learner's code calls, whether
each tensor handed to it was marked, with the learner's line.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TypedDict

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

from ...devices import gpu_named
from ...launch import torch_hooks

#: The attribute that holds the stand-in GPU a tensor would be on.
MARK = "_stand_in_gpu"

#: The collectives of ``torch.distributed`` whose tensors are noted.
COLLECTIVES = (
    "all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor",
    "reduce_scatter_tensor", "all_to_all_single",
)  # fmt: skip


class Handed(TypedDict):
    """One collective call: its name, the learner's line, and the GPU of each tensor handed."""

    collective: str
    line: int  # the line of the learner's file that called it
    gpus: list[str | None]  # per tensor handed, the stand-in GPU it is on (None: the CPU)


#: The collective calls noted in this rank since :func:`note_collectives`; the rank's
#: hooks on torch write it, called by the learner's code with nothing to carry it.
_handed: list[Handed] = []


def gpu_of(value: object) -> str | None:
    """The stand-in GPU ``value`` is on, or None (not a tensor, or on the CPU)."""
    return getattr(value, MARK, None) if isinstance(value, torch.Tensor) else None


def place(tensors: Iterable[torch.Tensor], gpu: str | None) -> None:
    """Mark each of ``tensors`` as on ``gpu`` (None: on the CPU)."""
    for tensor in tensors:
        if isinstance(tensor, torch.Tensor):
            setattr(tensor, MARK, gpu)


class StandInGPUs(TorchFunctionMode):
    """``with StandInGPUs("cuda:1"):`` GPU tensors are CPU tensors marked with their GPU.

    Args:
        current: the GPU ``"cuda"`` and ``.cuda()`` mean (the rank's).
    """

    def __init__(self, current: str) -> None:
        super().__init__()
        self.current = current

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        asked = _property(func, args)
        if asked is not None:
            return asked
        if func in (torch.Tensor.to, torch.Tensor.cuda, torch.Tensor.cpu):
            return self._moved(func, args, kwargs)
        device = kwargs.get("device")
        gpu = self._gpu(device) if not isinstance(device, torch.Tensor) else None
        if gpu is not None:  # a factory asked for a GPU: made on the CPU, marked
            made = func(*args, **{**kwargs, "device": "cpu"})
            place(tree_flatten(made)[0], gpu)
            return made
        out = func(*args, **kwargs)
        marked = next(filter(None, map(gpu_of, tree_flatten((args, kwargs))[0])), None)
        if marked is not None:
            place(tree_flatten(out)[0], marked)
        return out

    def _gpu(self, device: object) -> str | None:
        gpu = gpu_named(device) if device is not None else None
        return self.current if gpu == "cuda" else gpu

    def _moved(self, func, args: tuple, kwargs: dict) -> torch.Tensor:
        """``.to``/``.cuda``/``.cpu``: the tensor, marked with where it went (a copy if moved)."""
        tensor, rest = args[0], args[1:]
        if func is torch.Tensor.cpu:
            target = None
        elif func is torch.Tensor.cuda:
            asked = rest[0] if rest else kwargs.get("device")
            target = self.current if asked is None else self._gpu(asked)
        else:
            asked = kwargs.get("device", rest[0] if rest else None)
            if isinstance(asked, torch.Tensor):  # .to(other): where the other is
                asked = gpu_of(asked) or "cpu"
            target = gpu_of(tensor) if asked is None or isinstance(asked, torch.dtype) else (
                self._gpu(asked))  # fmt: skip
        dtypes = [a for a in rest if isinstance(a, torch.dtype)]
        kept = {k: v for k, v in kwargs.items() if k in ("dtype", "copy", "memory_format")}
        out = torch.Tensor.to(tensor, *dtypes, **kept)
        if out is tensor and target != gpu_of(tensor):
            out = tensor.clone()  # moved: a new tensor; the one moved stays where it was
        place([out], target)
        return out


def _property(func, args: tuple) -> object | None:
    """What ``.device``, ``.is_cuda`` or ``.get_device()`` of a marked tensor says, or None."""
    owner = getattr(func, "__self__", None)
    asked = getattr(owner, "__name__", None) if getattr(func, "__name__", "") == "__get__" else (
        "get_device" if func is torch.Tensor.get_device else None)  # fmt: skip
    gpu = gpu_of(args[0]) if args else None
    if gpu is None or asked not in ("device", "is_cuda", "get_device"):
        return None
    device = torch.device(gpu)
    return {"device": device, "is_cuda": True, "get_device": device.index or 0}[asked]


def note_collectives(path: str) -> list[Handed]:
    """Note every collective of ``torch.distributed`` called from here on; return the notes.

    Wrapped before the learner's file at ``path`` is loaded, so that a name
    it imports (``from torch.distributed import all_reduce``) is the
    wrapped one. Each note names the line of that file that made the call.
    """
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    for name in COLLECTIVES:
        owners = (dist, distributed_c10d) if hasattr(dist, name) else (distributed_c10d,)
        torch_hooks.wrap(torch_hooks.point(owners, name), _noting(name, path))
    return _handed


def _noting(name: str, path: str):
    """The ``make`` that wraps collective ``name`` to note its tensors (one per name and file)."""

    def make(collective):
        def noted(*args, **kwargs):
            caller = sys._getframe(1)
            if caller.f_code.co_filename == path:  # (not torch's own, as all_gather_object's)
                flat = tree_flatten((args, kwargs))[0]
                gpus = [gpu_of(t) for t in flat if isinstance(t, torch.Tensor)]
                _handed.append(Handed(collective=name, line=caller.f_lineno, gpus=gpus))
            return collective(*args, **kwargs)

        return noted

    return _makers.setdefault((name, path), make)


#: One ``make`` per function, file (and answer), so that wrapping twice changes nothing
#: (:func:`.torch_hooks.wrap` knows a wrapping by its ``make``).
_makers: dict[tuple, object] = {}


def as_on_gpus(path: str, index: int) -> None:
    """The learner's file at ``path`` sees NCCL and ``cuda:index`` as the current GPU.

    ``dist.get_backend()`` answers ``"nccl"`` and ``torch.cuda.current_device()``
    ``index``, to calls made from that file only (torch's own code keeps
    asking the real group and machine), so that an answer which picks its
    device from the backend picks the GPU.
    """
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    for owners, name, answer in (
        ((dist, distributed_c10d), "get_backend", "nccl"),
        ((torch.cuda,), "current_device", index),
    ):
        torch_hooks.wrap(torch_hooks.point(owners, name), _answering(path, name, answer))


def _answering(path: str, name: str, answer: object):
    """The ``make`` that has ``name`` answer ``answer`` to the file at ``path`` (one per key)."""

    def make(own):
        def answered(*args, **kwargs):
            if sys._getframe(1).f_code.co_filename == path:
                return answer
            return own(*args, **kwargs)

        return answered

    return _makers.setdefault((name, path, answer), make)
