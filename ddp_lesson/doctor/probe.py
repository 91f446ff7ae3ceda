"""What the doctor installs inside each process of a learner's run, and what it records.

The doctor (:mod:`ddp_lesson.doctor`) starts a learner's file for real, and
every process it starts calls :func:`install` before the learner's code
runs. From then on, a few torch entry points also write down what they did:

* ``mp.spawn`` / ``start_processes``: how many processes, with which arguments;
* ``init_process_group``: the rank and world size claimed, the backend asked
  for. The group always meets at the doctor's own store on 127.0.0.1, whatever
  ``MASTER_ADDR``/``MASTER_PORT`` or ``init_method`` say, so a fixed port copied
  from a tutorial never stops the run, even when it is busy;
* collectives called from the learner's file: each waits until every rank has
  arrived at the same one, and stops at once, with the evidence, when a rank
  has finished without it, or when the group was already destroyed;
* ``DataLoader`` iteration: the indices each rank got, epoch by epoch (only
  the first few batches of an epoch are used, to keep the run short), and
  each ``DistributedSampler``'s line and ``set_epoch`` calls;
* backward passes: the sum of the parameters each one trains (whatever
  updates them, an optimiser or the learner's own code), and which
  parameters of a DDP model got no gradient;
* ``DistributedDataParallel``: where and how it wrapped the model, and whether
  forward passes went through it;
* optimiser steps: parameters after the first steps, to compare across ranks;
* ``destroy_process_group``, and whether the group was still alive when
  ``main`` returned;
* an exception: its line in the learner's file, and the stage of the torch
  call that raised it (a DDP forward, a sampler, a collective...).

Each process starts in :mod:`.start`, one way in per launch style, which
installs this and then calls :func:`call_main` or runs the file.

Without a GPU for every rank (as the course's device policy has it), a
script written for GPUs still runs: ``"nccl"`` becomes ``"gloo"``, ``cuda``
devices become the CPU (``torch.load``'s ``map_location`` too), and the
device each rank asked for is recorded, which is what the doctor checks.
When the script asks how many GPUs there are, ``torch.cuda`` and
``torch.accelerator`` answer one for each rank (``torch.accelerator`` only
to the learner's own calls: torch's code keeps asking the real machine).

Records go back through a :class:`ddp_lesson.reports.Channel` of the
doctor's, one per process, rewritten after every event so that a rank that
hangs or dies still leaves its evidence behind.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import inspect
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import DataLoader, RandomSampler
from torch.utils.data import dataloader as _dataloader
from torch.utils.data.distributed import DistributedSampler

from .. import reports
from ..launch import ranks, torch_hooks
from . import sandbox
from .read import COLLECTIVES
from .record import ProcessRecord, Settings

#: Optimiser steps (and backward passes) whose parameters are recorded.
STEPS_KEPT = 3

#: Parameter values kept per step, evenly spaced (a large model's are not all sent).
PARAMS_KEPT = 4096

#: The steps of DDP that wait for every rank inside torch (its own collectives).
DDP_STEPS = ("backward", "DistributedDataParallel")

#: Seconds a rank may stay in one DDP step while another waits in a collective of
#: the learner's before the two count as stuck on different collectives.
STUCK_S = 2.0

#: Where an exception raised inside torch belongs: the module it was raised in.
TORCH_STAGES = (
    ("torch.nn.parallel", "model_wrapping"),
    ("torch.cuda", "model_wrapping"),
    ("torch.utils.data", "data_division"),
    ("torch.distributed", "process_group"),
    ("torch.multiprocessing", "spawning"),
)


class DoctorStop(RuntimeError):
    """Raised inside a rank when the doctor already knows the run cannot go on."""


_state: dict = {"installed": False, "record": None}
_local = threading.local()


def _set(owners: object | tuple[object, ...], name: str, value: object) -> None:
    """Make ``name`` on ``owners`` ``value`` for the rest of this (recorded) process."""
    torch_hooks.wrap(torch_hooks.point(owners, name), lambda previous: value)


def _wrap(owners: object | tuple[object, ...], name: str, make: Callable) -> None:
    """Make ``name`` on ``owners`` ``make(previous)`` for the rest of this process."""
    torch_hooks.wrap(torch_hooks.point(owners, name), make)


_original: dict[str, object] = {}
_learner_files: dict[str, bool] = {}


# -- recording ---------------------------------------------------------------------
def _save() -> None:
    """Send this process's record to the doctor's folder (replacing the previous one).

    Only from the process that recorded it: a process forked from a rank
    (a DataLoader worker) holds a stale copy that must not replace it.
    """
    record, channel = _state.get("record"), _state.get("channel")
    if record is not None and channel is not None and _state.get("pid") == os.getpid():
        channel.send(record.index, record.fields())


def _is_learner(filename: str) -> bool:
    if filename not in _learner_files:
        settings = _state.get("settings")
        target = settings.file if settings else ""
        _learner_files[filename] = bool(target) and os.path.realpath(filename) == target
    return _learner_files[filename]


def _frame_line(frame) -> int | None:
    while frame is not None:
        if _is_learner(frame.f_code.co_filename):
            return frame.f_lineno
        frame = frame.f_back
    return None


def learner_line(depth: int = 2) -> int | None:
    """The line of the learner's file that is running now, if it is on the stack."""
    return _frame_line(sys._getframe(depth))


