"""What the parts of one launch share: its settings, what it started and how each rank ended.

A :class:`.supervisor.Supervisor` makes one :class:`LaunchState` and hands
it to each of its parts (:class:`.watching.Watcher`,
:class:`.rank_starter.RankStarter`, :class:`.programs.Programs`,
:class:`.failures.Failures`); every field a part reads or writes is
declared here, in one place. :class:`Command` is what the launch keeps of
each whole program it started.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .. import reports
from . import capture


class Command:
    """A whole program started by a supervisor, in a session of its own.

    Args:
        argv: what was run.
        process: the ``subprocess.Popen``.
        log: the file its output went to (inside the launch's folder).
        kept: bytes of its output kept, head and tail.
    """

    def __init__(self, argv: Sequence[str], process: subprocess.Popen, log: Path, kept: int):
        self.argv = [str(a) for a in argv]
        self.process = process
        self.log = log
        self.kept = kept
        self._output: str | None = None

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    @property
    def output(self) -> str:
        """What it printed (head and tail, see :mod:`.capture`); read once it has ended."""
        if self._output is None:
            self._output = capture.read_kept(self.log, self.kept)
        return self._output


@dataclass(eq=False)
class LaunchState:
    """One launch's settings and record, shared by the parts of its supervisor.

    The settings come first; the rest starts empty and fills while the
    ``with`` block runs and when it ends. Fields that more than one thread
    writes (``seen``, ``rank_pids``) are changed under ``lock``.

    Args:
        world_size: ranks the block starts; ``None`` for whole programs only.
        timeout_s: the deadline in seconds.
        threads: torch threads per rank.
        warm: fork ranks from the warm server unless a start says otherwise.
        expect_reports: a rank that ends without its report stops the launch.
    """

    world_size: int | None
    timeout_s: float
    threads: int
    warm: bool = True
    expect_reports: bool = False

    # -- set when the block opens ----------------------------------------------------
    #: monotonic time the block began; ``None`` before it did
    t0: float | None = None
    #: the launch's own folder (reports, output, the ranks' temporary files)
    folder: Path | None = None
    #: where the ranks' reports and progress go
    channel: reports.Channel | None = None
    #: the 127.0.0.1 port of the launch's store
    port: int = 0
    #: what every process of the launch finds in its environment
    env: dict[str, str] = field(default_factory=dict)

    # -- what the launch started ----------------------------------------------------
    #: processes that ran below this process before the block began (not the launch's)
    before: set[tuple[int, float]] = field(default_factory=set)
    #: every process of the launch the watcher has seen, by (pid, start time)
    seen: dict[tuple[int, float], psutil.Process] = field(default_factory=dict)
    #: each rank's pid, by rank
    rank_pids: dict[int, int] = field(default_factory=dict)
    #: the whole programs the launch started
    commands: list[Command] = field(default_factory=list)
    #: how many times ranks were asked for (``mp.spawn`` calls)
    spawn_calls: int = 0
    #: the names of the functions the ranks ran
    names: list[str] = field(default_factory=list)

    # -- how it ended ------------------------------------------------------------------
    #: ranks started with ``join=False`` (mp.spawn hands their ``ProcessContext`` back)
    unjoined: int = 0
    #: each rank's exit code, by rank
    ended: dict[int, int] = field(default_factory=dict)
    #: the traceback of each rank that raised
    raised_by: dict[int, str] = field(default_factory=dict)
    #: where each rank that was stopped while running was
    stacks: dict[int, str] = field(default_factory=dict)
    #: where each rank whose function ended left it
    left: dict[int, str] = field(default_factory=dict)
    timed_out: bool = False
    #: the watcher stopped the launch because a rank left without its report
    stopped_early: bool = False
    started: int = 0
    stopped: int = 0
    output: str = ""
    reports: list[dict] = field(default_factory=list)
    elapsed_s: float = 0.0
    #: the ranks' last progress, read as the block ended
    last_progress: dict[int, tuple[int, int]] = field(default_factory=dict)

    # -- between threads ---------------------------------------------------------------
    #: set when the block ends (or failed to open): the watch thread stops
    done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def scratch(self) -> Path:
        """The ranks' temporary files (``TMPDIR``), removed with the launch's folder."""
        return self._inside("tmp")

    @property
    def stacks_folder(self) -> Path:
        """Where the ranks write their stacks and the line their function left from."""
        return self._inside("stacks")

    @property
    def running(self) -> bool:
        """True between entering the ``with`` block and leaving it."""
        return self.t0 is not None and not self.done.is_set()

    def _inside(self, name: str) -> Path:
        if self.folder is None:
            raise RuntimeError(f"the launch's {name} folder exists only inside its `with` block")
        return self.folder / name
