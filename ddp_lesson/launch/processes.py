"""The processes a launch starts, however deep, and how they are stopped.

A rank may start processes of its own (a data-loading helper, a shell
command, a stray server), and those may start more. When such a process
outlives its parent, the operating system gives it a new parent: normally
``init``, where nobody sees it again. While a launch runs, the launching
process asks Linux to be a *child subreaper* (``prctl``
``PR_SET_CHILD_SUBREAPER``), so every orphan below it is adopted by it
instead, stays in its process tree, and is stopped with the rest. Where
there is no such call (macOS), every process the launch's watcher ever saw
below it is remembered and stopped by pid and start time; a grandchild
orphaned between two looks can then escape, which Linux rules out.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable

import psutil

#: Seconds between the polite stop (SIGTERM) and the forced one (SIGKILL).
STOP_GRACE_S = 2.0

#: Seconds between two looks at the process tree while stopping it.
POLL_S = 0.05

_PR_SET_CHILD_SUBREAPER, _PR_GET_CHILD_SUBREAPER = 36, 37

#: Names, for the warm server, the launching process's multiprocessing folder.
SERVER_FOLDER_VARIABLE = "DDP_LESSON_SERVER_FOLDER"


def remove_launchers_folder_at_exit() -> str | None:
    """In the warm server: remove the launching process's ``pymp-*`` folder when the server ends.

    multiprocessing puts the server's socket in a folder of the launching
    process (a notebook's kernel) and removes it only if that process exits
    cleanly, which a kernel shut down by Jupyter does not. The server ends
    when the launching process is gone, however it went, so it removes the
    folder then. The variable is taken out of the environment here, so the
    ranks forked from the server never see it. Returns the folder (``None``
    where there is none to remove).
    """
    folder = os.environ.pop(SERVER_FOLDER_VARIABLE, None)
    if not folder or not os.path.basename(folder).startswith("pymp-"):
        return None
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    server = os.getpid()
    leaving = []
    atexit.register(leaving.append, True)  # registered last, so it runs first

    def ended(signum, frame):
        # A kernel shutting down sends SIGTERM to its children: leave through
        # the interpreter's exit, so the folder goes too. A process forked
        # from the server inherits this handler and simply ends as usual.
        if os.getpid() == server:
            signal.signal(signum, signal.SIG_IGN)  # leaving already: once is enough
            if not leaving:  # (a SystemExit inside exit-time callbacks is printed)
                sys.exit(0)
            return
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    signal.signal(signal.SIGTERM, ended)
    return folder


def alive(pid: int) -> bool:
    """True while process ``pid`` runs; a zombie (exited, not yet reaped) does not.

    >>> import os
    >>> alive(os.getpid())
    True
    """
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _prctl() -> Callable | None:
    """libc's ``prctl`` (Linux), found without starting a process.

    ``ctypes.util.find_library`` runs ``ldconfig -p`` to find libc: a child
    process in every rank and every launch, which a launch's watcher could
    catch running and count. libc is already loaded into every Python
    process, so its symbols are looked up there instead.
    """
    if not sys.platform.startswith("linux"):
        return None
    for name in (None, "libc.so.6"):  # this process's own symbols; libc by its usual name
        try:
            found = getattr(ctypes.CDLL(name, use_errno=True), "prctl", None)
        except OSError:
            continue
        if found is not None:
            return found
    return None


#: How many adopting_orphans() blocks are open in this process, and whether it
#: was a subreaper before the first: the setting belongs to the process, so
#: nested and concurrent blocks share it, and the last one out restores it.
_lock = threading.Lock()
_holders = 0
_was_subreaper = False


def _get_subreaper(prctl: Callable) -> bool:
    flag = ctypes.c_int(0)
    prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(flag), 0, 0, 0)
    return bool(flag.value)


@contextlib.contextmanager
def adopting_orphans():
    """While the block runs, orphans below this process are adopted by it (Linux).

    Nested and concurrent blocks share one setting; the process's own
    setting from before the first block is restored after the last one.
    Yields True where the operating system supports it.
    """
    global _holders, _was_subreaper
    prctl = _prctl()
    if prctl is None:
        yield False
        return
    with _lock:
        if _holders == 0:
            _was_subreaper = _get_subreaper(prctl)
            prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        _holders += 1
    try:
        yield True
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and not _was_subreaper:
                prctl(_PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)


def become_subreaper() -> None:
    """Make this process adopt the orphans below it for the rest of its life (Linux only)."""
    prctl = _prctl()
    if prctl is not None:
        prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def is_helper(proc: psutil.Process) -> bool:
    """True for this process's own multiprocessing helpers (resource tracker, forkserver).

    They live as long as this process does. Known by pid, not by command line:
    the ranks forked from the server carry its command line, and a resource
    tracker that belonged to a script a launch ran, adopted here when the
    script ended, is that launch's to wait for (it may still be exiting, its
    command line already gone, when the launch ends).
    """
    from multiprocessing import forkserver, resource_tracker

    ours = {
        getattr(forkserver._forkserver, "_forkserver_pid", None),
        getattr(resource_tracker._resource_tracker, "_pid", None),
    }
    return proc.pid in ours


def descendants() -> list[psutil.Process]:
    """Processes descended from this one, leaving out multiprocessing's own helpers.

    After a supervised launch this list is empty again: tests and the
    notebooks use it to show that nothing was left running.
    """
    try:
        kids = psutil.Process().children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in kids if not is_helper(p) and alive(p.pid)]


def _signal(procs: Iterable[psutil.Process], how: int) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(how)


def reap(procs: Iterable[psutil.Process]) -> None:
    """Collect the exit status of those that are this process's children (no zombies).

    Only for processes nobody else waits for: orphans this process adopted.
    A child started with ``subprocess`` or ``multiprocessing`` is waited for
    by its own object, which would lose its exit code if it were reaped here.
    """
    with contextlib.suppress(psutil.Error, ChildProcessError):
        psutil.wait_procs(list(procs), timeout=0)


def stop_tree(
    find: Callable[[], list[psutil.Process]], grace_s: float = STOP_GRACE_S
) -> int:
    """Stop every process ``find()`` returns, and those it returns while they stop.

    First SIGTERM, so a rank can end on its own terms; every ``POLL_S`` the
    tree is looked at again, since a process that ends may leave orphans
    that this process has just adopted. After ``grace_s`` seconds, SIGKILL
    to whatever is left, until nothing is.

    Args:
        find: gives the processes to stop (looked up again and again).
        grace_s: seconds between SIGTERM and SIGKILL.

    Returns:
        How many distinct processes were stopped.
    """
    seen: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + grace_s
    while True:
        current = [p for p in find() if p.is_running()]
        fresh = [p for p in current if p.pid not in seen]
        for proc in fresh:
            seen[proc.pid] = proc
        forced = time.monotonic() >= deadline
        _signal(current if forced else fresh, signal.SIGKILL if forced else signal.SIGTERM)
        reap(seen.values())
        if not current:
            return len(seen)
        if forced and time.monotonic() >= deadline + 5 * grace_s:
            return len(seen)  # unkillable (in the kernel's hands): give up waiting
        time.sleep(POLL_S)
