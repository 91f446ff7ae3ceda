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
import subprocess
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
from . import capture, errors, processes, torch_hooks
from .ranks import RankStart, Target, entry

#: Seconds between two looks at the processes of a launch.
WATCH_S = 0.1

#: Seconds a rank that ended without its report may precede the verdict that it left early.
EARLY_EXIT_GRACE_S = 0.5

#: Tells a rank's ``init_process_group`` to use the store the launch hosts at ``MASTER_PORT``.
_AGENT_STORE_ENV = "TORCHELASTIC_USE_AGENT_STORE"

#: Set for every process a launch starts: which launch it belongs to.
LAUNCH_TAG_ENV = "DDP_LESSON_LAUNCH"

#: Where temporary folders of launches start their names (a stale one is removed).
FOLDER_PREFIX = "ddp-lesson-launch-"

#: Marks, with the owner's pid, the multiprocessing folder that holds a warm server's socket.
SERVER_MARK = "ddp-lesson-server-of-"

#: The launches whose ``with`` block is running in this process, innermost last.
_active: list[Supervisor] = []


def active() -> Supervisor | None:
    """The innermost launch whose ``with`` block is running in this process, if any."""
    return _active[-1] if _active else None


def listening_socket() -> tuple[int, int]:
    """A TCP socket listening on 127.0.0.1 at a port the OS picked: ``(port, fd)``.

    The only free-port helper of the course: a socket that already listens
    cannot be taken by anyone else, unlike a port number looked up and
    released.
    """
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock.getsockname()[1], sock.detach()


def _interactive_main() -> bool:
    """True when ``__main__`` is a notebook or a prompt, not a file a new process can import."""
    main = sys.modules.get("__main__")
    return not getattr(main, "__file__", None) or "ipykernel" in str(main.__file__)


def _unguarded_line() -> int | None:
    """The line of the main file's top-level code, outside its main guard, that is starting ranks.

    Every rank imports the main file again (both spawn and forkserver start
    methods do), so such a line would start processes in every rank.
    ``None`` when the call comes from a function, from under ``if __name__
    == "__main__":``, or from a notebook.
    """
    import ast

    if _interactive_main():
        return None
    path = os.path.abspath(sys.modules["__main__"].__file__)
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename) != path:
        frame = frame.f_back
    if frame is None or frame.f_code.co_name != "<module>":
        return None
    line = frame.f_lineno
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.If)
            and "__name__" in ast.unparse(node.test)
            and "__main__" in ast.unparse(node.test)
            and node.lineno <= line <= (node.end_lineno or node.lineno)
        ):
            return None
    return line


#: Longest path a Unix socket may have, in bytes (sun_path: 108 on Linux, 104 on macOS,
#: the last one for the terminating zero).
SOCKET_PATH_MAX = 107 if sys.platform.startswith("linux") else 103


def warm_server_fits() -> bool:
    """Whether this process can start its warm server: its socket path fits a Unix socket.

    The server listens on a socket in this process's ``pymp-*`` folder in the
    temporary folder; a temporary folder with a long path (a deep ``TMPDIR``)
    makes that path too long to bind ("AF_UNIX path too long"). Ranks then
    start as fresh interpreters instead.
    """
    import multiprocessing
    import tempfile
    from multiprocessing import forkserver

    if getattr(forkserver._forkserver, "_forkserver_address", None):
        return True  # running already
    # the folder this process has, or the one it would make (nothing is created here)
    folder = multiprocessing.current_process()._config.get("tempdir")
    folder = folder or os.path.join(tempfile.gettempdir(), "pymp-" + "x" * 8)
    return len(os.fsencode(os.path.join(folder, "listener-" + "x" * 8))) <= SOCKET_PATH_MAX


def start_warm_server() -> None:
    """Start this process's warm server, if it has none: the forkserver that preloads ``warm``.

    Its ranks are forked from it (see :mod:`ddp_lesson.warm`). Used by a launch's first
    warm start, and by torchrun's agent for its workers (:mod:`.elastic`).
    """
    from multiprocessing import forkserver, util

    forkserver.set_forkserver_preload(["ddp_lesson.warm"])
    # The server's socket lies in this process's pymp-* folder, which a
    # kernel shut down by Jupyter never removes. A server started now is
    # told the folder and removes it when it ends (with this process); the
    # mark lets a later launch remove it if both were killed outright.
    folder = Path(util.get_temp_dir())
    folder.mkdir(mode=0o700, exist_ok=True)  # (gone if the server was stopped by hand)
    (folder / f"{SERVER_MARK}{os.getpid()}").touch()  # for when this process is killed
    os.environ[processes.SERVER_FOLDER_VARIABLE] = str(folder)
    try:
        forkserver.ensure_running()
    finally:
        del os.environ[processes.SERVER_FOLDER_VARIABLE]


