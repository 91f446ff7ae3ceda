"""Bounded, tidy launches around the lesson's own ``mp.spawn`` call.

The notebooks start processes exactly as the lesson teaches::

    with launch.bounded(world_size, timeout_s=60) as run:
        mp.spawn(worker.main, args=(world_size, run.port), nprocs=world_size)
    print(run.summary(["rank", "device"]))

and :func:`bounded` takes care of what the lesson leaves out:

* a meeting point (a ``TCPStore``) for ``init_process_group``, hosted by the
  notebook on 127.0.0.1 and a free port picked for this launch, so two
  notebooks never clash and nothing listens on other interfaces (this is how
  ``torchrun``'s agent hosts it, too);
* a deadline: ranks still running after ``timeout_s`` are stopped, and the
  cell ends with a message instead of hanging for half an hour;
* no leftovers: every process started inside the block is gone when it ends,
  also after an error or an interrupted cell;
* short errors: a rank's exception comes back as one message that names the
  rank, the error and the line of the worker;
* quiet ranks: what the ranks print is collected and shown after the
  launch (or quoted in the error), not interleaved into the cell;
* reports: what ranks sent with :func:`ddp_lesson.reports.send_report`,
  sorted by rank, in ``run.reports``;
* one torch thread count per rank (cores // world_size), so ranks do not
  fight over the cores.
"""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from multiprocessing import resource_tracker
from pathlib import Path

import psutil
import torch.distributed as dist
from torch.multiprocessing.spawn import ProcessExitedException, ProcessRaisedException

from . import devices, reports
from .validate import whole_number

#: Seconds between the polite stop (SIGTERM) and the forced one (SIGKILL).
STOP_GRACE_S = 2.0

#: How much of the ranks' output is kept: the first and the last this many bytes.
OUTPUT_KEPT_BYTES = 32 * 1024

#: Environment that the launched ranks inherit while a launch runs.
_AGENT_STORE_ENV = "TORCHELASTIC_USE_AGENT_STORE"

#: Where a rank forked by :func:`start` sends what it prints (the launch's named pipe).
_OUTPUT_ENV = "DDP_LESSON_OUTPUT_PIPE"

#: The launch whose ``with`` block is running, for :func:`start`.
_active: Run | None = None