def _first_line(error: BaseException) -> str:
    """The first sentence of an exception's message (torch's run on for a paragraph)."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    end = first.find(". ")
    return first[: end + 1] if end > 0 else first


def _error_entry(error: BaseException, **extra) -> dict:
    """What an exception says about the run: its line in the learner's file and its stage."""
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        frames.append((frame.f_code.co_filename, tb.tb_lineno, frame.f_globals.get("__name__")))
        tb = tb.tb_next
    mine = [i for i, (filename, _, _) in enumerate(frames) if _is_learner(filename)]
    line = frames[mine[-1]][1] if mine else None
    if line is None and isinstance(error, SyntaxError) and _is_learner(error.filename or ""):
        line = error.lineno
    stage = getattr(error, "doctor_stage", None)
    if stage is None and mine:
        below = [str(module or "") for _, _, module in frames[mine[-1] + 1 :]]
        stage = next(
            (key for module in below for prefix, key in TORCH_STAGES if module.startswith(prefix)),
            None,
        )
    record = _state.get("record")
    if stage == "process_group" and record is not None and record.destroyed:
        stage = "teardown"  # the group was gone already
    entry = {
        "type": type(error).__name__,
        "message": _first_line(error),
        "line": line,
        "stage": stage,
        "time": time.time(),
        # stopped from outside (the deadline, a launcher); SystemExit is the script's own
        "interrupted": isinstance(error, KeyboardInterrupt),
        "call": False,
        "import": False,
    }
    entry.update(extra)
    return entry


@contextlib.contextmanager
def _owned(stage: str):
    """Mark an exception raised inside as belonging to ``stage``."""
    try:
        yield
    except Exception as error:
        if getattr(error, "doctor_stage", None) is None:
            with contextlib.suppress(AttributeError, TypeError):
                error.doctor_stage = stage
        raise


@contextlib.contextmanager
def _blocking(op: str, line: int | None):
    """Around a call that may wait inside torch's C++ code for the other ranks.

    A Python signal handler runs only once such a call returns, so while it
    waits, a SIGTERM (the deadline, or torch stopping the peers of a failed
    rank) must end the process at once, as it would without the doctor: the
    record already says where it waits.
    """
    record = _state["record"]
    main = threading.current_thread() is threading.main_thread()
    record.waiting = {"op": op, "line": line}
    _save()
    _say_where(op, line)
    handler = signal.getsignal(signal.SIGTERM) if main else None
    if handler is _on_terminate:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        if handler is _on_terminate:
            signal.signal(signal.SIGTERM, handler)
        record.waiting = None


def _say_where(op: str, line: int | None) -> None:
    """Tell the other ranks (through the store) which DDP step this rank waits in."""
    record = _state["record"]
    if op in DDP_STEPS and _state.get("store") is not None and record.claimed_rank is not None:
        _state["steps"] = steps = _state.get("steps", 0) + 1
        with contextlib.suppress(Exception):
            _state["store"].set(f"doctor/where/{record.claimed_rank}", f"{op}:{line}:{steps}")


def _on_terminate(signum, frame) -> None:
    """At the deadline: note the learner's line this process was running, then stop."""
    record = _state.get("record")
    if record is not None:
        record.stopped_at = _frame_line(frame)
        with contextlib.suppress(Exception):
            _save()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


# -- devices (only when this machine has no GPU for every rank) ---------------------------
def _cuda_name(device: object) -> str | None:
    """``"cuda:N"`` (or ``"cuda"``) if ``device`` names a GPU, else ``None``."""
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


def _to_cpu(args: tuple, kwargs: dict) -> tuple[tuple, dict, str | None]:
    asked = None
    if "device" in kwargs and (asked := _cuda_name(kwargs["device"])):
        kwargs = {**kwargs, "device": "cpu"}
    elif args and (asked := _cuda_name(args[0])):
        args = ("cpu", *args[1:])
    return args, kwargs, asked


def _place(module: nn.Module, asked: str | None, line: int | None) -> None:
    record = _state["record"]
    if record is not None and line is not None:
        record.placements.append({"asked": asked or "cpu", "line": line})
        module._doctor_asked = asked


