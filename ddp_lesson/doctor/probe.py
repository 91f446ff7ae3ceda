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

The probe is in parts, one job each: :mod:`.probe_state` (the state they all
share, and the plumbing that keeps and sends the record), :mod:`.probe_devices`
(the CPU stand-ins for GPUs), :mod:`.probe_group` (the process group and its
collectives), :mod:`.probe_data` (DataLoader and DistributedSampler) and
:mod:`.probe_model` (backward passes, DDP, optimiser steps). This module
installs them all and is what a process's entry point uses; every name of
the parts can be imported from here too.
"""

from __future__ import annotations

import functools
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
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from .. import reports
from ..launch import pause_after_destroy
from . import sandbox
from .probe_claims import loopback_store
from .probe_data import (  # noqa: F401  (every name of the parts stays importable from here)
    begin_epoch,
    dropped_indices,
    install_data_recording,
    loader_init,
    recorded_next,
    recorded_next_index,
    recorded_seed,
    recorded_set_epoch,
    sampler_init,
)
from .probe_devices import (  # noqa: F401
    FACTORIES,
    called_by_learner,
    cpu_location,
    install_accelerator,
    install_cpu_stand_ins,
    install_placement_record,
    load_on_cpu,
    on_cpu,
    place,
    record_set_device,
    to_cpu,
)
from .probe_group import (  # noqa: F401
    STUCK_S,
    backend_used,
    called_again,
    check_stuck,
    learner_frames,
    recorded_collective,
    recorded_destroy,
    recorded_init,
    recorded_store,
    wait_for_all,
)
from .probe_model import (  # noqa: F401
    PARAMS_KEPT,
    STEPS_KEPT,
    after_step,
    before_step,
    count_forward,
    ddp_forward,
    ddp_init,
    ddp_join_hook,
    note_backward,
    note_unused,
    recorded_backward,
    recorded_clip_norm,
    recorded_clip_value,
    recorded_schedule,
    trained_parameters,
)
from .probe_queues import install_queue_recording, queues_left
from .probe_state import (  # noqa: F401
    DDP_STEPS,
    TORCH_STAGES,
    DoctorStop,
    TorchrunScript,
    blocking,
    called_name,
    error_record,
    first_line,
    frame_line,
    is_learner,
    learner_files,
    learner_line,
    mark_done,
    on_terminate,
    originals,
    owned,
    process_state,
    save_record,
    say_where,
    set_for_good,
    stop_at_stage,
    thread_local,
    wants_torchrun,
    wrap_for_good,
)
from .read import COLLECTIVES
from .record import ProcessRecord, Settings


# -- installing ---------------------------------------------------------------------------
def install(
    settings: Settings, index: int, *, nprocs: int = 0, script: bool = False, launch: int = 0
) -> None:
    """Start recording in this process.

    Args:
        settings: what the doctor told this run.
        index: the process number (mp.spawn's index, torchrun's RANK; 0 for the
            script), after the processes of the script's earlier starts.
        nprocs: how many processes were started together with this one (0: unknown).
        script: this is the script's own process, which starts the ranks.
        launch: which of the script's starts made it (as ProcessRecord.launch).
    """
    learner_files.clear()
    process_state.update(
        record=ProcessRecord(index, script=script, launch=launch),
        settings=settings,
        pid=os.getpid(),
        channel=reports.Channel(Path(settings.folder) / ("script" if script else "ranks")),
        nprocs=nprocs or settings.nprocs,
        launch=launch,
        store=None,
        ddp=[],
        epoch=None,
        loaders=0,
    )
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, on_terminate)
    if process_state["installed"]:
        return
    process_state["installed"] = True
    sandbox.install(sandbox.root(settings.folder), own_folders(settings))
    pause_after_destroy()  # recorded below, then the pause (a torch deadlock at teardown)
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    for name, patched in (
        ("init_process_group", recorded_init),
        ("destroy_process_group", recorded_destroy),
    ):
        originals[name] = getattr(c10d, name)
        set_for_good((c10d, dist), name, patched)
    for name in COLLECTIVES:
        if hasattr(c10d, name):
            originals[name] = getattr(c10d, name)
            set_for_good((c10d, dist), name, recorded_collective(name))
    wrap_for_good(dist, "TCPStore", loopback_store)
    install_data_recording()
    install_model_recording()
    if settings.stand_in:
        install_cpu_stand_ins(settings.gpus)
    else:
        install_placement_record()
    if "ddp_lesson.group" in sys.modules:  # the lesson's ddp_setup, imported before this
        rewire(vars(sys.modules["ddp_lesson.group"]))


def install_model_recording() -> None:
    """Record training: backward passes, DDP's wrap, forward and join, steps and clips."""
    wrap_for_good(torch.autograd, "backward", recorded_backward)
    wrap_for_good(DistributedDataParallel, "__init__", ddp_init)
    wrap_for_good(DistributedDataParallel, "forward", ddp_forward)
    wrap_for_good(DistributedDataParallel, "join_hook", ddp_join_hook)
    register_optimizer_step_pre_hook(before_step)
    register_optimizer_step_post_hook(after_step)
    clipping = (torch.nn.utils, sys.modules["torch.nn.utils.clip_grad"])
    wrap_for_good(clipping, "clip_grad_norm_", recorded_clip_norm)
    wrap_for_good(clipping, "clip_grad_value_", recorded_clip_value)
    wrap_for_good(torch.optim.lr_scheduler.LRScheduler, "step", recorded_schedule)
    wrap_for_good(threading.Thread, "start", recorded_thread_start)
    install_queue_recording()


