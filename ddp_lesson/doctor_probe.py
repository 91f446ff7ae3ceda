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
  has finished without it;
* ``DataLoader`` iteration: the indices each rank got, epoch by epoch (only
  the first few batches of an epoch are used, to keep the run short);
* ``DistributedDataParallel``: where and how it wrapped the model, and whether
  forward passes went through it;
* optimiser steps: parameters after the first steps, to compare across ranks;
* ``destroy_process_group``, and whether the group was still alive when
  ``main`` returned.

Without CUDA, a script written for GPUs still runs: ``"nccl"`` becomes
``"gloo"``, ``cuda`` devices become the CPU, and the device each rank asked for
is recorded, which is what the doctor checks.

Records go back through :func:`ddp_lesson.reports.send_report`, one per
process, rewritten after every event so that a rank that hangs or dies
still leaves its evidence behind.
"""

from __future__ import annotations

import datetime
import gc
import inspect
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils.data import DataLoader
from torch.utils.data import dataloader as _dataloader

from . import reports

#: Environment the doctor sets for the processes it runs.
DIR_ENV = "DDP_LESSON_DOCTOR_DIR"
PORT_ENV = "DDP_LESSON_DOCTOR_PORT"
FILE_ENV = "DDP_LESSON_DOCTOR_FILE"
NPROCS_ENV = "DDP_LESSON_DOCTOR_NPROCS"
BATCHES_ENV = "DDP_LESSON_DOCTOR_BATCHES"
WAIT_ENV = "DDP_LESSON_DOCTOR_WAIT_S"
GPUS_ENV = "DDP_LESSON_DOCTOR_GPUS"

#: Optimiser steps whose parameters are recorded.
STEPS_KEPT = 3


class DoctorStop(RuntimeError):
    """Raised inside a rank when the doctor already knows the run cannot go on."""


_state: dict = {"installed": False, "record": None, "index": None}
_local = threading.local()
_original: dict[str, object] = {}


# -- recording ---------------------------------------------------------------------
def _new_record(index: int) -> dict:
    return {
        "index": index,
        "claimed_rank": None,
        "claimed_world_size": None,
        "init": None,
        "placements": [],
        "set_device": [],
        "loaders": [],
        "ddp": [],
        "forwards": {"wrapped": 0, "raw": 0, "raw_line": None},
        "steps": [],
        "params": None,
        "collectives": [],
        "destroyed": None,
        "returned": False,
        "alive_at_return": False,
        "error": None,
        "stop": None,
    }


def _save() -> None:
    """Send this process's record (overwriting the previous one)."""
    record = _state["record"]
    if record is None:
        return
    folder = os.environ.get(DIR_ENV)
    if not folder:
        return
    saved = os.environ.get(reports.REPORT_DIR_ENV)
    os.environ[reports.REPORT_DIR_ENV] = os.path.join(folder, _state["key"] or "ranks")
    os.makedirs(os.environ[reports.REPORT_DIR_ENV], exist_ok=True)
    try:
        fields = {k: v for k, v in record.items() if k != "index"}
        reports.send_report(record["index"], **fields)
    finally:
        if saved is None:
            os.environ.pop(reports.REPORT_DIR_ENV, None)
        else:
            os.environ[reports.REPORT_DIR_ENV] = saved


_learner_files: dict[str, bool] = {}


def _is_learner(filename: str) -> bool:
    if filename not in _learner_files:
        target = os.environ.get(FILE_ENV, "")
        _learner_files[filename] = bool(target) and os.path.realpath(filename) == target
    return _learner_files[filename]


def learner_line(depth: int = 2) -> int | None:
    """The line of the learner's file that is running now, if it is on the stack."""
    frame = sys._getframe(depth)
    while frame is not None:
        if _is_learner(frame.f_code.co_filename):
            return frame.f_lineno
        frame = frame.f_back
    return None


def _traceback_line(error: BaseException) -> int | None:
    lines = [f.lineno for f in traceback.extract_tb(error.__traceback__) if _is_learner(f.filename)]
    return lines[-1] if lines else None


# -- devices (only when this machine has no CUDA) -------------------------------------
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
        record["placements"].append({"asked": asked or "cpu", "line": line})
        module._doctor_asked = asked