#: Tensor factories a GPU script calls with ``device="cuda:N"``.
FACTORIES = (
    "tensor", "as_tensor", "zeros", "ones", "empty", "full", "rand", "randn", "randint",
    "arange", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
)  # fmt: skip


def _on_cpu(factory: Callable) -> Callable:
    def made(*args, **kwargs):
        if "device" in kwargs and _cuda_name(kwargs["device"]):
            kwargs = {**kwargs, "device": "cpu"}
        return factory(*args, **kwargs)

    made.__doc__ = factory.__doc__
    return made


def _cpu_location(location: object) -> object:
    """``torch.load``'s ``map_location`` with every GPU it names as the CPU stand-in."""
    if isinstance(location, dict):
        return {k: "cpu" if _cuda_name(v) else v for k, v in location.items()}
    if isinstance(location, str | torch.device) and _cuda_name(location):
        return "cpu"
    return location


def _load_on_cpu(load: Callable) -> Callable:
    def loaded(f, map_location=None, *args, **kwargs):
        return load(f, _cpu_location(map_location), *args, **kwargs)

    loaded.__doc__ = load.__doc__
    return loaded


def _called_by_learner(depth: int = 2) -> bool:
    """The learner's file called the function that asks (not torch itself, e.g. DataLoader)."""
    return _is_learner(sys._getframe(depth).f_code.co_filename)


def _install_accelerator(gpus: int) -> None:
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
    _original.update({f"accelerator.{name}": f for name, f in real.items()})
    chosen = [0]  # the index set_device_index (or torch.cuda.set_device) chose

    def answer(name: str, stand_in: Callable) -> Callable:
        def asked(*args, **kwargs):
            if _called_by_learner():
                return stand_in(*args, **kwargs)
            return real[name](*args, **kwargs)

        asked.__doc__ = real[name].__doc__
        return asked

    def set_index(device, /):
        _record_set_device(device, learner_line(3))

    stand_ins = {
        "is_available": lambda: True,
        "device_count": lambda: gpus,
        "current_accelerator": lambda check_available=False: torch.device("cuda"),
        "set_device_index": set_index,
        "current_device_index": lambda: chosen[0],
        "synchronize": lambda device=None, /: None,
        "empty_cache": lambda: None,
    }
    for name, stand_in in stand_ins.items():
        if name in real:
            _set(accelerator, name, answer(name, stand_in))
    _state["chosen"] = chosen
    current_device = _original["current_device"] = torch.cuda.current_device

    def current_cuda_device():
        return chosen[0] if _called_by_learner() else current_device()

    current_cuda_device.__doc__ = current_device.__doc__
    _set(torch.cuda, "current_device", current_cuda_device)


def _record_set_device(device: object, line: int | None) -> None:
    record = _state["record"]
    if record is not None:
        record.set_device.append({"asked": _cuda_name(device), "line": line})
    name = _cuda_name(device)
    chosen = _state.get("chosen")
    if chosen is not None and name and ":" in name:
        chosen[0] = int(name.split(":")[1])


def _install_cpu_stand_ins(gpus: int) -> None:
    tensor_to, module_to = torch.Tensor.to, nn.Module.to

    def tensor_to_cpu(self, *args, **kwargs):
        args, kwargs, _ = _to_cpu(args, kwargs)
        return tensor_to(self, *args, **kwargs)

    def module_to_cpu(self, *args, **kwargs):
        args, kwargs, asked = _to_cpu(args, kwargs)
        _place(self, asked, learner_line())
        return module_to(self, *args, **kwargs)

    def module_cuda_cpu(self, device=None):
        # no device: the current one, which torch.cuda.set_device chose
        _place(self, "cuda" if device is None else _cuda_name(device), learner_line())
        return self

    def set_device(device):
        _record_set_device(device, learner_line())

    _set(torch.Tensor, "to", tensor_to_cpu)
    _set(torch.Tensor, "cuda", lambda self, *a, **k: self)
    _set(nn.Module, "to", module_to_cpu)
    _set(nn.Module, "cuda", module_cuda_cpu)
    _original["set_device"] = torch.cuda.set_device
    _set(torch.cuda, "set_device", set_device)
    _set(torch.cuda, "synchronize", lambda device=None: None)
    _set(torch.cuda, "empty_cache", lambda: None)
    for name in FACTORIES:
        _set(torch, name, _on_cpu(getattr(torch, name)))
    _original["load"] = torch.load
    _set((torch, torch.serialization), "load", _load_on_cpu(torch.load))
    if gpus:
        _original["device_count"] = torch.cuda.device_count
        _set(torch.cuda, "device_count", lambda: gpus)
        _install_accelerator(gpus)


