"""The processes a diagnosed script starts itself with ``multiprocessing``: followed and probed.

A script may start its ranks without torch's launchers: a loop of
``multiprocessing.Process`` (``mp.Process`` is the same class), each told
its rank. In the script's own process (:func:`.start.script_process`),
:func:`follow` has ``Process.start`` give each such process the probe
before its function runs (:func:`followed`, a rank like any other of the
run), and note the line that started it in the script's record. A
``multiprocessing.Pool``'s workers are probed too, each task they are sent
run as a rank's function (:func:`pooled`).

``Process.join`` is watched too: a script that joins each process before it
starts the next leaves the first one waiting for ever in
``init_process_group``. When the process being joined waits there for a
group larger than the processes started so far, the script can never go
on, and the doctor stops it with that as the evidence.
"""

from __future__ import annotations

import functools
import multiprocessing.pool
import os
import signal
import time
from multiprocessing.process import BaseProcess

from ..launch import AGENT_STORE_ENV
from . import probe
from .probe_group import joining_key
from .record import Settings

#: Seconds a joined process must wait in ``init_process_group`` for partners
#: not yet started before the doctor says so (the wait is certain, not slow).
JOIN_GRACE_S = 1.0

#: What the script's process followed: its pid, the processes it started, and
#: whether torch's own start of processes (:mod:`.start`) is under way.
_followed_state: dict = {"pid": None, "started": 0, "inside_torch": 0}


def follow() -> None:
    """In the script's own process: probe each process it starts with ``multiprocessing``."""
    _followed_state.update(pid=os.getpid(), started=0, inside_torch=0)
    probe.wrap_for_good(BaseProcess, "__init__", _made)
    probe.wrap_for_good(BaseProcess, "start", _start)
    probe.wrap_for_good(BaseProcess, "join", _join)
    probe.wrap_for_good(BaseProcess, "run", _run)


def _run(original):
    """``Process.run()`` called by the script's own code: the target runs right there, in the
    script's process, and no process starts (``start()`` is what makes one, which then
    calls ``run()`` in it)."""

    def run(self):
        line = probe.learner_line()
        if not _ours(self) or line is None or self._popen is not None:
            return original(self)
        target = probe.called_name(self._target) if self._target else type(self).__name__
        _note_start("multiprocessing.Process", self._target, len(self._args), line)
        probe.stop_at_stage(
            "spawning",
            f"line {line} calls run() on a multiprocessing.Process: run() runs its target "
            f"({target}) right there, in the script's own process, and starts no process (a "
            "process that start() made calls run() itself); call start() on each process, "
            "then join() them",
            line,
        )

    return run


def _made(original):
    """``Process(...)``: the learner's line that made it (where its arguments are given)."""

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self._doctor_made = probe.learner_line()

    return init


class inside_torch_start:
    """Around torch's own start of processes, whose processes the probe enters another way."""

    def __enter__(self):
        _followed_state["inside_torch"] += 1

    def __exit__(self, *exc):
        _followed_state["inside_torch"] -= 1


def _ours(process: BaseProcess) -> bool:
    """A process the script's own process starts itself (not torch's, not a child's)."""
    return os.getpid() == _followed_state["pid"] and not _followed_state["inside_torch"]


def _note_start(
    by: str, target: object, nargs: int, line: int | None, made: int | None = None
) -> None:
    record = probe.current()
    name = probe.called_name(target)
    for entry in record.spawns:
        if entry["by"] == by and entry["line"] == line:
            entry["nprocs"] += 1
            break
    else:
        record.spawns.append(
            {"nprocs": 1, "nargs": nargs, "line": line, "by": by, "target": name, "made": made}
        )
    probe.save()


def _start(original):
    def start(self):
        if not _ours(self):
            return original(self)
        line = probe.learner_line()
        if self._target is multiprocessing.pool.worker:
            index = _followed_state["started"]
            _followed_state["started"] += 1
            _note_start("multiprocessing.Pool", self._target, 0, line)
            self._target = functools.partial(pooled, probe.settings(), index, self._target)
            return original(self)
        index = _followed_state["started"]
        _followed_state["started"] += 1
        self._doctor_index = index
        target = self._target
        if target is None:  # a subclass with a run() of its own
            target = type(self).run.__get__(self)
            self.run = functools.partial(followed, probe.settings(), index, target)
        else:
            self._target = functools.partial(followed, probe.settings(), index, target)
        made = getattr(self, "_doctor_made", None)
        _note_start("multiprocessing.Process", target, len(self._args), line, made)
        return original(self)

    return start


