"""The state every part of the probe shares, and the plumbing that keeps a process's record.

One process holds one probe, and its state lives here, created once:

* ``process_state``: the record, the settings, the channel to the doctor, the
  doctor's store, the DDP models and the epoch seen so far...;
* ``originals``: torch's own functions that the probe replaced, by name
  (what :func:`.probe.rewire` swaps and :func:`.probe.finish` calls);
* ``learner_files``: which file names are the learner's file;
* ``thread_local``: what belongs to one thread (being inside a DDP forward).

They are only ever changed in place, never rebound, so every part of the
probe (:mod:`.probe`, :mod:`.probe_devices`, :mod:`.probe_group`,
:mod:`.probe_data`, :mod:`.probe_model`) that imports them by name holds the
same objects. Keep it so: a rebinding here would leave the other parts with
the old object.

And what every part uses:

* :func:`set_for_good` and :func:`wrap_for_good`, the probe's only way to change torch's
  functions (through :mod:`ddp_lesson.launch.torch_hooks`);
* :func:`is_learner` and :func:`learner_line`: a file is the learner's when
  its real path is the file being diagnosed, so no file of the course's
  package ever is. :func:`learner_line` counts frames from its caller
  (``depth``): call it directly, from the function whose caller is wanted,
  without a layer in between;
* :func:`save_record`, which sends the record to the doctor after every event;
* :func:`error_record` and :func:`owned`: an exception's line in the
  learner's file and the stage of the torch call that raised it;
* :func:`blocking`, around a call that waits for the other ranks inside
  torch, and :func:`on_terminate`, what a SIGTERM records before it stops
  the process;
* :func:`stop_at_stage`, which records the evidence and stops a rank that cannot go on
  (:class:`DoctorStop`), and :func:`mark_done`, which tells the other ranks
  through the store that this one has ended.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable

from ..launch import torch_hooks

#: The steps of DDP that wait for every rank inside torch (its own collectives).
DDP_STEPS = ("backward", "DistributedDataParallel")

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


class TorchrunScript(BaseException):
    """Raised in a script run as Python that needs torchrun's variables before starting a process.

    A ``BaseException``, so that the script's own ``except Exception`` lets it through.
    """


#: What this process has recorded, and how (its record, settings, channel, DDP
#: models): module-level because torch calls the recording functions from its own
#: code, with no argument to carry it. One per process: each rank records its own.
process_state: dict = {"installed": False, "record": None}
#: Per thread: the depth of DDP forward passes under way (a forward pass through
#: DDP counts as one, not as a raw call of the module), which torch's hooks read.
thread_local = threading.local()


def set_for_good(owners: object | tuple[object, ...], name: str, value: object) -> None:
    """Make ``name`` on ``owners`` ``value`` for the rest of this (recorded) process."""
    torch_hooks.wrap(torch_hooks.point(owners, name), lambda previous: value)


def wrap_for_good(owners: object | tuple[object, ...], name: str, make: Callable) -> None:
    """Make ``name`` on ``owners`` ``make(previous)`` for the rest of this process."""
    torch_hooks.wrap(torch_hooks.point(owners, name), make)


#: torch's own functions the recording ones call on to, by name (set once per process).
originals: dict[str, object] = {}
#: Whether a file name is the learner's file, remembered: asked on every recorded call.
learner_files: dict[str, bool] = {}


# -- recording ---------------------------------------------------------------------
def save_record() -> None:
    """Send this process's record to the doctor's folder (replacing the previous one).

    Only from the process that recorded it: a process forked from a rank
    (a DataLoader worker) holds a stale copy that must not replace it.
    """
    record, channel = process_state.get("record"), process_state.get("channel")
    if record is not None and channel is not None and process_state.get("pid") == os.getpid():
        channel.send(record.index, record.fields())


def is_learner(filename: str) -> bool:
    if filename not in learner_files:
        settings = process_state.get("settings")
        target = settings.file if settings else ""
        learner_files[filename] = bool(target) and os.path.realpath(filename) == target
    return learner_files[filename]


def frame_line(frame) -> int | None:
    while frame is not None:
        if is_learner(frame.f_code.co_filename):
            return frame.f_lineno
        frame = frame.f_back
    return None


#: The file where the doctor starts each rank: no learner's line below it called the rank.
RANK_START = os.path.join(os.path.dirname(os.path.abspath(__file__)), "start.py")


def caller_line(frame) -> int | None:
    """The learner's line that called the function running the learner's innermost line.

    ``None`` when that function is the outermost of the learner's on the stack, or
    when what called it started the rank: a rank forked inside ``mp.spawn`` still has
    the script's ``__main__`` lines below the doctor's start of the rank.
    """
    lines = callers(frame)
    return lines[0] if lines else None


def callers(frame) -> list[int]:
    """The learner's lines that led to the learner's innermost line, nearest first: the
    call of its function, the call of that one's... (as :func:`caller_line`)."""
    lines = []
    seen = 0
    while frame is not None:
        if frame.f_code.co_filename == RANK_START:
            return lines
        name = frame.f_code.co_name
        # (a comprehension's or lambda's frame is a part of its function's line)
        if is_learner(frame.f_code.co_filename) and (name[0] != "<" or name == "<module>"):
            seen += 1
            if seen >= 2:
                lines.append(frame.f_lineno)
        frame = frame.f_back
    return lines