def _install_placement_record() -> None:
    module_to = nn.Module.to

    def module_to_recorded(self, *args, **kwargs):
        line = learner_line()
        if line is not None:
            device = kwargs.get("device", args[0] if args else None)
            _place(self, _cuda_name(device), line)
        return module_to(self, *args, **kwargs)

    _set(nn.Module, "to", module_to_recorded)


# -- the process group ----------------------------------------------------------------
def _store() -> dist.TCPStore:
    store = _state.get("store")
    if store is None:
        settings = _state["settings"]
        store = dist.TCPStore(
            "127.0.0.1",
            settings.port,
            is_master=False,
            timeout=datetime.timedelta(seconds=settings.wait_s),
        )
        _state["store"] = store
    return store


def _backend(asked: object) -> str:
    """The backend the group uses: what was asked, with NCCL as gloo when CUDA stands in."""
    stand_in = _state["settings"].stand_in
    if asked is None:
        return "gloo" if stand_in or not torch.cuda.is_available() else "nccl"
    text = str(asked)
    if stand_in and "nccl" in text.lower():
        return "gloo"
    return text


def _init_process_group(*args, **kwargs):
    record = _state["record"]
    if dist.is_initialized() and record.init:
        _called_again(record.init["line"])
    bound = inspect.signature(_original["init_process_group"]).bind_partial(*args, **kwargs)
    given = bound.arguments
    rank = given.get("rank", -1)
    world_size = given.get("world_size", -1)
    rank = int(os.environ.get("RANK", -1)) if rank in (-1, None) else rank
    world_size = (
        int(os.environ.get("WORLD_SIZE", -1)) if world_size in (-1, None) else world_size
    )
    asked = given.get("backend")
    used = _backend(asked)
    record.claimed_rank, record.claimed_world_size = rank, world_size
    record.init = {
        "line": learner_line(),
        "asked": str(asked),
        "backend": used,
        "address": os.environ.get("MASTER_ADDR"),
    }
    _state["init_frames"] = _learner_frames(sys._getframe(1))
    _save()
    nprocs = _state.get("nprocs", 0)
    if world_size is None or world_size < 1 or rank is None or not 0 <= rank < world_size:
        _stop(
            "process_group",
            f"init_process_group got rank={rank}, world_size={world_size}: the rank must "
            "be in 0..world_size-1 (pass rank=rank, world_size=world_size)",
        )
    if nprocs and world_size > nprocs:
        _stop(
            "spawning",
            f"only {nprocs} process(es) were started for a world of {world_size}: the "
            "group would wait forever for the missing ranks; start world_size processes "
            "(nprocs=world_size)",
        )
    store = _store()
    if store.add(f"doctor/rank/{rank}", 1) > 1:
        _stop(
            "process_group",
            f"two processes both claimed rank {rank} in init_process_group: each "
            "process must pass its own rank (the one mp.spawn gives main, or torchrun's "
            "RANK)",
        )
    timeout = datetime.timedelta(seconds=_state["settings"].wait_s)
    with _owned("process_group"), _blocking("init_process_group", record.init["line"]):
        _original["init_process_group"](
            used, store=store, rank=rank, world_size=world_size, timeout=timeout
        )
    record.init["joined"] = True
    _save()


def _learner_frames(frame) -> list[tuple[object, int]]:
    """The learner's frames on the stack, innermost first, each with the line it is at."""
    found = []
    while frame is not None:
        if _is_learner(frame.f_code.co_filename):
            found.append((frame, frame.f_lineno))
        frame = frame.f_back
    return found


def _called_again(first: int | None) -> None:
    """init_process_group again while this process's group is up: stop at the repeated call.

    The call that repeats is the line, in a function still running since the
    first call, that leads to this one (a loop that runs ``setup()`` every
    epoch: that ``setup()`` line).
    """
    before = {id(frame): line for frame, line in _state.get("init_frames", [])}
    now = _learner_frames(sys._getframe(2))
    shared = next(((f, line) for f, line in now if id(f) in before), None)
    line = shared[1] if shared else (now[0][1] if now else None)
    how = (
        f"line {line} runs again (it is in a loop)"
        if shared and before[id(shared[0])] == line
        else f"it was called at line {first}, and again at line {line}"
    )
    _stop(
        "process_group",
        f"init_process_group is called again while the group it made (line {first}) is "
        f"still up: {how}, and torch refuses a second default group; call it once per "
        "process, before the training loop (to start a new group on purpose, call "
        "destroy_process_group() first)",
        line,
    )