def warm_up() -> bool:
    """Start this process's warm server now and wait until it has imported what it preloads.

    For a caller whose deadline should not count the server's start (the
    doctor, the benchmark). Returns ``False`` where no server can be
    started (see :func:`warm_server_fits`); ranks then start fresh.
    """
    import multiprocessing

    if not warm_server_fits():
        return False
    start_warm_server()
    # the server answers only once it has imported what it preloads
    first = multiprocessing.get_context("forkserver").Process(target=os.getpid)
    first.start()
    first.join()
    return True


def remove_stale_folders(root: str | os.PathLike | None = None) -> list[str]:
    """Remove the folders of launches whose process is gone (a killed kernel's, say).

    A launch removes its own folder when it ends; one whose process was
    killed cannot. Its name carries its pid, so the next launch can tell.
    """
    root = Path(root or tempfile.gettempdir())
    removed = []
    for folder in root.glob(f"{FOLDER_PREFIX}*"):
        try:
            pid = int(folder.name[len(FOLDER_PREFIX) :].split("-", 1)[0])
        except ValueError:
            continue
        if pid != os.getpid() and not processes.alive(pid):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    # multiprocessing's folders that held a warm server's socket, marked by
    # the launch that started it (their owner was killed outright)
    for mark in root.glob(f"pymp-*/{SERVER_MARK}*"):
        try:
            pid = int(mark.name[len(SERVER_MARK) :])
        except ValueError:
            continue
        if pid != os.getpid() and not processes.alive(pid):
            shutil.rmtree(mark.parent, ignore_errors=True)
            removed.append(str(mark.parent))
    return removed


class Command:
    """A whole program started by a supervisor, in a session of its own.

    Attributes:
        argv: what was run.
        process: the ``subprocess.Popen``.
        log: the file its output went to (inside the launch's folder).
    """

    def __init__(
        self, argv: Sequence[str], process: subprocess.Popen, log: Path, kept: int
    ):
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