class _OutputTap:
    """Collects what the ranks write to stdout and stderr, keeping head and tail only.

    Ranks that ``mp.spawn`` starts inherit file descriptors 1 and 2. For the
    length of a launch both point at a named pipe (``path``) that a thread
    drains, so a rank that floods its output can neither fill the notebook
    nor the disk, and never blocks. Ranks forked by :func:`start` do not
    inherit this process's descriptors; they open the named pipe themselves.
    """

    def __init__(self, path: str, kept: int = OUTPUT_KEPT_BYTES):
        self.kept = kept
        self.path = path
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        if hasattr(os, "mkfifo"):
            os.mkfifo(path)
            read_end = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # no writer yet
            os.set_blocking(read_end, True)
            write_end = os.open(path, os.O_WRONLY)
        else:  # no named pipes (Windows): mp.spawn's ranks only
            read_end, write_end = os.pipe()
            self.path = ""
        self._saved = (os.dup(1), os.dup(2))
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        os.close(write_end)
        self._reader = threading.Thread(
            target=self._drain, args=(read_end,), name="ddp-lesson-output", daemon=True
        )
        self._reader.start()

    def _drain(self, fd: int) -> None:
        with os.fdopen(fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(65536):
                self.total += len(chunk)
                room = self.kept - len(self.head)
                if room > 0:
                    self.head += chunk[:room]
                    chunk = chunk[room:]
                self.tail = (self.tail + chunk)[-self.kept :]

    @contextlib.contextmanager
    def paused(self):
        """Point fds 1 and 2 back where they were for the block, then at the pipe again.

        A process started inside the block (the forkserver, which outlives
        the launch) must not hold the pipe open, or the drain never ends.
        """
        sys.stdout.flush()
        sys.stderr.flush()
        pipe = (os.dup(1), os.dup(2))
        try:
            for fd, saved in zip((1, 2), self._saved, strict=True):
                os.dup2(saved, fd)
            yield
        finally:
            for fd, write_end in zip((1, 2), pipe, strict=True):
                os.dup2(write_end, fd)
                os.close(write_end)

    def close(self) -> str:
        """Point fds 1 and 2 back where they were and return what was collected."""
        for fd, saved in zip((1, 2), self._saved, strict=True):
            os.dup2(saved, fd)  # drops this process's last write end of the pipe
            os.close(saved)
        self._reader.join(timeout=2)
        text = self.head.decode(errors="replace")
        skipped = self.total - len(self.head) - len(self.tail)
        if skipped > 0:
            text += f"\n[... {skipped} bytes of rank output not shown ...]\n"
        return text + self.tail.decode(errors="replace")


class LaunchError(RuntimeError):
    """A rank of a supervised launch failed; the message says which and why.

    Attributes:
        rank: the rank that failed first, or ``None`` if not known.
        rank_traceback: the failing rank's full traceback text, if it raised.
        output: everything the ranks printed during the launch.
    """

    def __init__(
        self, message: str, rank: int | None = None, rank_traceback: str = "", output: str = ""
    ):
        super().__init__(message)
        self.rank = rank
        self.rank_traceback = rank_traceback
        self.output = output

    def brief(self) -> str:
        r"""The error and the worker line, without what changes from run to run.

        Which rank fails first, file paths and port numbers differ between two
        runs of the same faulty worker; the error and the line that raised it
        do not, so a notebook can print this and still compare equal.

        >>> error = LaunchError(
        ...     "rank 1 raised RuntimeError: Connection closed by peer [127.0.0.1]:4123"
        ...     "\n  at w.py, line 3, in main: all_reduce(t)\nAny other ranks were stopped."
        ... )
        >>> print(error.brief())
        RuntimeError: Connection closed by peer [127.0.0.1]
        at w.py, line 3, in main: all_reduce(t)
        """
        first, *rest = str(self).splitlines()
        first = first.split(" raised ", 1)[-1]
        first = re.sub(r"\[/\S+\] ", "", re.sub(r"\]:\d+", "]", first))
        where = [line.strip() for line in rest if line.strip().startswith("at ")]
        return "\n".join([first[:150]] + where[:1])


class LaunchTimeout(LaunchError):
    """A supervised launch ran past its deadline and its ranks were stopped."""


def _show_launch_error(shell, etype, evalue, tb, tb_offset=None) -> list[str]:
    """Show a LaunchError in a notebook as its message alone.

    The message already names the rank, the error and the worker's line;
    the frames inside this module would only bury it.
    """
    lines = [f"\x1b[31m{etype.__name__}\x1b[0m: {evalue}"]
    shell._showtraceback(etype, evalue, lines)
    return lines


def _install_short_errors() -> None:
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "set_custom_exc"):
        shell.set_custom_exc((LaunchError,), _show_launch_error)


_install_short_errors()


def _is_helper(proc: psutil.Process) -> bool:
    """True for multiprocessing's resource tracker and forkserver: they live as long as we do."""
    from multiprocessing import forkserver

    # by pid: the ranks forked from the server carry its command line too
    if proc.pid == getattr(forkserver._forkserver, "_forkserver_pid", None):
        return True
    try:
        return "resource_tracker" in " ".join(proc.cmdline())
    except psutil.Error:
        return False


def child_processes() -> list[psutil.Process]:
    """Processes descended from this one, leaving out multiprocessing's resource tracker.

    After a supervised launch this list is empty again: tests and the
    notebooks use it to show that nothing was left running.
    """
    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in kids if not _is_helper(p)]