def _destroy_process_group(*args, **kwargs):
    record = _state["record"]
    first = record.destroyed is None
    _state.pop("init_frames", None)  # a later init_process_group is no repeat
    if first:
        record.destroyed = {"line": learner_line()}
        _mark_done()
        _save()
    with _owned("teardown"):
        return _original["destroy_process_group"](*args, **kwargs)


def _mark_done() -> None:
    record = _state["record"]
    if record.claimed_rank is not None and _state.get("store") is not None:
        try:
            done = str(len(record.collectives))
            _state["store"].set(f"doctor/done/{record.claimed_rank}", done)
        except Exception:  # the store may be gone at the very end
            pass


def _stop(stage: str, evidence: str, line: int | None = None) -> None:
    record = _state["record"]
    record.stop = {
        "stage": stage,
        "evidence": evidence,
        "line": line or learner_line(3),
        "time": time.time(),
    }
    _mark_done()
    _save()
    raise DoctorStop(evidence)


def _wait_for_all(name: str, line: int, step: int, rank: int, size: int) -> None:
    """Wait until every rank has reached collective number ``step``; stop if one never will.

    A rank that never will has ended (its ``done`` key), or sits in a DDP step
    (a backward pass averaging gradients) that itself waits for this rank.
    """
    store = _store()
    keys = [f"doctor/coll/{step}/{r}" for r in range(size)]
    deadline = time.monotonic() + _state["settings"].wait_s
    seen: dict[int, tuple[bytes, float]] = {}  # what each missing rank was doing, since when
    while time.monotonic() < deadline:
        missing = [r for r in range(size) if not store.check([keys[r]])]
        if not missing:
            break
        for other in missing:
            if store.check([f"doctor/done/{other}"]):
                done = int(store.get(f"doctor/done/{other}"))
                made = f" (it made {done} collective call(s) of its own)" if done else ""
                _stop(
                    "process_group",
                    f"rank {rank} waits in {name}() (line {line}), but rank {other} "
                    f"ended without calling it{made}: every rank must call each "
                    "collective, in the same order",
                    line,
                )
            _check_stuck(name, line, rank, other, seen)
        with contextlib.suppress(dist.DistStoreError):
            store.wait([keys[missing[0]]], datetime.timedelta(seconds=0.25))
    else:
        return  # the real call waits out the group's own timeout
    ops = {r: store.get(keys[r]).decode() for r in range(size)}
    if len({op.split(":")[0] for op in ops.values()}) > 1:
        said = ", ".join(f"rank {r}: {op.replace(':', ' at line ')}" for r, op in ops.items())
        _stop(
            "process_group",
            f"the ranks called different collectives at the same point ({said}): "
            "every rank must call the same collectives in the same order",
            line,
        )


def _check_stuck(name: str, line: int, rank: int, other: int, seen: dict) -> None:
    """Stop when ``other`` has sat in one DDP step all the while this rank waited for it."""
    store = _state["store"]
    key = f"doctor/where/{other}"
    if not store.check([key]):
        return
    where = store.get(key)
    now = time.monotonic()
    if other not in seen or seen[other][0] != where:
        seen[other] = (where, now)
        return
    if now - seen[other][1] < STUCK_S:
        return
    op, at, _ = where.decode().split(":")
    what = "a backward pass, where DDP averages gradients" if op == "backward" else "DDP(...)"
    _stop(
        "process_group",
        f"rank {rank} waits in {name}() (line {line}) while rank {other} waits in {what} "
        f"(line {at}), which needs every rank: the ranks are at different collectives, so "
        "both would wait until the timeout; every rank must call the same collectives in "
        "the same order",
        line,
    )


def _collective(name: str) -> Callable:
    real = _original[name]
    signature = inspect.signature(real)

    def checked(*args, **kwargs):
        line = learner_line()
        record = _state["record"]
        if line is None or record is None:
            return real(*args, **kwargs)
        if not dist.is_initialized():
            if record.destroyed:
                _stop(
                    "teardown",
                    f"{name}() at line {line} runs after destroy_process_group() at line "
                    f"{record.destroyed['line']} released the group, so it has no group "
                    "to run in; destroy the group after the last collective",
                    record.destroyed["line"],  # where the fix goes
                )
            return real(*args, **kwargs)
        group = signature.bind_partial(*args, **kwargs).arguments.get("group")
        if group is not None and group is not dist.group.WORLD:
            return real(*args, **kwargs)  # a subgroup: not every rank takes part
        rank, size = dist.get_rank(), dist.get_world_size()
        step = len(record.collectives)
        record.collectives.append({"op": name, "line": line})
        _store().set(f"doctor/coll/{step}/{rank}", f"{name}:{line}")
        _wait_for_all(name, line, step, rank, size)
        with _blocking(name, line):
            return real(*args, **kwargs)

    return checked