class Supervisor:
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
        self.commands: list[Command] = []
        self._seen: dict[tuple[int, float], psutil.Process] = {}
        self._before: set[tuple[int, float]] = set()
        self._rank_pids: dict[int, int] = {}
        self._ended: dict[int, int] = {}
        self._raised_by: dict[int, str] = {}  # the traceback of each rank that raised
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
        except BaseException:
            self._done.set()
            self._close()
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
        env = {
            _AGENT_STORE_ENV: "True",
            LAUNCH_TAG_ENV: self.folder.name,
            "OMP_NUM_THREADS": str(self.threads),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        self._saved_env = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
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
        env = dict(os.environ)
        env["TMPDIR"] = str(self.scratch)
        return env

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
        if target is None and getattr(fn, "__module__", None) == "__main__" and _interactive_main():
            raise errors.LaunchError(errors.defined_in_notebook(name))
        unguarded = _unguarded_line()
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
        )
        if use_warm:
            self._ensure_server()
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
        """Wait for the ranks of ``context`` as ``mp.spawn`` does (an error in one stops all)."""
        try:
            while not context.join():
                pass
        finally:
            self._settle(context)

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
            start_warm_server()

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

    # -- starting whole programs ---------------------------------------------------
    def command(
        self,
        argv: Sequence[object],
        *,
        env: dict[str, str | None] | None = None,
        pass_fds: Sequence[int] = (),
        kept: int = capture.OUTPUT_KEPT_BYTES,
    ) -> Command:
        """Start a whole program (``python script.py ...``, ``torchrun ...``) under this launch.

        It runs in a session of its own with its output in a file of the
        launch's folder; the launch's deadline and tree stop cover it and
        everything it starts. Its processes find the launch's report folder
        in ``$DDP_LESSON_REPORT_DIR``.

        Args:
            argv: the command line.
            env: variables to set (or, with value ``None``, remove) on top of
                this process's environment.
            pass_fds: open file descriptors the program inherits.
            kept: bytes of its output kept, head and tail.
        """
        full = {k: v for k, v in os.environ.items() if k != _AGENT_STORE_ENV}
        full.update(
            {
                LAUNCH_TAG_ENV: self.folder.name,
                reports.REPORT_DIR_ENV: str(self.channel.folder),
                "TMPDIR": str(self.scratch),
                "PYTHONUNBUFFERED": "1",
            }
        )
        for key, value in (env or {}).items():
            if value is None:
                full.pop(key, None)
            else:
                full[key] = value
        log = self.folder / f"command_{len(self.commands)}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [str(a) for a in argv],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                env=full,
                pass_fds=tuple(pass_fds),
            )
        command = Command(argv, process, log, kept)
        self.commands.append(command)
        return command

    def wait(self, commands: Sequence[Command] | None = None) -> list[int | None]:
        """Wait until ``commands`` (default: all) have ended, or the deadline stopped them."""
        commands = list(self.commands if commands is None else commands)
        while any(c.returncode is None for c in commands):
            if self.timed_out and self._done.is_set():
                break
            time.sleep(WATCH_S)
        return [c.returncode for c in commands]

    # -- watching ---------------------------------------------------------------------
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

    # -- when it ends -------------------------------------------------------------------
    def _finish(self) -> None:
        if self in _active:
            _active.remove(self)
        self._last_progress = self.channel.progress()  # for a view that polls after the end
        self._done.set()
        self._watcher.join()
        self._stop()  # whatever is left: the ranks' own children included
        # Orphans adopted during the launch (a script's resource tracker) that had
        # already ended before the stop are this process's zombies: collect them.
        started_here = set(self._rank_pids.values()) | {c.process.pid for c in self.commands}
        processes.reap(p for p in self._seen.values() if p.pid not in started_here)
        for context in self._contexts:
            self._settle(context)
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
        for key, value in getattr(self, "_saved_env", {}).items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if hasattr(self, "_store"):
            del self._store  # closes the listening socket
        if hasattr(self, "channel"):
            self.reports = self.channel.collect()
        for command in self.commands:
            _ = command.output  # read before the folder goes
        shutil.rmtree(self.folder, ignore_errors=True)

    def _early_exits(self) -> list[str]:
        """Ranks that ended cleanly (code 0) without their report, in words."""
        return errors.early_exits(self._ended, {r["rank"] for r in self.reports})

    def _raise(self, exc_type, exc) -> None:
        from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException

        ranks = sorted(r["rank"] for r in self.reports)
        early = self._early_exits()
        if self.timed_out:
            message = errors.timeout(self.timeout_s, self.started, self.world_size, ranks, early)
            raise errors.LaunchTimeout(message, output=self.output) from None
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            raise errors.LaunchInterrupted(
                f"launch interrupted: its {self.started} process(es) were stopped"
            ) from None
        if isinstance(exc, ProcessRaisedException):
            trace = str(exc).split("terminated with the following error:", 1)[-1].strip()
            cause = errors.first_cause(
                exc.error_index, errors.last_error_line(trace), self._ended, self._raised_by
            )
            index = exc.error_index
            if cause and cause[2]:  # another rank raised first: that is the error to read
                index, trace = cause[0], cause[2]
            elif cause:  # another rank was killed: it raised nothing
                name = errors.signal_name(cause[1])
                message = errors.exited(cause[0], cause[1], name, self.output)
                raise errors.LaunchError(message, cause[0], output=self.output) from None
            message = errors.raised(index, trace, early, tuple(self._names))
            raise errors.LaunchError(message, index, trace, self.output) from None
        if isinstance(exc, ProcessExitedException) and self._stopped_early and early:
            raise errors.LaunchError(errors.left_early(early), output=self.output) from None
        if isinstance(exc, ProcessExitedException):
            message = errors.exited(exc.error_index, exc.exit_code, exc.signal_name, self.output)
            raise errors.LaunchError(message, exc.error_index, output=self.output) from None
        if exc is not None:
            return
        if self.output.strip():
            # Nothing failed: show what the ranks printed, after the fact.
            print("What the ranks printed:\n" + self.output.rstrip())
        if self._spawn_calls and self.started == 0 and not self.reports:
            raise errors.LaunchError(
                "no process was started: mp.spawn(..., nprocs=0) returns at once and runs "
                f"nothing. Pass nprocs=world_size (here {self.world_size})."
            )
        if self.expect_reports and self.world_size:
            missing = sorted(set(range(self.world_size)) - set(ranks))
            if missing:
                said = early or [f"rank {r} ended without sending its report" for r in missing]
                raise errors.LaunchError(errors.left_early(said), output=self.output)

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


def _key(proc: psutil.Process) -> tuple[int, float]:
    """A process's identity: its pid and start time (a pid can be reused, the pair cannot)."""
    try:
        return proc.pid, proc.create_time()
    except psutil.Error:
        return proc.pid, 0.0