def stop_processes(procs: Sequence[psutil.Process], grace_s: float = STOP_GRACE_S) -> int:
    """Stop ``procs`` (SIGTERM, then SIGKILL after ``grace_s``); return how many were alive."""
    alive = []
    for proc in procs:
        try:
            proc.send_signal(signal.SIGTERM)
            alive.append(proc)
        except psutil.Error:
            pass
    _, still = psutil.wait_procs(alive, timeout=grace_s)
    for proc in still:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(still, timeout=grace_s)
    return len(alive)


def _listening_socket() -> socket.socket:
    """A TCP socket listening on 127.0.0.1 at a port the OS picked as free."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    return sock


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')


def _worker_frame(trace: str) -> str:
    """The innermost traceback frame outside torch and the standard library."""
    lines = trace.splitlines()
    skip = ("site-packages", "dist-packages", "/lib/python", "<frozen")
    found = ""
    for i, text in enumerate(lines):
        match = _FRAME.match(text)
        if match and not any(s in match["file"] for s in skip):
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            name = Path(match["file"])
            shown = f"{name.parent.name}/{name.name}" if name.parent.name else name.name
            found = f"{shown}, line {match['line']}, in {match['func']}: {code}"
    return found


def _last_error_line(trace: str) -> str:
    """The last ``SomeError: message`` line of ``trace``.

    A message that starts on the lines below its ``SomeError:`` (as
    multiprocessing's own do) is joined up to the end of its first sentence.
    """
    lines = [line for line in trace.strip().splitlines() if line.strip()]
    for at in range(len(lines) - 1, -1, -1):
        text = lines[at]
        if not text.startswith(" ") and ("Error" in text or "Exception" in text or ":" in text):
            if not text.rstrip().endswith(":"):
                return text.strip()
            words = []
            for more in lines[at + 1 :]:
                if not more.startswith(" "):
                    break
                words.append(more.strip())
                if more.rstrip().endswith("."):
                    break
            return " ".join([text.strip(), *words])
    return lines[-1].strip() if lines else "an unknown error"


class Run:
    """One supervised launch; see :func:`bounded`.

    Attributes:
        world_size: the number of ranks this launch expects.
        port: the free 127.0.0.1 port where the group meets; give it to the
            ranks (``MASTER_PORT``).
        timeout_s: the deadline in seconds.
        reports: the ranks' reports, sorted by rank (filled when the block ends).
        elapsed_s: wall time of the block in seconds (filled when it ends).
        started: how many processes were seen running during the launch.
        output: what the ranks printed (filled when it ends).
    """

    def __init__(self, world_size: int, timeout_s: float, threads_per_rank: int | None):
        self.world_size = devices.check_world_size(world_size)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
            raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
        self.timeout_s = timeout_s
        if threads_per_rank is not None:
            whole_number("threads_per_rank", threads_per_rank, minimum=1)
        self.threads = threads_per_rank or devices.threads_per_rank(self.world_size)
        self.port: int = 0
        self.reports: list[dict] = []
        self.elapsed_s: float = 0.0
        self.started = 0
        self.output = ""
        self.timed_out = False
        self._seen: dict[int, psutil.Process] = {}
        self._forked: set[int] = set()
        self._before: set[int] = set()
        self._done = threading.Event()
        self._lock = threading.Lock()

    # -- while the block runs ------------------------------------------------
    def _new_children(self) -> list[psutil.Process]:
        return [p for p in child_processes() if p.pid not in self._before]

    def _watch(self) -> None:
        """Note every process the block starts; stop them all at the deadline."""
        deadline = time.monotonic() + self.timeout_s
        while not self._done.wait(0.1):
            with self._lock:
                for proc in self._new_children():
                    self._seen.setdefault(proc.pid, proc)
            if time.monotonic() >= deadline:
                self.timed_out = True
                stop_processes(self._new_children())
                return

    def __enter__(self) -> Run:
        self._t0 = time.monotonic()
        self._before = {p.pid for p in child_processes()}
        self._dir = tempfile.mkdtemp(prefix="ddp-lesson-reports-")
        sock = _listening_socket()
        self.port = sock.getsockname()[1]
        # The store takes over the listening socket: it closes it when deleted.
        self._store = dist.TCPStore(
            "127.0.0.1",
            self.port,
            None,
            True,
            datetime.timedelta(seconds=self.timeout_s),
            wait_for_workers=False,
            master_listen_fd=sock.detach(),
        )
        env = {
            reports.REPORT_DIR_ENV: self._dir,
            reports.LAUNCHER_PID_ENV: str(os.getpid()),
            _AGENT_STORE_ENV: "True",
            "OMP_NUM_THREADS": str(self.threads),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        self._saved_env = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        # Start multiprocessing's resource tracker now, before the output is
        # redirected: it outlives the launch and must not hold the pipe open.
        resource_tracker.ensure_running()
        self._tap = _OutputTap(os.path.join(self._dir, "output.fifo"))
        # torch logs "Terminating process <pid> via signal SIGTERM" when it
        # stops the other ranks after a failure; the error we raise says it
        # in words, without pids that change from run to run.
        self._spawn_log = logging.getLogger("torch.multiprocessing.spawn")
        self._saved_level = self._spawn_log.level
        self._spawn_log.setLevel(logging.ERROR)
        self._watcher = threading.Thread(
            target=self._watch, name="ddp-lesson-deadline", daemon=True
        )
        self._watcher.start()
        global _active
        _active = self
        return self

    # -- when it ends ----------------------------------------------------------
    def _cleanup(self) -> None:
        global _active
        _active = None
        # read before ``running`` turns False, so a progress view sees the last values
        self._last_progress = reports.read_progress(self._dir)
        self._done.set()
        self._watcher.join()
        leftovers = self._new_children()
        if leftovers:
            stop_processes(leftovers)
        # a forked rank can be done before the watcher's next look: count it anyway
        self.started = len(set(self._seen) | self._forked)
        self._spawn_log.setLevel(self._saved_level)
        self.output = self._tap.close()
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        del self._store  # closes the listening socket
        self.reports = reports.collect(self._dir)
        shutil.rmtree(self._dir, ignore_errors=True)
        self.elapsed_s = time.monotonic() - self._t0

    def __exit__(self, exc_type, exc, tb) -> bool:
        __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
        self._cleanup()
        if self.timed_out:
            raise LaunchTimeout(self._timeout_message()) from None
        if exc_type is KeyboardInterrupt:
            print(
                f"launch interrupted: its {self.started} rank process(es) were stopped",
                file=sys.stderr,
            )
        if isinstance(exc, ProcessRaisedException):
            trace = str(exc).split("terminated with the following error:", 1)[-1].strip()
            where = _worker_frame(trace)
            error = _last_error_line(trace)
            message = f"rank {exc.error_index} raised {error}"
            if where:
                message += f"\n  at {where}"
            hint = self._raised_hint(error)
            if hint:
                message += f"\n{hint}"
            message += (
                "\nAny other ranks were stopped. The rank's full traceback is in "
                "the exception's .rank_traceback."
            )
            raise LaunchError(message, exc.error_index, trace, self.output) from None
        if isinstance(exc, ProcessExitedException):
            raise LaunchError(
                self._exited_message(exc), exc.error_index, output=self.output
            ) from None
        if exc is None and self.output.strip():
            # Nothing failed: show what the ranks printed, after the fact.
            print("What the ranks printed:\n" + self.output.rstrip())
        if exc is None and self.started == 0 and not self.reports:
            raise LaunchError(
                "no process was started: mp.spawn(..., nprocs=0) returns at once and runs "
                f"nothing. Pass nprocs=world_size (here {self.world_size})."
            )
        return False

    def _exited_message(self, exc: ProcessExitedException) -> str:
        if exc.signal_name:
            how = f"was killed by {exc.signal_name}"
        else:
            how = f"exited with code {exc.exit_code}"
        error = _last_error_line(self.output) if self.output.strip() else ""
        before_main = "spawn_main" in self.output and "_wrap" not in self.output
        if before_main and "Can't get attribute" in error:
            return (
                f"rank {exc.error_index} {how} before it could run its function: {error}\n"
                "A new process cannot import a function defined in a notebook cell. Write the "
                "function to a file (a %%writefile cell), import that module, and pass "
                "module.main to mp.spawn."
            )
        if before_main and "bootstrapping phase" in self.output:
            return (
                f"rank {exc.error_index} {how} before it could run its function: {error}\n"
                "Each new process imports the file that called mp.spawn, and that file called "
                "mp.spawn again. Put the code that starts the processes under "
                '`if __name__ == "__main__":`, as the lesson\'s script does.'
            )
        if before_main and error:
            return (
                f"rank {exc.error_index} {how} while importing the worker module, before it "
                f"could run its function: {error}\nFix the worker file (re-run its %%writefile "
                "cell), then re-run the cell that imports and launches it."
            )
        message = f"rank {exc.error_index} {how} without raising a Python error in its function"
        if error:
            message += f"; its last words: {error}"
        return message + (
            ". Any other ranks were stopped. A rank that exits early (sys.exit, os._exit), is "
            "killed, or crashes in native code leaves the others waiting for it."
        )

    def _raised_hint(self, error: str) -> str:
        if error.startswith("TypeError") and "positional argument" in error:
            return (
                "mp.spawn passes each process its rank as the first argument by itself; "
                "args=(...) must hold only the arguments that come after rank in main's "
                "signature."
            )
        if "clients joined" in error or "waiting for clients" in error:
            return (
                "not every rank reached init_process_group: start world_size processes "
                "(nprocs=world_size) and make every rank call it."
            )
        return ""

    def _timeout_message(self) -> str:
        ranks = sorted(r["rank"] for r in self.reports)
        message = (
            f"the launch did not finish within {self.timeout_s:g} s, so its "
            f"{self.started} process(es) were stopped. world_size was {self.world_size}; "
            f"ranks that reported back: {ranks or 'none'}. "
        )
        if 0 < self.started < self.world_size:
            return message + (
                f"Only {self.started} process(es) were started for a world of "
                f"{self.world_size}, so the group waited for ranks that never came: pass "
                "nprocs=world_size to mp.spawn."
            )
        return message + (
            "Ranks hang when one of them waits in a collective (init_process_group, "
            "all_reduce, a DDP backward) that another rank never reaches, or when the ranks "
            "were not told where to meet (MASTER_PORT must be run.port). Check that every "
            "rank runs the same collectives and that nprocs=world_size."
        )

    @property
    def running(self) -> bool:
        """True between entering the ``with`` block and leaving it."""
        return hasattr(self, "_t0") and not self._done.is_set()

    def progress(self) -> dict[int, tuple[int, int]]:
        """What each rank last sent with :func:`reports.send_progress`, while the block runs.

        Returns ``{rank: (done, total)}``: empty before any rank reported;
        after the block ended, the last values the ranks sent.
        """
        folder = getattr(self, "_dir", None)
        if not self.running or folder is None:
            return dict(getattr(self, "_last_progress", {}))
        return reports.read_progress(folder)

    def summary(self, columns: Sequence[str], *, digits: int = 4) -> str:
        """The ranks' reports as a table sorted by rank (see :func:`reports.table`)."""
        return reports.table(self.reports, columns, digits=digits)


def bounded(world_size: int, *, timeout_s: float = 120, threads_per_rank: int | None = None) -> Run:
    """Supervise the ``mp.spawn`` call inside a ``with`` block.

    Args:
        world_size: the number of ranks the block will start; checked here,
            so that 0 (what ``torch.cuda.device_count()`` says on a CPU-only
            machine) fails with an explanation instead of starting nothing.
        timeout_s: seconds after which every rank still running is stopped
            and :class:`LaunchTimeout` is raised.
        threads_per_rank: torch threads for each rank; defaults to
            cores // world_size.

    Returns:
        A :class:`Run` context manager; ``run.port`` is where the group meets.

    Raises:
        LaunchError: a rank raised or died; the message names it.
        LaunchTimeout: the block ran past ``timeout_s``.
    """
    return Run(world_size, timeout_s, threads_per_rank)


def start(fn: Callable, args: tuple = (), nprocs: int = 1) -> None:
    """Start ``nprocs`` ranks running ``fn(rank, *args)``, like ``mp.spawn``, but warm.

    ``mp.spawn`` starts every rank as a new Python that imports torch (and,
    at its first ``DDP(...)``, part of torch's compiler): seconds per launch.
    ``start`` forks each rank from a server process that imported all of
    that once (:mod:`ddp_lesson.warm`), so a rank begins in milliseconds.
    The lesson's own cells keep ``mp.spawn``, as taught; the course's checks,
    widgets and doctor use this. A forkserver, not plain ``fork``, because
    forking a process that has touched CUDA is unsafe; the server never does.

    Call it inside ``with launch.bounded(...) as run:``, exactly where
    ``mp.spawn`` would go: the launch's deadline, reports, output and
    cleanup apply to these ranks too, and each rank gets the environment
    the launch set (``os.environ`` at the call) and its thread count.

    Args:
        fn: a function importable by name, called as ``fn(rank, *args)``.
        args: what follows ``rank``.
        nprocs: how many ranks.

    Raises:
        RuntimeError: not called inside a ``bounded`` block.
    """
    import torch.multiprocessing as mp

    run = _active
    if run is None or not run.running:
        raise RuntimeError(
            "launch.start must be called inside `with launch.bounded(...) as run:`, where "
            "mp.spawn would go"
        )
    if not run._tap.path:  # no named pipes here: start them the lesson's way
        mp.spawn(fn, args=args, nprocs=nprocs)
        return
    from multiprocessing import forkserver

    forkserver.set_forkserver_preload(["ddp_lesson.warm"])
    with run._tap.paused():  # the server outlives this launch: not on its pipe
        forkserver.ensure_running()
    env = {**os.environ, _OUTPUT_ENV: run._tap.path}
    context = mp.start_processes(
        _warm_rank, (env, fn, *args), nprocs, join=False, start_method="forkserver"
    )
    run._forked.update(p.pid for p in context.processes)
    while not context.join():  # what mp.spawn does after starting its ranks
        pass


def _warm_rank(index: int, env: dict, fn: Callable, *args) -> None:
    """What a forked rank does first: take the launch's environment, output and threads."""
    import torch

    os.environ.clear()
    os.environ.update(env)
    out = os.open(env[_OUTPUT_ENV], os.O_WRONLY)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    torch.set_num_threads(int(env.get("OMP_NUM_THREADS", "1")))
    if env.get(reports.REPORT_DIR_ENV):
        reports._die_with_parent()
    fn(index, *args)


def run_script(path: str | os.PathLike, *args: str, timeout_s: float = 180) -> str:
    """Run a Python file as a whole, as ``python path args...``, and return what it printed.

    The script runs in its own process group, so if it outlives ``timeout_s``
    it is stopped together with every process it started.

    Args:
        path: the script, e.g. ``"workers/stage_06.py"``.
        *args: its command-line arguments.
        timeout_s: seconds before the script and its children are stopped.

    Raises:
        FileNotFoundError: ``path`` does not exist (run the cell that writes it).
        LaunchTimeout: the script ran past ``timeout_s``.
        LaunchError: the script exited with an error; the message ends with
            the last lines it printed.
    """
    import subprocess
    import sys

    __tracebackhide__ = True  # noqa: F841
    if not Path(path).is_file():
        raise FileNotFoundError(
            f"{path} does not exist yet: run the %%writefile cell that creates it first"
        )
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.Popen(
        [sys.executable, str(path), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env=env,
    )
    try:
        output, _ = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise LaunchTimeout(
            f"{path} did not finish within {timeout_s:g} s and was stopped with its processes"
        ) from None
    finally:
        if proc.poll() is None:  # interrupted: take the whole group down
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if proc.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-8:])
        raise LaunchError(f"{path} exited with code {proc.returncode}; its last lines:\n{tail}")
    return output