def _install_cpu_stand_ins() -> None:
    tensor_to, module_to = torch.Tensor.to, nn.Module.to

    def tensor_to_cpu(self, *args, **kwargs):
        args, kwargs, _ = _to_cpu(args, kwargs)
        return tensor_to(self, *args, **kwargs)

    def module_to_cpu(self, *args, **kwargs):
        args, kwargs, asked = _to_cpu(args, kwargs)
        _place(self, asked, learner_line())
        return module_to(self, *args, **kwargs)

    def module_cuda_cpu(self, device=None):
        _place(self, _cuda_name(0 if device is None else device), learner_line())
        return self

    def set_device(device):
        record = _state["record"]
        if record is not None:
            record["set_device"].append({"asked": _cuda_name(device), "line": learner_line()})

    torch.Tensor.to = tensor_to_cpu
    torch.Tensor.cuda = lambda self, *a, **k: self
    nn.Module.to, nn.Module.cuda = module_to_cpu, module_cuda_cpu
    _original["set_device"] = torch.cuda.set_device
    torch.cuda.set_device = set_device
    if os.environ.get(GPUS_ENV):
        _original["device_count"] = torch.cuda.device_count
        gpus = int(os.environ[GPUS_ENV])
        torch.cuda.device_count = lambda: gpus


def _install_placement_record() -> None:
    module_to = nn.Module.to

    def module_to_recorded(self, *args, **kwargs):
        line = learner_line()
        if line is not None:
            device = kwargs.get("device", args[0] if args else None)
            _place(self, _cuda_name(device), line)
        return module_to(self, *args, **kwargs)

    nn.Module.to = module_to_recorded


# -- the process group ----------------------------------------------------------------
def _store() -> dist.TCPStore:
    store = _state.get("store")
    if store is None:
        wait = float(os.environ.get(WAIT_ENV, "20"))
        store = dist.TCPStore(
            "127.0.0.1",
            int(os.environ[PORT_ENV]),
            is_master=False,
            timeout=datetime.timedelta(seconds=wait),
        )
        _state["store"] = store
    return store


def _init_process_group(*args, **kwargs):
    record = _state["record"]
    if dist.is_initialized() and record["init"]:
        _stop(
            "teardown",
            f"init_process_group was called again while the group from line "
            f"{record['init']['line']} was still up: nothing destroyed it in between "
            "(torch refuses a second default group); call destroy_process_group() "
            "when each run ends",
        )
    bound = inspect.signature(_original["init_process_group"]).bind_partial(*args, **kwargs)
    given = bound.arguments
    rank = given.get("rank", -1)
    world_size = given.get("world_size", -1)
    rank = int(os.environ.get("RANK", -1)) if rank in (-1, None) else rank
    world_size = (
        int(os.environ.get("WORLD_SIZE", -1)) if world_size in (-1, None) else world_size
    )
    asked = given.get("backend")
    used = asked if torch.cuda.is_available() else "gloo"
    record.update(claimed_rank=rank, claimed_world_size=world_size)
    record["init"] = {"line": learner_line(), "asked": str(asked), "backend": str(used)}
    _save()
    nprocs = int(os.environ.get(NPROCS_ENV, "0"))
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
            "group would wait forever for the missing ranks; pass nprocs=world_size",
        )
    store = _store()
    if store.add(f"doctor/rank/{rank}", 1) > 1:
        _stop(
            "process_group",
            f"two processes both claimed rank {rank} in init_process_group: pass each "
            "process its own rank (the one mp.spawn gives main)",
        )
    wait = float(os.environ.get(WAIT_ENV, "20"))
    timeout = datetime.timedelta(seconds=wait)
    _original["init_process_group"](
        used, store=store, rank=rank, world_size=world_size, timeout=timeout
    )
    record["init"]["joined"] = True
    _save()


def _destroy_process_group(*args, **kwargs):
    record = _state["record"]
    record["destroyed"] = {"line": learner_line()}
    _mark_done()
    _save()
    return _original["destroy_process_group"](*args, **kwargs)


def _mark_done() -> None:
    record = _state["record"]
    if record["claimed_rank"] is not None and _state.get("store") is not None:
        try:
            done = str(len(record["collectives"]))
            _state["store"].set(f"doctor/done/{record['claimed_rank']}", done)
        except Exception:  # the store may be gone at the very end
            pass


def _stop(stage: str, evidence: str) -> None:
    record = _state["record"]
    record["stop"] = {"stage": stage, "evidence": evidence, "line": learner_line(3)}
    _mark_done()
    _save()
    raise DoctorStop(evidence)


