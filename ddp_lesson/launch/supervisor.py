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
import pickle
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing import resource_tracker
from pathlib import Path

import psutil

from .. import devices, reports
from ..validate import seconds, whole_number
from . import capture, errors, processes, stacks, torch_hooks
from .failures import Failures
from .folders import FOLDER_PREFIX, remove_stale_folders
from .main_file import interactive_main, unguarded_line
from .ports import listening_socket
from .programs import Command, Programs
from .ranks import RankStart, Target, entry
from .warm_server import start_warm_server, wait_until_ready, warm_server_fits
from .watching import AGENT_STORE_ENV, LAUNCH_TAG_ENV, Watcher, _active, _key

#: torch's switch for a store barrier at the end of ``init_process_group``.
INIT_BARRIER_ENV = "TORCH_DIST_INIT_BARRIER"


class Supervisor(Watcher, Programs, Failures):
    """One supervised launch; use it as a ``with`` block (see the module and :func:`bounded`).

    Args:
        world_size: ranks the block will start (checked against this machine);
            ``None`` for a block that only runs whole programs.
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
        env: the variables every process of the launch finds set (its tag,
            torch threads, the launch's store, a barrier at the end of
            ``init_process_group``); this process's own environment is left
            as it is.
    """

    def __init__(
        self,
        world_size: int | None,
        timeout_s: float = 120,
        threads_per_rank: int | None = None,
        *,
        warm: bool = True,
        expect_reports: bool = False,
    ):
        self.world_size = None if world_size is None else devices.check_world_size(world_size)
        self.timeout_s = seconds("timeout_s", timeout_s)
        if threads_per_rank is not None:
            whole_number("threads_per_rank", threads_per_rank, minimum=1)
        self.threads = threads_per_rank or devices.THREADS_PER_RANK
        self.warm = warm
        self.expect_reports = expect_reports
        self.port = 0
        self.reports: list[dict] = []
        self.elapsed_s = 0.0
        self.started = 0
        self.output = ""
        self.timed_out = False
        self.stopped = 0
        self.commands: list[Command] = []
        self._seen: dict[tuple[int, float], psutil.Process] = {}
        self._before: set[tuple[int, float]] = set()
        self._rank_pids: dict[int, int] = {}
        self._ended: dict[int, int] = {}
        self._raised_by: dict[int, str] = {}  # the traceback of each rank that raised
        self._stacks: dict[int, str] = {}  # where each rank stopped while running was
        self._left: dict[int, str] = {}  # where each rank whose function ended left it
        self._stopped_early = False
        self._contexts: list = []
        self._spawn_calls = 0
        self._names: list[str] = []
        self._done = threading.Event()
        self._lock = threading.Lock()

    # -- the block ------------------------------------------------------------
    def __enter__(self) -> Supervisor:
        errors.show_short_errors()
        self._t0 = time.monotonic()
        remove_stale_folders()
        self._before = {_key(p) for p in processes.descendants()}
        self.folder = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
        try:
            self._open()
        except BaseException as error:
            self._done.set()
            self._close()
            if isinstance(error, KeyboardInterrupt):
                raise errors.LaunchInterrupted(errors.interrupted(0)) from None
            raise
        _active.append(self)
        return self

    def _open(self) -> None:
        """Everything the block needs, in an order :meth:`_close` can undo from any point."""
        import torch.distributed as dist

        self.channel = reports.Channel(self.folder / "reports")
        self.channel.folder.mkdir()
        self.scratch = self.folder / "tmp"  # the ranks' temporary files go here, and go with it
        self.scratch.mkdir()
        self.stacks_folder = self.folder / "stacks"  # the ranks' stacks, and where they left
        self.stacks_folder.mkdir()
        self.port, fd = listening_socket()
        # The store takes over the listening socket and closes it when deleted.
        self._store = dist.TCPStore(
            "127.0.0.1",
            self.port,
            None,
            True,
            datetime.timedelta(seconds=self.timeout_s),
            wait_for_workers=False,
            master_listen_fd=fd,
        )
        # what every process of the launch finds in its environment; this
        # process's own environment stays as it is
        self.env = {
            AGENT_STORE_ENV: "True",
            LAUNCH_TAG_ENV: self.folder.name,
            "OMP_NUM_THREADS": str(self.threads),
            "PYTHONDONTWRITEBYTECODE": "1",
            # torch's own switch: init_process_group ends with a barrier on the
            # store. Without it gloo's init can return on one rank while a
            # partner still reads their new connection; a rank that then
            # leaves (or fails) closes it under the partner, whose init fails
            # with "Connection closed by peer" (tests/faults/test_early_leave.py).
            INIT_BARRIER_ENV: "1",
        }
        # torch logs "Terminating process <pid> via signal SIGTERM" when it stops
        # the other ranks after a failure; the error says it in words, without pids.
        self._spawn_log = logging.getLogger("torch.multiprocessing.spawn")
        self._saved_level = self._spawn_log.level
        self._spawn_log.setLevel(logging.ERROR)
        self._route()
        # Started now, before the output is redirected: it outlives the launch
        # and must not hold the output pipe open.
        resource_tracker.ensure_running()
        self._orphans = processes.adopting_orphans()
        self._orphans.__enter__()
        self._tap = capture.OutputTap(self.folder / "output.fifo")
        self._watcher = threading.Thread(target=self._watch, name="ddp-lesson-watch", daemon=True)
        self._watcher.start()

    def __exit__(self, exc_type, exc, tb) -> bool:
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
        self._finish()
        self._raise(exc_type, exc)
        return False

    # -- starting ranks ---------------------------------------------------------
    def _rank_env(self) -> dict[str, str]:
        return {**os.environ, **self.env, "TMPDIR": str(self.scratch)}

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

        Inside the block, ``mp.spawn`` and ``mp.start_processes`` come here.
        Each rank starts at :func:`ddp_lesson.launch.ranks.entry`, which sets
        it up for this launch and then imports ``fn`` by module and name.

        Args:
            fn: a function defined at the top level of a module.
            args: what follows ``rank``.
            nprocs: how many ranks.
            join: wait for them (as ``mp.spawn`` does); ``False`` returns
                torch's ``ProcessContext``.
            daemon: start them as daemonic processes.
            warm: fork them from the warm server (``True``), start fresh
                interpreters (``False``), or follow the launch's setting.

        Raises:
            LaunchError: ``fn`` is defined in a notebook cell (no new process
                can import it).
        """
        from multiprocessing import get_all_start_methods

        self._spawn_calls += 1
        whole_number("nprocs", nprocs)
        target = Target.of(fn)
        name = getattr(fn, "__qualname__", repr(fn))
        self._names.append(name.rsplit(".", 1)[-1])
        if target is None and getattr(fn, "__module__", None) == "__main__" and interactive_main():
            raise errors.LaunchError(errors.defined_in_notebook(name))
        unguarded = unguarded_line()
        if unguarded is not None:
            raise errors.LaunchError(errors.unguarded_start(sys.modules["__main__"].__file__,
                                                            unguarded))
        use_warm = self.warm if warm is None else warm
        use_warm = use_warm and bool(self._tap.path) and "forkserver" in get_all_start_methods()
        use_warm = use_warm and warm_server_fits()  # (else fresh interpreters: slower, the same)
        if nprocs == 0:
            return None
        start = RankStart(
            folder=str(self.channel.folder),
            launcher=os.getpid(),
            threads=self.threads,
            env=self._rank_env(),
            output=self._tap.path if use_warm else "",
            cwd=os.getcwd(),
            sys_path=tuple(sys.path),
            stacks=str(self.stacks_folder),
        )
        if use_warm:
            self._ensure_server()
        # a fresh interpreter takes this process's environment as it starts
        with _environment(self.env if not use_warm else {}):
            context = self._torch_start(
                entry, (start, target or fn, *args), nprocs, False, daemon,
                "forkserver" if use_warm else "spawn",
            )  # fmt: skip
        with self._lock:
            first = len(self._rank_pids)
            self._rank_pids.update({first + i: p.pid for i, p in enumerate(context.processes)})
        self._contexts.append(context)
        if not join:
            return context
        self.join(context)
        return None

    def join(self, context) -> None:
        """Wait for the ranks of ``context`` as ``mp.spawn`` does (an error in one stops all).

        When a rank fails, the others still running are asked where they are
        before torch stops them (see :meth:`take_stacks`).
        """
        from multiprocessing.connection import wait

        try:
            while True:
                running = [p.sentinel for p in context.processes if p.exitcode is None]
                if running:
                    wait(running)
                if any(p.exitcode for p in context.processes):  # one failed: torch stops the rest
                    self.take_stacks()
                if context.join():
                    return
        finally:
            self._settle(context)

    def take_stacks(self) -> None:
        """Note where each rank still running is, before it is stopped (:func:`.stacks.take`)."""
        with self._lock:
            ranks = dict(self._rank_pids)
        self._stacks.update(stacks.take(ranks, self.stacks_folder, self._stacks))

    def _settle(self, context) -> None:
        """Note how each rank ended and what it raised; remove the error files torch leaves."""
        for index, proc in enumerate(context.processes):
            if proc.exitcode is not None:
                self._ended[index] = proc.exitcode
        for index, path in enumerate(context.error_files):
            with contextlib.suppress(OSError, EOFError, pickle.UnpicklingError):
                with open(path, "rb") as written:  # torch's: the traceback text, pickled
                    self._raised_by[index] = str(pickle.load(written))
            with contextlib.suppress(OSError):
                os.unlink(path)

    def _ensure_server(self) -> None:
        with self._tap.paused():  # the server outlives this launch: not on its pipe
            with _environment(self.env):  # (it starts as the launch's processes do)
                start_warm_server()
        # Ask for ranks only once the server can fork them: an interrupt while it
        # imports then leaves no request in its socket to start a rank after the launch.
        if not wait_until_ready(give_up=lambda: self.timed_out):
            raise errors.LaunchError("the deadline passed while the warm server started")

    def _route(self) -> None:
        """Hand ``mp.spawn`` and ``mp.start_processes`` inside the block to this launch."""

        def start_processes(torch_start, fn, args=(), nprocs=1, join=True, daemon=False,
                            start_method="spawn"):
            return self.start_ranks(fn, args, nprocs, join=join, daemon=daemon)

        self._hooks = contextlib.ExitStack()
        self._hooks.enter_context(torch_hooks.handed(torch_hooks.START_PROCESSES,
                                                     start_processes))
        # what starts ranks: torch's own, also when an enclosing launch has handed it over
        self._torch_start = torch_hooks.underneath(torch_hooks.START_PROCESSES)

    # -- when it ends -------------------------------------------------------------------
    def _finish(self) -> None:
        if self in _active:
            _active.remove(self)
        self._last_progress = self.channel.progress()  # for a view that polls after the end
        self._done.set()
        self._watcher.join()
        self.stopped = self._stop()  # whatever is left: the ranks' own children included
        # Orphans adopted during the launch (a script's resource tracker) that had
        # already ended before the stop are this process's zombies: collect them.
        started_here = set(self._rank_pids.values()) | {c.process.pid for c in self.commands}
        processes.reap(p for p in self._seen.values() if p.pid not in started_here)
        for context in self._contexts:
            self._settle(context)
        self._left = stacks.exits(self.stacks_folder)
        with self._lock:
            # The ranks, known by pid, not what runs below them (a worker's own
            # subprocess is not a rank). Below a whole program every process counts:
            # which of them are its ranks only the program knows.
            ranks = set(self._rank_pids.values())
            below = {pid for pid, _ in self._seen} if self.commands else set()
            self.started = len(ranks | below)
        self._close()
        self.elapsed_s = time.monotonic() - self._t0

    def _close(self) -> None:
        """Undo what :meth:`_open` did (as far as it got) and collect what the launch left."""
        if hasattr(self, "_tap"):
            self.output = self._tap.close()
        if hasattr(self, "_orphans"):
            self._orphans.__exit__(None, None, None)
        if hasattr(self, "_hooks"):
            self._hooks.close()
        if hasattr(self, "_saved_level"):
            self._spawn_log.setLevel(self._saved_level)
        if hasattr(self, "_store"):
            del self._store  # closes the listening socket
        if hasattr(self, "channel"):
            self.reports = self.channel.collect()
        for command in self.commands:
            _ = command.output  # read before the folder goes
        shutil.rmtree(self.folder, ignore_errors=True)

    # -- reading the launch ---------------------------------------------------------------
    @property
    def running(self) -> bool:
        """True between entering the ``with`` block and leaving it."""
        return hasattr(self, "_t0") and not self._done.is_set()

    def progress(self) -> dict[int, tuple[int, int]]:
        """What each rank last sent with :func:`reports.send_progress`.

        Returns ``{rank: (done, total)}``: empty before any rank reported;
        after the block ended, the last values the ranks sent.
        """
        if not self.running:
            return dict(getattr(self, "_last_progress", {}))
        return self.channel.progress()

    def summary(self, columns: Sequence[str], *, digits: int = 4) -> str:
        """The ranks' reports as a table sorted by rank (see :func:`reports.table`)."""
        return reports.table(self.reports, columns, digits=digits)


#: Held while this process's environment carries a launch's variables.
_environment_lock = threading.Lock()


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    """This process's environment with ``values`` set, only while a process is being started.

    A process started by the ``spawn`` method (or the warm server) takes
    the environment of the moment it starts; it is put back right after.
    """
    if not values:
        yield
        return
    with _environment_lock:
        saved = {key: os.environ.get(key) for key in values}
        os.environ.update(values)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