def called_from(frame) -> str:
    """", called from line N" (", from line M" for each call below it), or ""."""
    lines = callers(frame)
    return "".join(
        f", {'called ' if at == 0 else ''}from line {line}" for at, line in enumerate(lines)
    )


def called_name(target: object) -> str:
    """The name of what a process was started to run (through any ``functools.partial``)."""
    while isinstance(target, functools.partial):
        target = target.func
    return getattr(target, "__name__", None) or type(target).__name__


#: How many distinct lines a record's ``call_lines`` keeps.
CALL_LINES_KEPT = 64


def note_call_line(line: int | None) -> None:
    """Add ``line`` to the record's ``call_lines`` (a DDP forward or a collective is there)."""
    record = process_state.get("record")
    if record is not None and line is not None and line not in record.call_lines:
        if len(record.call_lines) < CALL_LINES_KEPT:
            record.call_lines.append(line)


def learner_line(depth: int = 2) -> int | None:
    """The line of the learner's file that is running now, if it is on the stack."""
    return frame_line(sys._getframe(depth))


def first_line(error: BaseException) -> str:
    """The first sentence of an exception's message (torch's run on for a paragraph)."""
    text = str(error).strip()
    first = text.splitlines()[0] if text else ""
    end = first.find(". ")
    return first[: end + 1] if end > 0 else first


def error_record(error: BaseException, **extra) -> dict:
    """What an exception says about the run: its line in the learner's file and its stage."""
    frames = []
    tb = error.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        frames.append((frame.f_code.co_filename, tb.tb_lineno, frame.f_globals.get("__name__")))
        tb = tb.tb_next
    mine = [i for i, (filename, _, _) in enumerate(frames) if is_learner(filename)]
    line = frames[mine[-1]][1] if mine else None
    if line is None and isinstance(error, SyntaxError) and is_learner(error.filename or ""):
        line = error.lineno
    stage = getattr(error, "doctor_stage", None)
    if stage is None and mine:
        below = [str(module or "") for _, _, module in frames[mine[-1] + 1 :]]
        stage = next(
            (key for module in below for prefix, key in TORCH_STAGES if module.startswith(prefix)),
            None,
        )
    record = process_state.get("record")
    if stage == "process_group" and record is not None and record.destroyed:
        stage = "teardown"  # the group was gone already
    entry = {
        "type": type(error).__name__,
        "message": first_line(error),
        "line": line,
        # the learner's line that called the function the error left (None when none did)
        "caller": _caller(error, line),
        "stage": stage,
        "time": time.time(),
        # stopped from outside (the deadline, a launcher); SystemExit is the script's own
        "interrupted": isinstance(error, KeyboardInterrupt),
        "call": False,
        "import": False,
    }
    entry.update(extra)
    return entry