def _collective(name: str) -> Callable:
    real = _original[name]

    def checked(*args, **kwargs):
        line = learner_line()
        record = _state["record"]
        if line is None or record is None or not dist.is_initialized():
            return real(*args, **kwargs)
        rank, size = dist.get_rank(), dist.get_world_size()
        step = len(record["collectives"])
        record["collectives"].append({"op": name, "line": line})
        _save()
        store = _store()
        store.set(f"doctor/coll/{step}/{rank}", f"{name}:{line}")
        deadline = time.monotonic() + float(os.environ.get(WAIT_ENV, "20"))
        while time.monotonic() < deadline:
            missing = [r for r in range(size) if not store.check([f"doctor/coll/{step}/{r}"])]
            if not missing:
                break
            for other in missing:
                if store.check([f"doctor/done/{other}"]):
                    done = int(store.get(f"doctor/done/{other}"))
                    _stop(
                        "process_group",
                        f"rank {rank} waits in {name}() (line {line}), but rank {other} "
                        f"finished after {done} collective(s) and never called it: every "
                        "rank must call each collective",
                    )
            time.sleep(0.02)
        else:
            return real(*args, **kwargs)
        ops = {r: store.get(f"doctor/coll/{step}/{r}").decode() for r in range(size)}
        if len({op.split(":")[0] for op in ops.values()}) > 1:
            said = ", ".join(f"rank {r}: {op.replace(':', ' at line ')}" for r, op in ops.items())
            _stop(
                "process_group",
                f"the ranks called different collectives at the same point ({said}): "
                "every rank must call the same collectives in the same order",
            )
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
    keep = int(os.environ.get(BATCHES_ENV, "4"))
    iterator._sampler_iter = iter(batches[:keep])
    iterator._doctor_iter = iterator._sampler_iter
    record = _state["record"]
    if record is None:
        return
    loader = getattr(iterator._index_sampler, "_doctor_loader", None)
    sampler = getattr(loader, "sampler", None)
    flat = [int(i) for batch in batches for i in (batch if isinstance(batch, list) else [batch])]
    entry = {
        "line": getattr(loader, "_doctor_line", None),
        "loader": getattr(loader, "_doctor_number", 0),
        "size": len(iterator._dataset) if hasattr(iterator._dataset, "__len__") else None,
        "sampler": type(sampler).__name__,
        "epoch": getattr(sampler, "epoch", None),
        "indices": flat,
        "batches": len(batches),
        "used": min(keep, len(batches)),
        "trained": False,
    }
    record["loaders"].append(entry)
    _state["epoch"] = entry
    _save()


def _backward(original):
    def backward(*args, **kwargs):
        entry = _state.get("epoch")
        if entry is not None and not entry["trained"]:
            entry["trained"] = True
            _save()
        return original(*args, **kwargs)

    return backward


# -- the model ----------------------------------------------------------------------------
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
            "module_device": str(next(module.parameters()).device),
            "asked": getattr(module, "_doctor_asked", None),
            "error": None,
        }
        record["ddp"].append(entry)
        if not torch.cuda.is_available() and entry["asked"]:
            # The model asked for a GPU and got the CPU from the doctor: drop the
            # GPU-only arguments that DDP would refuse for a CPU module.
            bound.arguments.pop("device_ids", None)
            bound.arguments.pop("output_device", None)
        try:
            original(*bound.args, **bound.kwargs)
        except Exception as error:
            entry["error"] = f"{type(error).__name__}: {error}"
            _save()
            raise
        module.register_forward_pre_hook(_count_forward)
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
    forwards = _state["record"]["forwards"]
    if getattr(_local, "in_ddp", 0):
        forwards["wrapped"] += 1
    else:
        forwards["raw"] += 1
        forwards["raw_line"] = forwards["raw_line"] or learner_line(3)


def _after_step(optimizer, args, kwargs) -> None:
    record = _state["record"]
    if record is None or len(record["steps"]) >= STEPS_KEPT:
        return
    params = [p for group in optimizer.param_groups for p in group["params"]]
    flat = torch.cat([p.detach().reshape(-1).cpu().double() for p in params])
    grads = [p.grad for p in params if p.grad is not None]
    grad_sum = float(sum(g.detach().double().abs().sum() for g in grads)) if grads else 0.0
    record["steps"].append({"params": float(flat.sum()), "grads": grad_sum})
    record["params"] = flat.float()
    _save()


# -- installing ---------------------------------------------------------------------------
def install(index: int, key: str = "") -> None:
    """Start recording in this process (``index``: the process number mp.spawn gave it)."""
    _state["record"] = _new_record(index)
    _state["key"] = key
    if _state["installed"]:
        return
    _state["installed"] = True
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    for name, patched in (
        ("init_process_group", _init_process_group),
        ("destroy_process_group", _destroy_process_group),
    ):
        _original[name] = getattr(c10d, name)
        setattr(c10d, name, patched)
        setattr(dist, name, patched)
    from . import doctor_read

    for name in doctor_read.COLLECTIVES:
        if hasattr(c10d, name):
            _original[name] = getattr(c10d, name)
            setattr(c10d, name, _collective(name))
            setattr(dist, name, getattr(c10d, name))
    DataLoader.__init__ = _loader_init(DataLoader.__init__)
    base = _dataloader._BaseDataLoaderIter
    base._next_index = _next_index(base._next_index)
    torch.autograd.backward = _backward(torch.autograd.backward)
    DistributedDataParallel.__init__ = _ddp_init(DistributedDataParallel.__init__)
    DistributedDataParallel.forward = _ddp_forward(DistributedDataParallel.forward)
    register_optimizer_step_post_hook(_after_step)
    if torch.cuda.is_available():
        _install_placement_record()
    else:
        _install_cpu_stand_ins()


