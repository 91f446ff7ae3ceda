"""Watching a launch's processes: which are its own, the deadline, a rank that left early.

:class:`Watcher` is the part of :class:`.supervisor.Supervisor` that runs
in its watch thread; :func:`active` names the launch whose block runs.
"""

from __future__ import annotations

import time

import psutil

from . import processes

#: Seconds between two looks at the processes of a launch.
WATCH_S = 0.1

#: Seconds a rank that ended without its report may precede the verdict that it left early.
EARLY_EXIT_GRACE_S = 0.5

#: Tells a rank's ``init_process_group`` to use the store the launch hosts at ``MASTER_PORT``.
AGENT_STORE_ENV = "TORCHELASTIC_USE_AGENT_STORE"

#: Set for every process a launch starts: which launch it belongs to.
LAUNCH_TAG_ENV = "DDP_LESSON_LAUNCH"

#: The launches whose ``with`` block is running in this process, innermost last.
_active: list = []  # (of Supervisor)


def active() -> object | None:
    """The innermost launch (a :class:`.supervisor.Supervisor`) whose block runs here, if any."""
    return _active[-1] if _active else None


class Watcher:
    """What a launch's watch thread does (mixed into :class:`.supervisor.Supervisor`)."""

    def _mine(self) -> list[psutil.Process]:
        """The processes of this launch: below what it started, however deep, even if orphaned.

        A process counts as this launch's when it descends from a rank or a
        program the launch started, when the launch has seen it before, when
        its environment carries the launch's tag (an orphan keeps its
        environment), or when it is new and no other launch of this process
        is running to claim it.
        """
        roots = set(self._rank_pids.values()) | {c.process.pid for c in self.commands}
        alone = _active == [self] or not _active
        mine = []
        for proc in processes.descendants():
            key = _key(proc)
            if key in self._before:
                continue
            if key in self._seen or proc.pid in roots or alone or self._tagged(proc):
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
            return proc.environ().get(LAUNCH_TAG_ENV) == self.folder.name
        except psutil.Error:
            return False

    def _watch(self) -> None:
        """Note every process the block starts; stop them all at the deadline or an early exit."""
        deadline = self._t0 + self.timeout_s
        while not self._done.wait(WATCH_S):
            mine = self._mine()
            with self._lock:
                for proc in mine:
                    self._seen.setdefault(_key(proc), proc)
            if time.monotonic() >= deadline:
                self.timed_out = True
                self.take_stacks()  # where each rank was, before it is stopped
                self._stop()
                return
            if self.expect_reports and self._left_early():
                self._stopped_early = True
                self._stop()
                return

    def _left_early(self) -> bool:
        """True once a rank has ended without its report while another still runs."""
        with self._lock:
            pids = dict(self._rank_pids)
        if not pids:
            return False
        gone = {rank for rank, pid in pids.items() if not processes.alive(pid)}
        if not gone or len(gone) == len(pids):
            return False
        time.sleep(EARLY_EXIT_GRACE_S)
        return bool(gone - self.channel.reported())

    def _stop(self) -> int:
        return processes.stop_tree(self._mine)


def _key(proc: psutil.Process) -> tuple[int, float]:
    """A process's identity: its pid and start time (a pid can be reused, the pair cannot)."""
    try:
        return proc.pid, proc.create_time()
    except psutil.Error:
        return proc.pid, 0.0
