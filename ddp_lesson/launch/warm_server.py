"""This process's warm server: the forkserver that imported torch once (see :mod:`ddp_lesson.warm`).

One server per launching process, asked for by everything that starts
ranks warm: a launch's first warm start, a script's ``mp.spawn``
(:mod:`.script_main`), torchrun's agent (:mod:`.elastic`), and callers that
want the server's start off their own clock (:func:`warm_up`: the doctor,
the benchmark). Ranks are forked from it; where it cannot run, they start
as fresh interpreters instead.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import processes
from .folders import SERVER_MARK

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
