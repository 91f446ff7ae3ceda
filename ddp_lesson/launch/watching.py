"""Watching a launch's processes: which are its own, the deadline, a rank that left early.

:class:`Watcher` is the part of :class:`.supervisor.Supervisor` that runs
its watch thread; :func:`active` names the launch whose block runs.
"""

from __future__ import annotations

import threading
import time

import psutil

from . import processes, stacks
from .state import LaunchState

#: Seconds between two looks at the processes of a launch.
WATCH_S = 0.1

#: Seconds a rank that ended without its report may precede the verdict that it left early.
EARLY_EXIT_GRACE_S = 0.5

#: Tells a rank's ``init_process_group`` to use the store the launch hosts at ``MASTER_PORT``.
AGENT_STORE_ENV = "TORCHELASTIC_USE_AGENT_STORE"

#: Set for every process a launch starts: which launch it belongs to.
LAUNCH_TAG_ENV = "DDP_LESSON_LAUNCH"

# The launches whose `with` block runs in this process, innermost last (of
# Supervisor): a lesson's `launch.start` finds its launch here, and a watcher
# claims every new process while its launch is the only one running.
_active: list = []


def active() -> object | None:
    """The innermost launch (a :class:`.supervisor.Supervisor`) whose block runs here, if any."""
    return _active[-1] if _active else None


def began(launch: object) -> None:
    """Note that ``launch``'s block runs now (innermost).

    Args:
        launch: the :class:`.supervisor.Supervisor` whose block began.
    """
    _active.append(launch)


def ended(launch: object) -> None:
    """Note that ``launch``'s block has ended.

    Args:
        launch: the :class:`.supervisor.Supervisor` whose block ended.
    """
    if launch in _active:
        _active.remove(launch)


def process_key(proc: psutil.Process) -> tuple[int, float]:
    """A process's identity: its pid and start time (a pid can be reused, the pair cannot).

    Args:
        proc: the process.
    """
    try:
        return proc.pid, proc.create_time()
    except psutil.Error:
        return proc.pid, 0.0


class Watcher:
    """The watch thread of one launch: it notes the launch's processes and stops them.

    Args:
        state: the launch's state, shared with the supervisor's other parts.
    """

    def __init__(self, state: LaunchState):
        self.state = state
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the watch thread (it ends when ``state.done`` is set, or after a stop)."""
        self._thread = threading.Thread(target=self.watch, name="ddp-lesson-watch", daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait for the watch thread to end (set ``state.done`` first)."""
        if self._thread is not None:
            self._thread.join()

    def own_processes(self) -> list[psutil.Process]:
        """The processes of this launch: below what it started, however deep, even if orphaned.

        A process counts as this launch's when it descends from a rank or a
        program the launch started, when the launch has seen it before, when
        its environment carries the launch's tag (an orphan keeps its
        environment), or when it is new and no other launch of this process
        is running to claim it.
        """
        state = self.state
        roots = set(state.rank_pids.values()) | {c.process.pid for c in state.commands}
        alone = all(launch.state is state for launch in _active)
        mine = []
        for proc in processes.descendants():
            key = process_key(proc)
            if key in state.before:
                continue
            if key in state.seen or proc.pid in roots or alone or self._tagged(proc):
                mine.append(proc)
                continue
            try:
                if any(parent.pid in roots for parent in proc.parents()):
                    mine.append(proc)
            except psutil.Error:
                pass
        return mine

    def _tagged(self, proc: psutil.Process) -> bool:
        try:
            return proc.environ().get(LAUNCH_TAG_ENV) == self.state.folder.name
        except psutil.Error:
            return False

    def watch(self) -> None:
        """Note every process the block starts; stop them all at the deadline or an early exit."""
        state = self.state
        deadline = state.t0 + state.timeout_s
        while not state.done.wait(WATCH_S):
            mine = self.own_processes()
            with state.lock:
                for proc in mine:
                    state.seen.setdefault(process_key(proc), proc)
            if time.monotonic() >= deadline:
                state.timed_out = True
                self.take_stacks()  # where each rank was, before it is stopped
                self.stop()
                return
            if state.expect_reports and self.left_early():
                state.stopped_early = True
                self.stop()
                return

    def left_early(self) -> bool:
        """True once a rank has ended without its report while another still runs."""
        with self.state.lock:
            pids = dict(self.state.rank_pids)
        if not pids:
            return False
        gone = {rank for rank, pid in pids.items() if not processes.alive(pid)}
        if not gone or len(gone) == len(pids):
            return False
        time.sleep(EARLY_EXIT_GRACE_S)
        return bool(gone - self.state.channel.reported())

    def take_stacks(self) -> None:
        """Note where each rank still running is, before it is stopped (:func:`.stacks.take`)."""
        state = self.state
        with state.lock:
            ranks = dict(state.rank_pids)
        state.stacks.update(stacks.take(ranks, state.stacks_folder, state.stacks))

    def stop(self) -> int:
        """Stop every process of the launch, however deep; return how many were running."""
        return processes.stop_tree(self.own_processes)