def recorded_thread_start(original):
    """``Thread.start``: note the learner's line that started the thread."""

    def start(self, *args, **kwargs):
        self._doctor_line = learner_line()
        return original(self, *args, **kwargs)

    return start


#: Seconds the threads a rank's function left running have, together, to end by themselves.
THREADS_END_S = 3.0


def _runs_learners_code(thread: threading.Thread) -> bool:
    """Whether the thread runs a function of the learner's (its target, or the ``run`` of a
    Thread subclass): a pool's workers (concurrent.futures) run Python's own, and Python
    ends them at exit."""
    target = getattr(thread, "_target", None)
    if target is None and type(thread).run is not threading.Thread.run:
        target = type(thread).run
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    return code is not None and is_learner(code.co_filename)


def threads_left() -> list[tuple[str, int | None]]:
    """The threads the learner's lines started that still run, are not daemons and do not
    end within :data:`THREADS_END_S`: each keeps its process from exiting (name, line)."""
    running = [
        t for t in threading.enumerate()
        if t is not threading.main_thread() and t.is_alive() and not t.daemon
        and getattr(t, "_doctor_line", None) is not None and _runs_learners_code(t)
    ]  # fmt: skip
    deadline = time.monotonic() + THREADS_END_S
    for thread in running:
        thread.join(max(0.0, deadline - time.monotonic()))
    return [(t.name, t._doctor_line) for t in running if t.is_alive()]


#: How torch's ``mp.spawn`` names the file a rank writes its traceback to
#: (``torch/multiprocessing/spawn.py``: ``NamedTemporaryFile(prefix=...)``).
SPAWN_ERROR_FILE_PREFIX = "pytorch-errorfile-"


def own_folders(settings: Settings) -> list[str]:
    """Paths a diagnosed process writes for real: the launch's folders, torch's error files.

    torch's own: the file ``mp.spawn`` makes in the temporary folder for
    each rank to write its traceback to (``pytorch-errorfile-*.pickle``,
    which torch never removes: the doctor does, see
    :func:`.sandbox.remove_torch_files`) and torchrun's error file; and
    multiprocessing's folder (``pymp-*``), which it removes itself. The
    script never asked for them, so the doctor does not report them.
    """
    import tempfile

    from ..launch import FOLDER_PREFIX

    # the doctor's folder lies beside the launch's (both in the doctor's temporary folder)
    folders = [settings.folder, os.path.join(os.path.dirname(settings.folder), FOLDER_PREFIX)]
    folders.append(os.path.join(tempfile.gettempdir(), SPAWN_ERROR_FILE_PREFIX))
    # multiprocessing's own folder (its listener sockets, e.g. for a loader's workers)
    folders.append(os.path.join(tempfile.gettempdir(), "pymp-"))
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:
        folders.append(os.path.dirname(os.path.abspath(error_file)))
    return folders


def rewire(namespace: dict) -> None:
    """Point names a learner imported before :func:`install` (``from torch.distributed
    import init_process_group``) at the recording versions."""
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    swaps = {id(original): getattr(c10d, name, None) for name, original in originals.items()}
    swaps[id(originals.get("set_device"))] = torch.cuda.set_device
    swaps[id(originals.get("device_count"))] = torch.cuda.device_count
    swaps[id(originals.get("is_available"))] = torch.cuda.is_available
    swaps[id(originals.get("current_device"))] = torch.cuda.current_device
    swaps[id(originals.get("load"))] = torch.load
    for key, original in originals.items():
        if key.startswith("accelerator."):
            swaps[id(original)] = getattr(torch.accelerator, key.split(".", 1)[1])
    for key, value in list(namespace.items()):
        replacement = swaps.get(id(value))
        if replacement is not None and callable(value):
            namespace[key] = replacement