# -- data -------------------------------------------------------------------------------
def _loader_init(original):
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self._doctor_line = learner_line()
        self._doctor_number = _state["loaders"] = _state.get("loaders", 0) + 1
        try:
            self._index_sampler._doctor_loader = self
        except AttributeError:
            pass

    return init


def _next_index(original):
    def next_index(self):
        if getattr(self, "_doctor_iter", None) is not self._sampler_iter:
            _begin_epoch(self)
        return original(self)

    return next_index


def _begin_epoch(iterator) -> None:
    """Record the whole epoch's indices, then let only the first few batches through."""
    iterator._doctor_iter = iterator._sampler_iter
    if iterator._dataset_kind == _dataloader._DatasetKind.Iterable:
        return  # an iterable data set has no indices to record
    batches = list(iterator._sampler_iter)
    keep = _state["settings"].batches
    iterator._sampler_iter = iter(batches[:keep])
    iterator._doctor_iter = iterator._sampler_iter
    record = _state["record"]
    if record is None:
        return
    loader = getattr(iterator._index_sampler, "_doctor_loader", None)
    sampler = getattr(loader, "sampler", None)
    shuffle = getattr(sampler, "shuffle", isinstance(sampler, RandomSampler))
    flat = [int(i) for batch in batches for i in (batch if isinstance(batch, list) else [batch])]
    entry = {
        "line": getattr(loader, "_doctor_line", None),
        "loader": getattr(loader, "_doctor_number", 0),
        "size": len(iterator._dataset) if hasattr(iterator._dataset, "__len__") else None,
        "sampler": type(sampler).__name__,
        "sampler_line": getattr(sampler, "_doctor_line", None),
        "sampler_id": id(sampler),
        "replicas": getattr(sampler, "num_replicas", None),
        "shuffle": bool(shuffle),
        "epoch": getattr(sampler, "epoch", None),
        "indices": flat,
        "dropped": _dropped(iterator._index_sampler, len(flat)),
        "batches": len(batches),
        "used": min(keep, len(batches)),
        "trained": False,
    }
    record.loaders.append(entry)
    _state["epoch"] = entry
    _save()


def _dropped(batches: object, taken: int) -> int:
    """Indices the sampler gave that no batch took (a DataLoader's ``drop_last=True``)."""
    sampler = getattr(batches, "sampler", None)
    if not getattr(batches, "drop_last", False) or not hasattr(sampler, "__len__"):
        return 0
    try:
        return max(0, len(sampler) - taken)
    except TypeError:
        return 0


def _sampler_init(original):
    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self._doctor_line = learner_line()

    return init


def _set_epoch(original):
    def set_epoch(self, epoch):
        record, line = _state["record"], learner_line()
        if record is not None and line is not None:
            record.set_epochs.append({"epoch": epoch, "line": line, "sampler_id": id(self)})
        return original(self, epoch)

    return set_epoch


# -- training ---------------------------------------------------------------------------
def _trained_parameters(tensors) -> list[torch.Tensor]:
    """The parameters a backward pass from ``tensors`` trains: the leaves of its graph."""
    roots = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors or ())
    pending = [t.grad_fn for t in roots if isinstance(t, torch.Tensor) and t.grad_fn]
    seen, leaves = set(), {}
    while pending:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            leaves.setdefault(id(variable), variable)
        pending.extend(next_node for next_node, _ in node.next_functions)
    return list(leaves.values())


def _note_backward(tensors) -> None:
    record = _state["record"]
    if record is None or len(record.trained) > STEPS_KEPT:
        return
    params = _trained_parameters(tensors)
    if not params:
        return
    with torch.no_grad():
        total = float(sum(p.detach().double().sum() for p in params))
    count = sum(p.numel() for p in params)
    record.trained.append({"at": len(record.trained), "sum": total, "count": count})


def _note_unused() -> None:
    """After a backward pass: the parameters of each DDP model that got no gradient."""
    changed = False
    for entry, module in _state.get("ddp", []):
        if entry["unused"] is None:
            entry["unused"] = [
                name
                for name, p in module.named_parameters()
                if p.requires_grad and p.grad is None
            ]
            changed = True
    if changed:
        _save()


def _backward(original):
    def backward(tensors, *args, **kwargs):
        _note_backward(tensors)
        entry = _state.get("epoch")
        if entry is not None and not entry["trained"]:
            entry["trained"] = True
            _save()
        if _state.get("ddp"):  # DDP averages gradients while backward runs
            with _blocking("backward", learner_line()):
                result = original(tensors, *args, **kwargs)
        else:
            result = original(tensors, *args, **kwargs)
        _note_unused()
        return result

    return backward