def _caller(error: BaseException, line: int | None) -> int | None:
    """The learner's line that called the function where ``error`` left the learner's
    lines (through any comprehension or lambda of that function's): None when none did."""
    functions = []  # (code name, line) of the learner's frames, outermost first
    tb = error.__traceback__
    while tb is not None:
        if is_learner(tb.tb_frame.f_code.co_filename):
            functions.append((tb.tb_frame.f_code.co_name, tb.tb_lineno))
        tb = tb.tb_next
    inner = [f for f in functions if not f[0].startswith("<") or f[0] == "<module>"]
    if line is None or len(inner) < 2:
        return None
    return inner[-2][1]


@contextlib.contextmanager
def owned(stage: str):
    """Mark an exception raised inside as belonging to ``stage``."""
    try:
        yield
    except Exception as error:
        if getattr(error, "doctor_stage", None) is None:
            with contextlib.suppress(AttributeError, TypeError):
                error.doctor_stage = stage
        raise


@contextlib.contextmanager
def blocking(op: str, line: int | None):
    """Around a call that may wait inside torch's C++ code for the other ranks.

    A Python signal handler runs only once such a call returns, so while it
    waits, a SIGTERM (the deadline, or torch stopping the peers of a failed
    rank) must end the process at once, as it would without the doctor: the
    record already says where it waits.
    """
    record = process_state["record"]
    main = threading.current_thread() is threading.main_thread()
    record.waiting = {"op": op, "line": line}
    save_record()
    say_where(op, line)
    handler = signal.getsignal(signal.SIGTERM) if main else None
    if handler is on_terminate:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        yield
    finally:
        if handler is on_terminate:
            signal.signal(signal.SIGTERM, handler)
        record.waiting = None


def say_where(op: str, line: int | None) -> None:
    """Tell the other ranks (through the store) which DDP step this rank waits in."""
    record = process_state["record"]
    store = process_state.get("store")
    if op in DDP_STEPS and store is not None and record.claimed_rank is not None:
        process_state["steps"] = steps = process_state.get("steps", 0) + 1
        with contextlib.suppress(Exception):
            store.set(group_key("where", record.claimed_rank), f"{op}:{line}:{steps}")


def on_terminate(signum, frame) -> None:
    """At the deadline: note the learner's line this process was running, then stop."""
    record = process_state.get("record")
    if record is not None:
        record.stopped_at = frame_line(frame)
        with contextlib.suppress(Exception):
            save_record()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def group_key(kind: str, *parts: object) -> str:
    """A key of the doctor's store for this process's group: each of a script's starts of
    processes has keys of its own (a later group must not read an earlier one's)."""
    return "/".join(["doctor", kind, str(process_state.get("launch", 0)), *map(str, parts)])


def mark_done(ended: bool = True) -> None:
    """Tell the other ranks this one has left its group, as JSON: its collective calls so
    far (``calls``), whether its function has ended (``ended``), and, when it left by
    ``destroy_process_group``, that line (``released``) and what it was stopped for when it
    then called a collective on the group it had released (``said``)."""
    record = process_state["record"]
    if record.claimed_rank is not None and process_state.get("store") is not None:
        try:
            done = json.dumps({
                "calls": len(record.collectives),
                "ended": ended,
                "released": process_state.get("released_at"),
                "said": process_state.get("then_said"),
            })  # fmt: skip
            store = process_state["store"]
            store.set(group_key("done", record.claimed_rank), done)
            # the rank is free for a later start of the script's (see recorded_init)
            launch = str(process_state.get("launch", 0))
            if process_state.get("holds"):
                store.compare_set(process_state["holds"], launch, "")
        except Exception:  # the store may be gone at the very end
            pass


def wants_torchrun(variable: str, line: int | None) -> None:
    """Note that the script needs torchrun's ``variable`` to go on, and end its Python run."""
    record = process_state["record"]
    record.torchrun = {"variable": variable, "line": line}
    save_record()
    raise TorchrunScript(variable)


def stop_at_stage(stage: str, evidence: str, line: int | None = None) -> None:
    record = process_state["record"]
    record.stop = {
        "stage": stage,
        "evidence": evidence,
        "line": line or learner_line(3),
        "time": time.time(),
    }
    mark_done()
    save_record()
    raise DoctorStop(evidence)