# -- what a process's entry point uses (see :mod:`.start`) ----------------------------------
def current() -> ProcessRecord:
    """This process's record."""
    return process_state["record"]


def settings() -> Settings:
    """What the doctor told this run."""
    return process_state["settings"]


def save() -> None:
    """Send this process's record now."""
    save_record()


def error_entry(error: BaseException, **extra) -> dict:
    """How an exception is recorded (see :attr:`ProcessRecord.error`)."""
    return error_record(error, **extra)


def finish(leave: bool = True) -> None:
    """The learner's code ended normally: record how it left the group, then leave at once.

    ``leave=False`` returns instead, for a process whose starter exits it
    without the interpreter's shutdown once its function has returned
    (multiprocessing's, which must first hand torch the return value).
    """
    record = process_state["record"]
    record.returned = True
    left = threads_left()
    held = queues_left(time.monotonic() + THREADS_END_S)
    if held and not left and record.claimed_rank is not None:
        record.stop = {
            "stage": "teardown",
            "evidence": (
                f"rank {record.claimed_rank} put data on a multiprocessing queue (line "
                f"{held[0]}), and {THREADS_END_S:g} s after the rank's function returned the "
                "queue still held it: a process cannot exit before what it put has gone into "
                "the queue's pipe, and more than the pipe holds goes in only as another process "
                "reads, so whatever waits for the process to end (mp.spawn's join, a Process's "
                "join) before reading the queue waits for ever; read the queue before waiting "
                "for the processes (start them all, take each result, then join them; with "
                "mp.spawn, join=False), or hand the results over another way (a file per rank)"
            ),
            "line": held[0],
            "time": time.time(),
        }
    if left and record.claimed_rank is not None:
        name, line = left[0]
        record.stop = {
            "stage": "teardown",
            "evidence": (
                f"rank {record.claimed_rank}'s thread {name!r} (started at line {line}) was "
                f"still running {THREADS_END_S:g} s after the rank's function returned: it is "
                "not a daemon, so the process cannot exit until the thread ends, and whatever "
                "waits for the process (mp.spawn's join, torchrun's agent) waits as long; stop "
                "the thread on every rank before returning (or make it a daemon)"
            ),
            "line": line,
            "time": time.time(),
        }
    gc.collect()
    record.alive_at_return = dist.is_initialized()
    mark_done()
    save_record()
    if dist.is_initialized():
        originals["destroy_process_group"]()
    sys.stdout.flush()
    sys.stderr.flush()
    # Leave without the interpreter's shutdown: it is slow after DDP and can
    # abort on torch's native threads, which is not what is being diagnosed.
    if leave:
        os._exit(0)


def failed(error: BaseException) -> None:
    """The learner's code raised: record it (unless the doctor stopped it on purpose)."""
    record = process_state["record"]
    if not isinstance(error, DoctorStop) and record.error is None:
        record.error = error_record(error)
    mark_done()
    save_record()


def exit_code(done: SystemExit) -> int:
    if done.code is None:
        return 0
    return done.code if isinstance(done.code, int) else 1


def _cannot_take(fn: Callable, args: tuple, error: TypeError) -> str:
    """Why ``fn`` cannot be called with a process number and ``args``, as the start calls it."""
    if isinstance(fn, functools.partial):
        inner = fn.func
        name = getattr(inner, "__name__", "main")
        code = getattr(inner, "__code__", None)
        first = next(iter(inspect.signature(inner).parameters), None)
        if first in fn.keywords:
            at = f" (line {code.co_firstlineno})" if code is not None else ""
            return (
                f"the process's start passes the process number as the first positional "
                f"argument, which is {name}'s first parameter, {first}{at}; but "
                f"functools.partial already gives {first} by keyword, so {name}() gets two "
                f"values for it. Put the rank first in {name}'s parameters, "
                f"def {name}(rank, ...), and bind the others by keyword"
            )
        return (
            f"{name}(), through functools.partial, cannot take the process number plus the "
            f"{len(args)} argument(s) given ({error})"
        )
    takes = len(inspect.signature(fn).parameters)
    return (
        f"{getattr(fn, '__name__', 'main')}() takes {takes} argument(s), but it was "
        f"called with {1 + len(args)}: the rank plus the {len(args)} argument(s) "
        f"given ({error})"
    )


def call_main(index: int, fn: Callable, args: tuple) -> None:
    """Call the learner's ``fn(index, *args)`` and record how it ended."""
    record = process_state["record"]
    process_state["entry"] = (index, fn)  # (what the processes' start handed the function)
    rewire(getattr(fn, "__globals__", {}))
    try:
        inspect.signature(fn).bind(index, *args)
    except TypeError as error:
        message = _cannot_take(fn, args, error)
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
        save_record()
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