def rewire(namespace: dict) -> None:
    """Point names a learner imported before :func:`install` (``from torch.distributed
    import init_process_group``) at the recording versions."""
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    swaps = {id(original): getattr(c10d, name, None) for name, original in _original.items()}
    swaps[id(_original.get("set_device"))] = torch.cuda.set_device
    swaps[id(_original.get("device_count"))] = torch.cuda.device_count
    for key, value in list(namespace.items()):
        replacement = swaps.get(id(value))
        if replacement is not None and callable(value):
            namespace[key] = replacement


def _run_main(index: int, fn: Callable, args: tuple) -> None:
    """Call the learner's ``fn(index, *args)`` and record how it ended."""
    record = _state["record"]
    rewire(getattr(fn, "__globals__", {}))
    try:
        inspect.signature(fn).bind(index, *args)
    except TypeError as error:
        takes = len(inspect.signature(fn).parameters)
        message = (
            f"{getattr(fn, '__name__', 'main')}() takes {takes} argument(s), but mp.spawn "
            f"called it with {1 + len(args)}: the rank it passes itself plus the "
            f"{len(args)} in args ({error})"
        )
        record["error"] = {"type": "TypeError", "message": message, "line": None, "call": True}
        _save()
        raise
    try:
        fn(index, *args)
    except BaseException as error:
        if not isinstance(error, DoctorStop):
            record["error"] = {
                "type": type(error).__name__,
                "message": str(error).strip().splitlines()[0] if str(error).strip() else "",
                "line": _traceback_line(error),
                "call": False,
            }
        _mark_done()
        _save()
        raise
    record["returned"] = True
    gc.collect()
    record["alive_at_return"] = dist.is_initialized()
    _mark_done()
    _save()
    if dist.is_initialized():
        _original["destroy_process_group"]()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without the interpreter's shutdown: it is slow after DDP and can
    # abort on torch's native threads, which is not what is being diagnosed.
    os._exit(0)


def rank_entry(index: int, fn: Callable, *args) -> None:
    """What each process of a spawned script runs: record, then the learner's ``fn``."""
    install(index)
    _run_main(index, fn, args)


def run_worker(index: int, world_size: int, path: str, args: tuple) -> None:
    """What each process runs for a worker file: load it, call ``main(rank, world_size, *args)``."""
    from .probes import load_file

    install(index)
    record = _state["record"]
    try:
        module = load_file(path)
    except BaseException as error:
        record["error"] = {
            "type": type(error).__name__,
            "message": str(error).strip().splitlines()[0] if str(error).strip() else "",
            "line": _traceback_line(error) or getattr(error, "lineno", None),
            "call": False,
            "import": True,
        }
        _save()
        raise
    _run_main(index, module.main, (world_size, *args))


def _start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    record = _state["record"]
    record["spawns"].append({"nprocs": nprocs, "nargs": len(args), "line": learner_line()})
    _save()
    os.environ[NPROCS_ENV] = str(nprocs)
    return _original["start_processes"](
        rank_entry, (fn, *args), nprocs, join, daemon, start_method=start_method
    )


def _spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    return _start_processes(fn, args, nprocs, join, daemon, start_method)


def run_script(path: str, argv: list[str]) -> int:
    """Run the learner's script as ``__main__`` with its spawns recorded (the script's process)."""
    import runpy

    spawn_module = sys.modules["torch.multiprocessing.spawn"]
    _original["start_processes"] = spawn_module.start_processes
    install(0, "script")
    record = _state["record"]
    record["spawns"] = []
    record["script"] = True
    spawn_module.start_processes = _start_processes
    mp.start_processes = _start_processes
    mp.spawn = spawn_module.spawn = _spawn
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(path))
    _save()
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
        record["returned"] = code == 0
        _save()
        return code
    except BaseException as error:
        record["error"] = {
            "type": type(error).__name__,
            "message": str(error).strip().splitlines()[0] if str(error).strip() else "",
            "line": _traceback_line(error),
            "call": False,
        }
        _save()
        return 1
    record["returned"] = True
    _save()
    return 0


if __name__ == "__main__":
    # Run through the package's module, not this __main__ copy: the ranks
    # must be able to import rank_entry by name.
    from ddp_lesson import doctor_probe

    sys.exit(doctor_probe.run_script(os.path.realpath(sys.argv[1]), sys.argv[2:]))
