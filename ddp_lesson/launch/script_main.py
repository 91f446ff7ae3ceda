"""``python -m ddp_lesson.launch.script_main FILE ARGS``: ``python FILE ARGS``, but for two things.

``destroy_process_group()`` pauses before it returns (see
:func:`.ranks.pause_after_destroy`, a torch deadlock at teardown) in FILE's
own process and in every process its ``mp.spawn`` starts; and those
processes are forked from a warm server instead of starting as fresh
interpreters (:func:`spawn_warm`). The supervisor runs whole scripts
(:func:`.scripts.run_script`) this way, and torchrun's workers through
:func:`torchrun_worker` (:func:`.elastic.torchrun`); the script sees what
``python FILE`` would give it: ``__name__ == "__main__"``, its
``__file__``, ``sys.argv``, and its folder first on ``sys.path``.
"""

from __future__ import annotations

import functools
import os
import runpy
import signal
import sys
from collections.abc import Callable

from . import torch_hooks


def main() -> None:
    # Run as `python -m`, this module is __main__, which the script replaces: the
    # processes its mp.spawn starts find as_spawned in the module under its own name.
    from ddp_lesson.launch.script_main import run_as_main

    run_as_main(*sys.argv[1:])


def run_as_main(script: str, *args: str) -> None:
    """Run ``script`` with ``args`` in this process as ``python script args`` would."""
    from ddp_lesson.launch import ranks

    ranks.pause_after_destroy()
    ranks.spawn_with_pause()  # in the processes its mp.spawn starts, before they import FILE
    spawn_warm()
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


def spawn_warm() -> None:
    """Make this process's ``mp.spawn`` fork its processes from a warm server.

    ``mp.spawn`` starts each process as a fresh interpreter (the *spawn*
    start method), which imports torch, and at its first ``DDP(...)`` part
    of torch's compiler: seconds of CPU per process (``make bench``
    measures a launch both ways). Here the first call
    starts a server that imports them once (:mod:`ddp_lesson.warm`, the
    server a notebook's launch uses) and every process is forked from it
    (the *forkserver* method). Each one still is what spawn makes: it runs
    the script's top level again as ``__mp_main__`` (so its ``if __name__
    == "__main__":`` guard matters just as much), gets its function and
    arguments pickled, has the teardown pause before that import (the
    server installed it), and runs with this process's environment as it
    was at the call (:func:`as_spawned`). A script that asks for another
    start method gets it unchanged, and where the server's socket cannot be
    made (:func:`.warm_server.warm_server_fits`) spawn starts fresh
    interpreters as usual.
    """
    torch_hooks.wrap(torch_hooks.START_PROCESSES, _from_warm_server)


def _from_warm_server(start_processes: Callable) -> Callable:
    @functools.wraps(start_processes)
    def warm_start(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
        from .warm_server import start_warm_server, warm_server_fits

        if start_method == "spawn" and warm_server_fits():
            start_warm_server()
            fn, start_method = functools.partial(as_spawned, dict(os.environ), fn), "forkserver"
        return start_processes(fn, args, nprocs, join, daemon, start_method)

    return warm_start


def as_spawned(env: dict[str, str], fn: Callable, *args: object) -> None:
    """In a process forked from the warm server: ``fn(*args)``, as a spawned process runs it.

    A spawned process inherits its parent's environment when it starts,
    ends at once on SIGTERM and raises KeyboardInterrupt on SIGINT (as
    torch's SIGINT at its parent's death expects); one forked from the
    server has the server's environment and its handlers (SIGINT ignored:
    see :func:`.warm_server.server_ready`), so all are set here first.
    """
    _signals_as_fresh()
    os.environ.clear()
    os.environ.update(env)
    _threads_from_environment()
    fn(*args)


def torchrun_worker(script: str, *args: str) -> None:
    """One of torchrun's workers, forked from its agent's warm server: ``python -u script args``.

    torchrun calls this in each worker process it starts (see
    :func:`.elastic.main`).
    """
    as_python_u()
    run_as_main(script, *args)


def as_python_u() -> None:
    """Give a worker forked from a warm server what a fresh ``python -u`` would have.

    The process was forked from a server that had imported torch already,
    so what a fresh interpreter would do at its start is done here: SIGTERM
    ends it at once, output is unbuffered, and torch uses the threads
    ``OMP_NUM_THREADS`` asks for (torchrun sets 1).
    """
    _signals_as_fresh()
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(write_through=True)
    _threads_from_environment()


def _signals_as_fresh() -> None:
    """SIGTERM and SIGINT as a fresh interpreter has them, not as the warm server does.

    The server's SIGTERM handler runs only in Python (a process waiting in
    C++ would not end), and the server ignores SIGINT, which a process of a
    script must not: Ctrl-C, and torch's SIGINT when its parent dies, stop it.
    """
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _threads_from_environment() -> None:
    """Use the torch threads ``OMP_NUM_THREADS`` asks for, as torch does when it starts."""
    import torch

    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))


if __name__ == "__main__":
    main()