def _ddp_init(original):
    def init(self, module, *args, **kwargs):
        record = _state["record"]
        line = learner_line()
        bound = inspect.signature(original).bind_partial(self, module, *args, **kwargs)
        device_ids = bound.arguments.get("device_ids")
        entry = {
            "line": line,
            "device_ids": None
            if device_ids is None
            else [d if isinstance(d, int) else str(d) for d in device_ids],
            "module_device": str(next(module.parameters()).device)
            if any(True for _ in module.parameters())
            else "none",
            "asked": getattr(module, "_doctor_asked", None),
            "error": None,
            "find_unused": bool(bound.arguments.get("find_unused_parameters", False)),
            "static_graph": bool(bound.arguments.get("static_graph", False)),
            "unused": None,
        }
        record.ddp.append(entry)
        # which parameters DDP keeps in step: an optimiser may train more
        _state.setdefault("in_ddp", set()).update(id(p) for p in module.parameters())
        if _state["settings"].stand_in and entry["asked"]:
            # The model asked for a GPU and got the CPU from the doctor: drop the
            # GPU-only arguments that DDP would refuse for a CPU module.
            bound.arguments.pop("device_ids", None)
            bound.arguments.pop("output_device", None)
        try:
            with _owned("model_wrapping"), _blocking("DistributedDataParallel", line):
                original(*bound.args, **bound.kwargs)
        except Exception as error:
            entry["error"] = f"{type(error).__name__}: {_first_line(error)}"
            _save()
            raise
        module.register_forward_pre_hook(_count_forward)
        _state.setdefault("ddp", []).append((entry, module))
        _save()

    return init


def _ddp_forward(original):
    def forward(self, *args, **kwargs):
        _local.in_ddp = getattr(_local, "in_ddp", 0) + 1
        try:
            return original(self, *args, **kwargs)
        finally:
            _local.in_ddp -= 1

    return forward


def _count_forward(module, inputs) -> None:
    if not torch.is_grad_enabled():
        return
    forwards = _state["record"].forwards
    if getattr(_local, "in_ddp", 0):
        forwards["wrapped"] += 1
    else:
        forwards["raw"] += 1
        forwards["raw_line"] = forwards["raw_line"] or learner_line(3)


