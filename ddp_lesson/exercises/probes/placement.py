"""Where a learner's ``wrap`` puts the model when the rank is given a GPU (``05_ddp_wrap``).

On a machine without GPUs every device is the CPU, where a model already
is: a ``wrap`` that never moves the model passes the plain run. This probe
gives each rank a stand-in GPU (``cuda:rank``, see
:func:`.launchers.simulate_gpus`): ``Module.to`` and ``Module.cuda`` note the
GPU asked for and keep the model on the CPU, and DDP leaves out
``device_ids`` for the model the stand-in kept there. What is reported is
the GPU the wrapped model was sent to, if any.
"""

from __future__ import annotations

from typing import TypedDict

import torch
from torch import nn

from ... import group
from ...devices import gpu_named
from ...launch import torch_hooks
from ...reports import send_typed, sends
from ...sources import load
from .launchers import simulate_gpus


class PlacementReport(TypedDict):
    """What :func:`wrap_given_a_gpu` sends."""

    rank: int
    given: str  # the stand-in GPU wrap was given
    asked: list[str]  # the GPUs the wrapped model was sent to, in order ("cuda": the current)
    wrapper_asked: list[str]  # the GPUs the wrapper itself was sent to once it had wrapped
    device_ids: list[str] | None  # the GPUs DDP was told the model is on (None: not told)
    current: str  # the GPU ``torch.cuda.set_device`` last chose ("cuda:0" if never called)


#: The GPUs each module was sent to, by the module's id (filled by the stand-ins).
_asked: dict[int, list[str]] = {}
#: What the last DDP(...) was told: ``device_ids`` as GPU names.
_told: dict[str, list[str] | None] = {"device_ids": None}


def _stand_in_placement() -> None:
    """Make ``Module.to``/``Module.cuda`` note a GPU and stay on the CPU; DDP accept that."""
    from torch.nn.parallel import DistributedDataParallel

    def module_to(torch_to):
        def to(self, *args, **kwargs):
            device = kwargs.get("device", args[0] if args else None)
            asked = gpu_named(device)
            if asked is None:
                return torch_to(self, *args, **kwargs)
            _asked.setdefault(id(self), []).append(asked)
            rest = {k: v for k, v in kwargs.items() if k not in ("device", "non_blocking")}
            return torch_to(self, *args[1:], **rest) if args[1:] or rest else self

        return to

    def module_cuda(torch_cuda):
        def cuda(self, device=None):
            _asked.setdefault(id(self), []).append("cuda" if device is None else gpu_named(device))
            return self

        return cuda

    def ddp_init(torch_init):
        def __init__(self, module, *args, **kwargs):
            ids = kwargs.get("device_ids", args[0] if args else None)
            _told["device_ids"] = None if ids is None else [gpu_named(i) or str(i) for i in ids]
            kwargs.pop("device_ids", None)  # the model the stand-in kept on the CPU has none
            kwargs.pop("output_device", None)
            args = (None, None, *args[2:])[: len(args)]  # device_ids, output_device: none
            torch_init(self, module, *args, **kwargs)

        return __init__

    torch_hooks.wrap(torch_hooks.point(nn.Module, "to"), module_to)
    torch_hooks.wrap(torch_hooks.point(nn.Module, "cuda"), module_cuda)
    torch_hooks.wrap(torch_hooks.point(DistributedDataParallel, "__init__"), ddp_init)


@sends(PlacementReport)
def wrap_given_a_gpu(rank: int, world_size: int, port: int, path: str) -> None:
    """Call the learner's ``wrap(model, rank, cuda:rank)`` with stand-in GPUs; report where to."""
    from ...models import NeuralNetwork

    worker = load(path)
    group.join(rank, world_size, port)  # on the CPU, before the stand-ins
    try:
        chosen = simulate_gpus(world_size)
        _stand_in_placement()
        given = torch.device(f"cuda:{rank}")
        model = NeuralNetwork()
        wrapped = worker.wrap(model, rank, given)
        inner = getattr(wrapped, "module", wrapped)
        asked = _asked.get(id(inner)) or _asked.get(id(model)) or []
        # (the wrapper's own .to() reaches the model too, but after DDP(...) took it as it was)
        later = _asked.get(id(wrapped), []) if wrapped is not inner else []
        send_typed(PlacementReport(
            rank=rank, given=str(given), asked=list(asked), wrapper_asked=list(later),
            device_ids=_told["device_ids"], current=chosen(),
        ))  # fmt: skip
    finally:
        group.leave()
