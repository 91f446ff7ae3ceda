"""``python -m ddp_lesson.launch.script_main FILE ARGS``: ``python FILE ARGS``, with one difference.

``destroy_process_group()`` pauses before it returns (see
:func:`.ranks.pause_after_destroy`, a torch deadlock at teardown) in FILE's
own process and in every process its ``mp.spawn`` starts. The supervisor
runs whole scripts (:func:`.scripts.run_script`) this way, and torchrun's
workers through :func:`torchrun_worker` (:func:`.elastic.torchrun`); the
script sees what ``python FILE`` would give it: ``__name__ == "__main__"``,
its ``__file__``, ``sys.argv``, and its folder first on ``sys.path``.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys


def main() -> None:
    run(*sys.argv[1:])


def run(script: str, *args: str) -> None:
    """Run ``script`` with ``args`` in this process as ``python script args`` would."""
    from ddp_lesson.launch import ranks

    ranks.pause_after_destroy()
    ranks.spawn_with_pause()  # in the processes its mp.spawn starts, before they import FILE
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    runpy.run_path(script, run_name="__main__")


def torchrun_worker(script: str, *args: str) -> None:
    """One of torchrun's workers, forked from its agent's warm server: ``python -u script args``.

    torchrun calls this in each worker process it starts (see
    :func:`.elastic.main`).
    """
    as_python_u()
    run(script, *args)


def as_python_u() -> None:
    """Give a worker forked from a warm server what a fresh ``python -u`` would have.

    The process was forked from a server that had imported torch already,
    so what a fresh interpreter would do at its start is done here: SIGTERM
    ends it at once, output is unbuffered, and torch uses the threads
    ``OMP_NUM_THREADS`` asks for (torchrun sets 1).
    """
    import torch

    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # (the server's handler runs only in Python)
    for stream in (sys.stdout, sys.stderr):
        stream.reconfigure(write_through=True)
    threads = os.environ.get("OMP_NUM_THREADS", "")
    if threads.isdigit() and int(threads) > 0:
        torch.set_num_threads(int(threads))


if __name__ == "__main__":
    main()