def _after_step(optimizer, args, kwargs) -> None:
    record = _state["record"]
    if record is None or len(record.steps) >= STEPS_KEPT:
        return
    params = [p.detach() for group in optimizer.param_groups for p in group["params"]]
    grads = [p.grad for group in optimizer.param_groups for p in group["params"]]
    with torch.no_grad():
        total = float(sum(p.double().sum() for p in params))
        grad_sum = float(sum(g.double().abs().sum() for g in grads if g is not None))
        flat = torch.cat([p.reshape(-1).float().cpu() for p in params])
    record.steps.append({"params": total, "grads": grad_sum})
    in_ddp = _state.get("in_ddp")
    if in_ddp:  # what the optimiser trains outside every DDP module, by position
        record.outside = [
            {"index": i, "shape": list(p.shape), "sum": float(p.double().sum())}
            for i, p in enumerate(params) if id(p) not in in_ddp
        ]
    # evenly spaced values are enough to see two ranks apart, and keep the record small
    record.params = flat[:: max(1, flat.numel() // PARAMS_KEPT)].clone()
    _save()


# -- installing ---------------------------------------------------------------------------
def install(settings: Settings, index: int, *, nprocs: int = 0, script: bool = False) -> None:
    """Start recording in this process.

    Args:
        settings: what the doctor told this run.
        index: the process number (mp.spawn's index, torchrun's RANK; 0 for the script).
        nprocs: how many processes were started together with this one (0: unknown).
        script: this is the script's own process, which starts the ranks.
    """
    _learner_files.clear()
    _state.update(
        record=ProcessRecord(index, script=script),
        settings=settings,
        pid=os.getpid(),
        channel=reports.Channel(Path(settings.folder) / ("script" if script else "ranks")),
        nprocs=nprocs or settings.nprocs,
        store=None,
        ddp=[],
        epoch=None,
        loaders=0,
    )
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_terminate)
    if _state["installed"]:
        return
    _state["installed"] = True
    sandbox.install(sandbox.root(settings.folder), own_folders(settings))
    ranks.pause_after_destroy()  # recorded below, then the pause (a torch deadlock at teardown)
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    for name, patched in (
        ("init_process_group", _init_process_group),
        ("destroy_process_group", _destroy_process_group),
    ):
        _original[name] = getattr(c10d, name)
        _set((c10d, dist), name, patched)
    for name in COLLECTIVES:
        if hasattr(c10d, name):
            _original[name] = getattr(c10d, name)
            _set((c10d, dist), name, _collective(name))
    _wrap(DataLoader, "__init__", _loader_init)
    _wrap(_dataloader._BaseDataLoaderIter, "_next_index", _next_index)
    _wrap(DistributedSampler, "__init__", _sampler_init)
    _wrap(DistributedSampler, "set_epoch", _set_epoch)
    _wrap(torch.autograd, "backward", _backward)
    _wrap(DistributedDataParallel, "__init__", _ddp_init)
    _wrap(DistributedDataParallel, "forward", _ddp_forward)
    register_optimizer_step_post_hook(_after_step)
    if settings.stand_in:
        _install_cpu_stand_ins(settings.gpus)
    else:
        _install_placement_record()
    if "ddp_lesson.group" in sys.modules:  # the lesson's ddp_setup, imported before this
        rewire(vars(sys.modules["ddp_lesson.group"]))


def own_folders(settings: Settings) -> list[str]:
    """Paths a diagnosed process writes for real: the launch's folders, torchrun's error file."""
    from ..launch import FOLDER_PREFIX

    # the doctor's folder lies beside the launch's (both in the doctor's temporary folder)
    folders = [settings.folder, os.path.join(os.path.dirname(settings.folder), FOLDER_PREFIX)]
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:
        folders.append(os.path.dirname(os.path.abspath(error_file)))
    return folders


def rewire(namespace: dict) -> None:
    """Point names a learner imported before :func:`install` (``from torch.distributed
    import init_process_group``) at the recording versions."""
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    swaps = {id(original): getattr(c10d, name, None) for name, original in _original.items()}
    swaps[id(_original.get("set_device"))] = torch.cuda.set_device
    swaps[id(_original.get("device_count"))] = torch.cuda.device_count
    swaps[id(_original.get("current_device"))] = torch.cuda.current_device
    swaps[id(_original.get("load"))] = torch.load
    for key, original in _original.items():
        if key.startswith("accelerator."):
            swaps[id(original)] = getattr(torch.accelerator, key.split(".", 1)[1])
    for key, value in list(namespace.items()):
        replacement = swaps.get(id(value))
        if replacement is not None and callable(value):
            namespace[key] = replacement


# -- what a process's entry point uses (see :mod:`.start`) ----------------------------------
def current() -> ProcessRecord:
    """This process's record."""
    return _state["record"]


def settings() -> Settings:
    """What the doctor told this run."""
    return _state["settings"]


def save() -> None:
    """Send this process's record now."""
    _save()


def error_entry(error: BaseException, **extra) -> dict:
    """How an exception is recorded (see :attr:`ProcessRecord.error`)."""
    return _error_entry(error, **extra)


def finish(leave: bool = True) -> None:
    """The learner's code ended normally: record how it left the group, then leave at once.

    ``leave=False`` returns instead, for a process whose starter exits it
    without the interpreter's shutdown once its function has returned
    (multiprocessing's, which must first hand torch the return value).
    """
    record = _state["record"]
    record.returned = True
    gc.collect()
    record.alive_at_return = dist.is_initialized()
    _mark_done()
    _save()
    if dist.is_initialized():
        _original["destroy_process_group"]()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without the interpreter's shutdown: it is slow after DDP and can
    # abort on torch's native threads, which is not what is being diagnosed.
    if leave:
        os._exit(0)


def failed(error: BaseException) -> None:
    """The learner's code raised: record it (unless the doctor stopped it on purpose)."""
    record = _state["record"]
    if not isinstance(error, DoctorStop) and record.error is None:
        record.error = _error_entry(error)
    _mark_done()
    _save()


def exit_code(done: SystemExit) -> int:
    if done.code is None:
        return 0
    return done.code if isinstance(done.code, int) else 1


def call_main(index: int, fn: Callable, args: tuple) -> None:
    """Call the learner's ``fn(index, *args)`` and record how it ended."""
    record = _state["record"]
    rewire(getattr(fn, "__globals__", {}))
    try:
        inspect.signature(fn).bind(index, *args)
    except TypeError as error:
        takes = len(inspect.signature(fn).parameters)
        message = (
            f"{getattr(fn, '__name__', 'main')}() takes {takes} argument(s), but it was "
            f"called with {1 + len(args)}: the rank plus the {len(args)} argument(s) "
            f"given ({error})"
        )
        record.error = {
            "type": "TypeError",
            "message": message,
            "line": None,
            "stage": "spawning",
            "time": time.time(),
            "interrupted": False,
            "call": True,
            "import": False,
        }
        _save()
        raise
    try:
        fn(index, *args)
    except SystemExit as done:
        if exit_code(done):
            failed(done)
            raise
    except BaseException as error:
        failed(error)
        raise
    finish()