def followed(settings: Settings, index: int, target, *args, **kwargs) -> None:
    """A process the script started with ``multiprocessing``: probed, then its function."""
    probe.install(settings, index)
    probe.process_state["started_with"] = (args[0] if args else None, probe.called_name(target))
    probe.rewire(getattr(target, "__globals__", {}))
    try:
        target(*args, **kwargs)
    except SystemExit as done:
        if probe.exit_code(done):
            probe.failed(done)
        raise
    except BaseException as error:
        probe.failed(error)
        raise
    probe.finish(leave=False)


def pooled(settings: Settings, index: int, worker, tasks, *args) -> None:
    """A ``multiprocessing.Pool``'s worker process, probed: each task it is sent runs as a
    rank's function (a Pool started for DDP sends each worker one task that joins the group).

    The launch's switch that points a rank at the doctor's store is taken
    from its environment, as for programs the script starts: what a task
    makes of its group it makes as when the script runs alone.
    """
    os.environ.pop(AGENT_STORE_ENV, None)
    probe.install(settings, index)
    worker(_Tasks(tasks), *args)


class _Tasks:
    """A Pool worker's queue of tasks, each handed over to run as :func:`_task`."""

    def __init__(self, queue):
        self._queue = queue

    def __getattr__(self, name):  # (the worker closes the queue's writing end itself)
        return getattr(self._queue, name)

    def get(self):
        task = self._queue.get()
        if task is None:  # (the pool's sign to stop)
            return task
        job, i, func, args, kwargs = task
        return job, i, functools.partial(_task, func), args, kwargs


def _task(func, *args, **kwargs):
    """One task of a Pool worker, recorded as a rank's function; the pool's end (SIGTERM to
    its idle workers) then ends the process at once, as in a plain run."""
    fn, first = func, args[0] if args else None
    if func in (multiprocessing.pool.mapstar, multiprocessing.pool.starmapstar) and args:
        fn, chunk = args[0]
        first = next(iter(chunk), None)
        if func is multiprocessing.pool.starmapstar and isinstance(first, tuple | list):
            first = first[0] if first else None
    probe.process_state.update(started_with=(first, probe.called_name(fn)), pool_task=True)
    probe.current().ran = probe.called_name(fn)
    probe.rewire(getattr(fn, "__globals__", {}))
    try:
        result = func(*args, **kwargs)
    except BaseException as error:
        probe.failed(error)
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    probe.finish(leave=False)
    return result


def _join(original):
    def join(self, timeout=None):
        index = getattr(self, "_doctor_index", None)
        if index is None or not _ours(self):
            return original(self, timeout)
        line = probe.learner_line()
        end = None if timeout is None else time.monotonic() + timeout
        since = None
        while True:
            left = 0.2 if end is None else max(0.0, min(0.2, end - time.monotonic()))
            original(self, left)
            if self.exitcode is not None or (end is not None and time.monotonic() >= end):
                return None
            waits = _waits_for(index)
            if waits is None or waits[0] <= _followed_state["started"]:
                since = None
                continue
            since = since or time.monotonic()
            if time.monotonic() - since >= JOIN_GRACE_S:
                _stop_one_by_one(self, waits, line)

    return join


def _waits_for(index: int) -> tuple[int, int, int | None] | None:
    """(world size, rank, line) of the group process ``index`` waits to join, if it waits."""
    store = probe.recorded_store()
    key = joining_key(index)
    try:
        if not store.check([key]):
            return None
        text = store.get(key).decode()
    except Exception:  # the store may be gone at the very end
        return None
    if text == "joined":
        return None
    world, rank, line = text.split(":")
    return int(world), int(rank), int(line) if line.isdigit() else None


def _stop_one_by_one(process: BaseProcess, waits: tuple[int, int, int | None], line) -> None:
    """Stop a script that waits for a process which waits for processes not yet started."""
    from ..reports import counted

    world, rank, init_line = waits
    started = _followed_state["started"]
    at = f" (line {init_line})" if init_line else ""
    evidence = (
        f"rank {rank} was waiting in init_process_group{at} for the "
        f"{counted(world, 'process', 'processes')} of its group while the script had started "
        f"only {started}: the script joins each process (line {line}) before it starts the "
        "next, so the first waits for partners the script starts only once it has ended. "
        "Start every process first, then join them in a loop of their own"
    )
    record = probe.current()
    record.stop = {"stage": "spawning", "evidence": evidence, "line": line, "time": time.time()}
    probe.save()
    process.terminate()
    if process._popen is not None:
        process._popen.wait(5)
    raise probe.DoctorStop(evidence)
