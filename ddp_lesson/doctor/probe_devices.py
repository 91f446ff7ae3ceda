"""The CPU stand-ins for GPUs, and the record of the devices a learner's script asks for.

:func:`.probe.install` calls one of two installers here:

* :func:`install_cpu_stand_ins`, when this machine has no GPU for every rank
  (``Settings.stand_in``): a script written for GPUs runs on the CPU.
  ``.to(...)`` and ``.cuda()`` of tensors and modules, the tensor factories'
  ``device=``, ``torch.load``'s ``map_location`` and ``torch.cuda.set_device``
  name the CPU instead of a GPU, ``torch.cuda.synchronize`` /
  ``empty_cache`` do nothing, and ``torch.cuda``'s questions, events and
  streams get the CPU answers of :mod:`.probe_cuda_queries`. Each module's
  device and each ``set_device`` are recorded as asked, with the learner's
  line. With ``Settings.gpus``,
  ``torch.cuda.device_count`` answers that many GPUs, and so do
  ``torch.accelerator``, ``torch.cuda.is_available`` and
  ``torch.cuda.current_device``, to the learner's own calls only (torch's
  code, such as a DataLoader deciding whether to pin memory, keeps asking
  the real machine);
* :func:`install_placement_record`, on a machine with a GPU for every rank:
  ``nn.Module.to`` only records where the learner's modules go.

Every change goes through :func:`.probe_state.set_for_good`. torch's own functions that
:func:`.probe.rewire` must find again are kept in ``originals``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable

import torch
from torch import nn

from ..devices import gpu_named
from . import probe_cuda_queries
from .probe_state import is_learner, learner_line, originals, process_state, set_for_good


def to_cpu(args: tuple, kwargs: dict) -> tuple[tuple, dict, str | None]:
    asked = None
    if "device" in kwargs and (asked := gpu_named(kwargs["device"])):
        kwargs = {**kwargs, "device": "cpu"}
    elif args and (asked := gpu_named(args[0])):
        args = ("cpu", *args[1:])
    return args, kwargs, asked


def place(module: nn.Module, asked: str | None, line: int | None) -> None:
    record = process_state["record"]
    if record is not None and line is not None:
        record.placements.append({"asked": asked or "cpu", "line": line})
        module._doctor_asked = asked


#: Tensor factories a GPU script calls with ``device="cuda:N"``.
FACTORIES = (
    "tensor", "as_tensor", "zeros", "ones", "empty", "full", "rand", "randn", "randint",
    "arange", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
    "randperm", "eye", "linspace", "logspace", "scalar_tensor", "empty_strided",
)  # fmt: skip


def on_cpu(factory: Callable) -> Callable:
    """``factory`` with any GPU its ``device=`` names turned into the CPU.

    TorchScript (which torch's own modules use as they import, such as
    ``torch.distributed.optim``) still compiles a call of it as torch's
    operator: it cannot compile the replacement itself.
    """

    def made(*args, **kwargs):
        if "device" in kwargs and gpu_named(kwargs["device"]):
            kwargs = {**kwargs, "device": "cpu"}
            record = process_state["record"]
            if record is not None:
                record.gpu_tensors += 1
        return factory(*args, **kwargs)

    made.__doc__ = factory.__doc__
    from torch.jit import _builtins

    operator = _builtins._find_builtin(factory)
    if operator is not None:
        _builtins._register_builtin(made, operator)
    return made


def cpu_location(location: object) -> object:
    """``torch.load``'s ``map_location`` with every GPU it names as the CPU stand-in."""
    if isinstance(location, dict):
        return {k: "cpu" if gpu_named(v) else v for k, v in location.items()}
    if isinstance(location, str | torch.device) and gpu_named(location):
        return "cpu"
    return location


def load_on_cpu(load: Callable) -> Callable:
    def loaded(f, map_location=None, *args, **kwargs):
        return load(f, cpu_location(map_location), *args, **kwargs)

    loaded.__doc__ = load.__doc__
    return loaded


def called_by_learner(depth: int = 2) -> bool:
    """The learner's file called the function that asks (not torch itself, e.g. DataLoader)."""
    return is_learner(sys._getframe(depth).f_code.co_filename)


