"""This process's warm server: the forkserver that imported torch once (see :mod:`ddp_lesson.warm`).

One server per launching process, asked for by everything that starts
ranks warm: a launch's first warm start, a script's ``mp.spawn``
(:mod:`.script_main`), torchrun's agent (:mod:`.elastic`), and callers that
want the server's start off their own clock (:func:`warm_up`: the doctor,
the benchmark). Ranks are forked from it; where it cannot run, they start
as fresh interpreters instead.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from . import processes
from .folders import SERVER_MARK

#: What the server leaves in its folder, with its pid, once it has imported what it preloads.
READY_MARK = "ddp-lesson-ready-"

#: Seconds between two looks for the server's ready mark.
READY_POLL_S = 0.05

#: The folder of each server this process started, by the server's pid.
_started: dict[int, Path] = {}

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
    before = getattr(forkserver._forkserver, "_forkserver_pid", None)
    try:
        with _interrupts_held():
            forkserver.ensure_running()
    finally:
        del os.environ[processes.SERVER_FOLDER_VARIABLE]
    server = getattr(forkserver._forkserver, "_forkserver_pid", None)
    if server is not None and server != before:
        _started[server] = folder


@contextlib.contextmanager
def _interrupts_held():
    """While the server is being started, hold back SIGINT in this thread, and so in the server.

    A notebook's interrupt (the stop button) is a SIGINT to the kernel's
    whole process group, the server and its ranks included: in the middle
    of its imports the server would die with their traceback, and a launch
    that asked it for a rank meanwhile would read "unexpected EOF" from its
    socket. A signal blocked here stays blocked in the process started now
    (a blocked signal is inherited through fork and exec), until the server
    ignores SIGINT for good (:func:`server_ready`). multiprocessing starts
    its resource tracker the same way. A SIGINT meant for this process is
    not lost: its other threads take it, and Python raises it here after.
    """
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def server_ready(folder: str | None) -> None:
    """In the warm server, once it has imported what it preloads: ignore SIGINT, say it is ready.

    SIGINT was held back since the server started (see :func:`_interrupts_held`);
    ignored from now on. The ranks forked from the server inherit that: a
    launch's ranks keep it (the launch stops them, and they watch the
    launching process), a script's and torchrun's take Python's handler back
    (:func:`.script_main.as_spawned`). The mark in ``folder`` (the launching process's
    ``pymp-*`` folder) tells the launch it can ask for ranks (:func:`wait_until_ready`).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # (drops one that waits)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if folder:
        with contextlib.suppress(OSError):
            (Path(folder) / f"{READY_MARK}{os.getpid()}").touch()


def wait_until_ready(give_up: Callable[[], bool]) -> bool:
    """Wait until the warm server this process started has imported what it preloads.

    A request for a rank sent before then waits in the server's socket; a
    launch interrupted meanwhile would leave it there, and the server would
    start that rank after the launch ended. Waiting here instead, an
    interrupt leaves nothing behind. Returns ``False`` when ``give_up()``
    says so (the launch's deadline) before the server is ready; ``True``
    once it is, or when there is nothing to wait for (a server this process
    did not start, or one that ended: multiprocessing starts another).
    """
    from multiprocessing import forkserver

    server = getattr(forkserver._forkserver, "_forkserver_pid", None)
    folder = _started.get(server) if server is not None else None
    if folder is None:
        return True
    mark = folder / f"{READY_MARK}{server}"
    while not mark.exists():
        if not processes.alive(server):
            return True
        if give_up():
            return False
        time.sleep(READY_POLL_S)
    return True


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
