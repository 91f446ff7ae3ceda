"""The one supervisor: every process the course starts runs under a :class:`Supervisor`.

A lesson cell's ``mp.spawn``, the warm starts of the checks, widgets and
doctor, a whole script (``python file.py``), the doctor's runs and
``torchrun`` are all "build what to start, hand it to the supervisor". The
supervisor owns, for the length of one ``with`` block:

* a folder of its own (reports, progress, output, the ranks' temporary
  files), removed when the block ends;
* a meeting point for ``init_process_group``: a ``TCPStore`` hosted on
  127.0.0.1 at a port the operating system picked (:attr:`port`), so two
  notebooks never clash and nothing listens beyond this machine;
* one deadline: whatever still runs after ``timeout_s`` is stopped;
* every process started inside the block, however deep (see
  :mod:`ddp_lesson.launch.processes`), gone when it ends, also after an
  error or an interrupted cell;
* what the processes print, collected and bounded (:mod:`.capture`);
* the ranks' reports, sorted by rank (:attr:`reports`);
* short errors naming the rank, the error and the worker's line
  (:mod:`.errors`).
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from multiprocessing import resource_tracker
from pathlib import Path

from .. import devices, reports
from ..validate import seconds, whole_number
from . import capture, errors, processes, stacks, torch_hooks, watching
from .failures import Failures
from .folders import FOLDER_PREFIX, remove_stale_folders
from .ports import listening_socket
from .programs import Programs
from .rank_starter import RankStarter
from .state import Command, LaunchState
from .watching import AGENT_STORE_ENV, LAUNCH_TAG_ENV, Watcher, process_key

#: torch's switch for a store barrier at the end of ``init_process_group``.
INIT_BARRIER_ENV = "TORCH_DIST_INIT_BARRIER"


def _shared(name: str, doc: str) -> property:
    """A property of the supervisor that reads and writes the field ``name`` of its state."""

    def read(self: Supervisor):
        return getattr(self.state, name)

    def write(self: Supervisor, value) -> None:
        setattr(self.state, name, value)

    return property(read, write, doc=doc)


class Supervisor:
    """One supervised launch; use it as a ``with`` block (see the module and :func:`bounded`).

    It is made of parts that share one :class:`.state.LaunchState`
    (:attr:`state`): :attr:`watcher` (the watch thread, the deadline, the
    tree stop), :attr:`ranks` (ranks started as ``mp.spawn`` would),
    :attr:`programs` (whole programs) and :attr:`failures` (what the launch
    raises when it ends). The supervisor opens the block, hands
    ``mp.spawn`` inside it to :attr:`ranks`, and closes it.

    Args:
        world_size: ranks the block will start (checked against this machine,
            and against every start of ranks inside the block); ``None`` for
            a block that only runs whole programs.
        timeout_s: the deadline in seconds.
        threads_per_rank: torch threads per rank; defaults to
            :data:`ddp_lesson.devices.THREADS_PER_RANK`.
        warm: fork ranks from a server that has imported torch once
            (milliseconds); ``False`` starts each as a fresh interpreter
            (seconds), as plain ``mp.spawn`` does. Either way a rank runs
            the launching file's top level again when the launching process
            runs a file (which is why the lesson's script needs its
            ``if __name__ == "__main__":`` guard), and imports the worker's
            module by name.
        expect_reports: every rank must report: a rank that ends without
            its report stops the launch with a message naming it.

    Attributes:
        port: the free 127.0.0.1 port where the group meets; give it to the
            ranks (``MASTER_PORT``).
        reports: the ranks' reports, sorted by rank (filled when the block ends).
        elapsed_s: wall time of the block in seconds (filled when it ends).
        started: how many processes the launch started: its ranks (not the
            processes a rank starts itself), and for a whole program the
            program and every process seen running below it.
        output: what the ranks printed (filled when it ends).
        timed_out: the deadline stopped the launch.
        stopped: how many processes were still running when the block ended,
            and were stopped then.
        commands: the whole programs started with :meth:`command`.
        env: the variables every process of the launch finds set (its tag,
            torch threads, the launch's store, a barrier at the end of
            ``init_process_group``); this process's own environment is left
            as it is.
    """

    world_size = _shared("world_size", "Ranks the block starts; ``None`` for programs only.")
    timeout_s = _shared("timeout_s", "The deadline in seconds.")
    threads = _shared("threads", "Torch threads per rank.")
    warm = _shared("warm", "Whether ranks are forked from the warm server by default.")
    expect_reports = _shared("expect_reports", "Whether every rank must report.")
    port = _shared("port", "The 127.0.0.1 port where the group meets.")
    reports = _shared("reports", "The ranks' reports, sorted by rank (once the block ended).")
    elapsed_s = _shared("elapsed_s", "Wall time of the block in seconds (once it ended).")
    started = _shared("started", "How many processes the launch started.")
    output = _shared("output", "What the ranks printed (once the block ended).")
    timed_out = _shared("timed_out", "The deadline stopped the launch.")
    stopped = _shared("stopped", "Processes still running when the block ended, then stopped.")
    commands = _shared("commands", "The whole programs the launch started.")
    env = _shared("env", "The variables every process of the launch finds set.")
    folder = _shared("folder", "The launch's folder (inside the block).")
    channel = _shared("channel", "Where the ranks' reports go (inside the block).")

    def __init__(
        self,
        world_size: int | None,
        timeout_s: float = 120,
        threads_per_rank: int | None = None,
        *,
        warm: bool = True,
        expect_reports: bool = False,
    ):
        if threads_per_rank is not None:
            whole_number("threads_per_rank", threads_per_rank, minimum=1)
        self.state = LaunchState(
            world_size=None if world_size is None else devices.check_world_size(world_size),
            timeout_s=seconds("timeout_s", timeout_s),
            threads=threads_per_rank or devices.THREADS_PER_RANK,
            warm=warm,
            expect_reports=expect_reports,
        )
        self.watcher = Watcher(self.state)
        self.ranks = RankStarter(self.state, self.watcher)
        self.programs = Programs(self.state)
        self.failures = Failures(self.state)
        self._teardown = contextlib.ExitStack()  # undoes what the block set up, last first
        self._store = None

    # -- the block ------------------------------------------------------------
    def __enter__(self) -> Supervisor:
        errors.show_short_errors()
        state = self.state
        state.t0 = time.monotonic()
        remove_stale_folders()
        state.before = {process_key(p) for p in processes.descendants()}
        try:
            self._open()
        except BaseException as error:
            state.done.set()
            self._teardown.close()
            if isinstance(error, KeyboardInterrupt):
                raise errors.LaunchInterrupted(errors.interrupted(0)) from None
            raise
        watching.began(self)
        return self

    def _open(self) -> None:
        """Set up everything the block needs, each step with its undoing on the teardown stack."""
        state, teardown = self.state, self._teardown
        state.folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
        teardown.callback(self._remove_folder)
        state.channel = reports.Channel(state.folder / "reports")
        state.channel.folder.mkdir()
        teardown.callback(self._collect_reports)
        state.scratch.mkdir()  # the ranks' temporary files go here, and go with the folder
        state.stacks_folder.mkdir()  # the ranks' stacks, and where they left
        self._open_store()
        teardown.callback(self._close_store)
        state.env = _launch_env(state)
        # torch logs "Terminating process <pid> via signal SIGTERM" when it stops
        # the other ranks after a failure; the error says it in words, without pids.
        spawn_log = logging.getLogger("torch.multiprocessing.spawn")
        teardown.callback(spawn_log.setLevel, spawn_log.level)
        spawn_log.setLevel(logging.ERROR)
        self._route()
        # Started now, before the output is redirected: it outlives the launch
        # and must not hold the output pipe open.
        resource_tracker.ensure_running()
        teardown.enter_context(processes.adopting_orphans())
        self.ranks.tap = capture.OutputTap(state.folder / "output.fifo")
        teardown.callback(self._keep_output)
        self.watcher.start()

    def _open_store(self) -> None:
        """Host the launch's ``TCPStore`` on a free 127.0.0.1 port the system picked."""
        import torch.distributed as dist

        self.state.port, fd = listening_socket()
        # The store takes over the listening socket and closes it when deleted.
        self._store = dist.TCPStore(
            "127.0.0.1",
            self.state.port,
            None,
            True,
            datetime.timedelta(seconds=self.state.timeout_s),
            wait_for_workers=False,
            master_listen_fd=fd,
        )

    def __exit__(self, exc_type, exc, tb) -> bool:
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
        self._finish()
        self.failures.raise_for(exc_type, exc)
        return False

    # -- starting ranks ---------------------------------------------------------
    def start_ranks(
        self,
        fn: Callable,
        args: tuple = (),
        nprocs: int = 1,
        *,
        join: bool = True,
        daemon: bool = False,
        warm: bool | None = None,
    ):
        """Start ``nprocs`` ranks running ``fn(rank, *args)``, as ``mp.spawn`` does.

        Inside the block, ``mp.spawn`` and ``mp.start_processes`` come here
        (:class:`.rank_starter.RankStarter` does the work). Each rank starts
        at :func:`ddp_lesson.launch.ranks.entry`, which sets it up for this
        launch and then imports ``fn`` by module and name.

        Args:
            fn: a function defined at the top level of a module.
            args: what follows ``rank``.
            nprocs: how many ranks: the block's ``world_size``, where it has one.
            join: wait for them (as ``mp.spawn`` does); ``False`` returns
                torch's ``ProcessContext``.
            daemon: start them as daemonic processes.
            warm: fork them from the warm server (``True``), start fresh
                interpreters (``False``), or follow the launch's setting.

        Raises:
            LaunchError: ``fn`` is defined in a notebook cell (no new process
                can import it), the launching file starts ranks outside its
                main guard, or ``nprocs`` is not the block's ``world_size``;
                no rank is started then.
        """
        return self.ranks.start(fn, args, nprocs, join=join, daemon=daemon, warm=warm)

    def join(self, context) -> None:
        """Wait for the ranks of ``context`` as ``mp.spawn`` does (an error in one stops all).

        When a rank fails, the others still running are asked where they are
        before torch stops them (see :meth:`take_stacks`).

        Args:
            context: torch's ``ProcessContext`` of a start of ranks.
        """
        self.ranks.join(context)

    def take_stacks(self) -> None:
        """Note where each rank still running is, before it is stopped (:func:`.stacks.take`)."""
        self.watcher.take_stacks()

    def _route(self) -> None:
        """Hand ``mp.spawn`` and ``mp.start_processes`` inside the block to this launch."""

        def start_processes(torch_start, fn, args=(), nprocs=1, join=True, daemon=False,
                            start_method="spawn"):
            return self.start_ranks(fn, args, nprocs, join=join, daemon=daemon)

        self._teardown.enter_context(torch_hooks.handed(torch_hooks.START_PROCESSES,
                                                        start_processes))
        # what starts ranks: torch's own, also when an enclosing launch has handed it over
        self.ranks.torch_start = torch_hooks.underneath(torch_hooks.START_PROCESSES)

    # -- whole programs ---------------------------------------------------------------------
    def command(
        self,
        argv: Sequence[object],
        *,
        env: dict[str, str | None] | None = None,
        pass_fds: Sequence[int] = (),
        kept: int = capture.OUTPUT_KEPT_BYTES,
    ) -> Command:
        """Start a whole program under this launch (see :meth:`.programs.Programs.command`).

        Args:
            argv: the command line.
            env: variables to set (or, with value ``None``, remove) on top of
                this process's environment.
            pass_fds: open file descriptors the program inherits.
            kept: bytes of its output kept, head and tail.
        """
        return self.programs.command(argv, env=env, pass_fds=pass_fds, kept=kept)

    def wait(self, commands: Sequence[Command] | None = None) -> list[int | None]:
        """Wait until ``commands`` (default: all) have ended, or the deadline stopped them.

        Args:
            commands: the programs to wait for; all the launch started by default.
        """
        return self.programs.wait(commands)

    # -- when it ends -------------------------------------------------------------------
    def _finish(self) -> None:
        state = self.state
        watching.ended(self)
        state.last_progress = state.channel.progress()  # for a view that polls after the end
        state.done.set()
        self.watcher.join()
        state.stopped = self.watcher.stop()  # whatever is left: the ranks' own children included
        # Orphans adopted during the launch (a script's resource tracker) that had
        # already ended before the stop are this process's zombies: collect them.
        started_here = set(state.rank_pids.values()) | {c.process.pid for c in state.commands}
        processes.reap(p for p in state.seen.values() if p.pid not in started_here)
        for context in self.ranks.contexts:
            self.ranks.settle(context)
        state.left = stacks.exits(state.stacks_folder)
        with state.lock:
            # The ranks, known by pid, not what runs below them (a worker's own
            # subprocess is not a rank). Below a whole program every process counts:
            # which of them are its ranks only the program knows.
            ranks = set(state.rank_pids.values())
            below = {pid for pid, _ in state.seen} if state.commands else set()
            state.started = len(ranks | below)
        self._teardown.close()
        state.elapsed_s = time.monotonic() - state.t0

    # (the steps of the teardown, each registered as its step of the opening succeeded)
    def _keep_output(self) -> None:
        self.state.output = self.ranks.tap.close()

    def _close_store(self) -> None:
        self._store = None  # the last reference: closes the listening socket

    def _collect_reports(self) -> None:
        self.state.reports = self.state.channel.collect()

    def _remove_folder(self) -> None:
        for command in self.state.commands:
            _ = command.output  # read before the folder goes
        shutil.rmtree(self.state.folder, ignore_errors=True)

    # -- reading the launch ---------------------------------------------------------------
    @property
    def running(self) -> bool:
        """True between entering the ``with`` block and leaving it."""
        return self.state.running

    def progress(self) -> dict[int, tuple[int, int]]:
        """What each rank last sent with :func:`reports.send_progress`.

        Returns ``{rank: (done, total)}``: empty before any rank reported;
        after the block ended, the last values the ranks sent.
        """
        if not self.running:
            return dict(self.state.last_progress)
        return self.state.channel.progress()

    def summary(self, columns: Sequence[str], *, digits: int = 4) -> str:
        """The ranks' reports as a table sorted by rank (see :func:`reports.table`)."""
        return reports.table(self.state.reports, columns, digits=digits)


def _launch_env(state: LaunchState) -> dict[str, str]:
    """What every process of the launch finds in its environment (this process's stays as it is).

    Args:
        state: the launch, once its folder exists.
    """
    return {
        AGENT_STORE_ENV: "True",
        LAUNCH_TAG_ENV: state.folder.name,
        "OMP_NUM_THREADS": str(state.threads),
        "PYTHONDONTWRITEBYTECODE": "1",
        # torch's own switch: init_process_group ends with a barrier on the
        # store. Without it gloo's init can return on one rank while a
        # partner still reads their new connection; a rank that then
        # leaves (or fails) closes it under the partner, whose init fails
        # with "Connection closed by peer" (tests/faults/test_early_leave.py).
        INIT_BARRIER_ENV: "1",
    }