def install_accelerator(gpus: int) -> None:
    """``torch.accelerator`` (and ``torch.cuda.current_device``) answering as ``gpus`` GPUs do.

    Only for calls from the learner's file: torch's own code (a DataLoader
    deciding whether to pin memory) keeps asking the real machine.
    """
    accelerator = torch.accelerator
    real = {
        name: getattr(accelerator, name)
        for name in ("is_available", "device_count", "current_accelerator", "set_device_index",
                     "current_device_index", "synchronize", "empty_cache")
        if hasattr(accelerator, name)
    }  # fmt: skip
    originals.update({f"accelerator.{name}": f for name, f in real.items()})
    chosen = [0]  # the index set_device_index (or torch.cuda.set_device) chose

    def answer(name: str, stand_in: Callable) -> Callable:
        def asked(*args, **kwargs):
            if called_by_learner():
                return stand_in(*args, **kwargs)
            return real[name](*args, **kwargs)

        asked.__doc__ = real[name].__doc__
        return asked

    def set_index(device, /):
        record_set_device(device, learner_line(3))

    stand_ins = {
        "is_available": lambda: True,
        "device_count": lambda: counted(gpus),
        "current_accelerator": lambda check_available=False: torch.device("cuda"),
        "set_device_index": set_index,
        "current_device_index": lambda: chosen[0],
        "synchronize": lambda device=None, /: None,
        "empty_cache": lambda: None,
    }
    for name, stand_in in stand_ins.items():
        if name in real:
            set_for_good(accelerator, name, answer(name, stand_in))
    process_state["chosen"] = chosen
    current_device = originals["current_device"] = torch.cuda.current_device

    def current_cuda_device():
        return chosen[0] if called_by_learner() else current_device()

    current_cuda_device.__doc__ = current_device.__doc__
    set_for_good(torch.cuda, "current_device", current_cuda_device)


def counted(gpus: int) -> int:
    """The stand-in GPU count ``gpus``; the first learner's line that asked it is recorded."""
    record = process_state["record"]
    if record is not None and record.gpu_count is None:
        caller = sys._getframe(1)
        while caller is not None and caller.f_code.co_filename == __file__:
            caller = caller.f_back  # (the stand-ins here that called this)
        if caller is not None and is_learner(caller.f_code.co_filename):  # (not torch's own)
            record.gpu_count = {"line": caller.f_lineno, "answered": gpus}
    return gpus


def record_set_device(device: object, line: int | None) -> None:
    record = process_state["record"]
    if record is not None:
        record.set_device.append({"asked": gpu_named(device), "line": line})
    name = gpu_named(device)
    chosen = process_state.get("chosen")
    if chosen is not None and name and ":" in name:
        chosen[0] = int(name.split(":")[1])


def install_cpu_stand_ins(gpus: int) -> None:
    tensor_to, module_to = torch.Tensor.to, nn.Module.to

    def tensor_to_cpu(self, *args, **kwargs):
        args, kwargs, _ = to_cpu(args, kwargs)
        return tensor_to(self, *args, **kwargs)

    def module_to_cpu(self, *args, **kwargs):
        args, kwargs, asked = to_cpu(args, kwargs)
        place(self, asked, learner_line())
        return module_to(self, *args, **kwargs)

    def module_cuda_cpu(self, device=None):
        # no device: the current one, which torch.cuda.set_device chose
        place(self, "cuda" if device is None else gpu_named(device), learner_line())
        return self

    def set_device(device):
        record_set_device(device, learner_line())

    set_for_good(torch.Tensor, "to", tensor_to_cpu)
    set_for_good(torch.Tensor, "cuda", lambda self, *a, **k: self)
    set_for_good(nn.Module, "to", module_to_cpu)
    set_for_good(nn.Module, "cuda", module_cuda_cpu)
    originals["set_device"] = torch.cuda.set_device
    set_for_good(torch.cuda, "set_device", set_device)
    set_for_good(torch.cuda, "synchronize", lambda device=None: None)
    set_for_good(torch.cuda, "empty_cache", lambda: None)
    probe_cuda_queries.install(gpus)
    for name in FACTORIES:
        set_for_good(torch, name, on_cpu(getattr(torch, name)))
    originals["load"] = torch.load
    set_for_good((torch, torch.serialization), "load", load_on_cpu(torch.load))
    if gpus:
        originals["device_count"] = torch.cuda.device_count
        set_for_good(torch.cuda, "device_count", lambda: counted(gpus))
        available = originals["is_available"] = torch.cuda.is_available

        def is_available() -> bool:  # the learner's GPU branch runs, on the stand-ins
            return True if called_by_learner() else available()

        set_for_good(torch.cuda, "is_available", is_available)
        install_accelerator(gpus)


def install_placement_record() -> None:
    module_to = nn.Module.to

    def module_to_recorded(self, *args, **kwargs):
        line = learner_line()
        if line is not None:
            device = kwargs.get("device", args[0] if args else None)
            place(self, gpu_named(device), line)
        return module_to(self, *args, **kwargs)

    set_for_good(nn.Module, "to", module_to_recorded)
