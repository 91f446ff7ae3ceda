"""Elastic ``torchrun``: a job whose nodes come and go while it trains (``--nnodes=MIN:MAX``).

:func:`torchrun_resizing` runs the same ``torchrun --nnodes=1:2`` command
on two simulated nodes of this machine. The first starts alone and
trains; the second starts once the job has finished ``join_after``
epochs, and torchrun brings it in by restarting every worker in a
larger world; with ``leave_after``, the second node is then lost (its
agent and its workers killed at once, as when a machine dies) and the
first node's torchrun restarts its workers in the smaller world. The
script must resume from its own checkpoint, as any elastic job must::

    run = membership.torchrun_resizing("workers/elastic_job.py", join_after=2, leave_after=5)
    print(run.printed)

When a node joins and when it is lost follow the job's progress (what the
script sends with :func:`ddp_lesson.reports.send_progress`: epochs done),
not the clock, so a busy machine changes the timing, not the story.
Everything else is :func:`.elastic.torchrun`'s: 127.0.0.1 only, a fresh
store per rendezvous round, a deadline, reports and a short error.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from ..validate import seconds, whole_number
from . import errors, processes
from .elastic import (
    LOOPBACK,
    OUTPUT_KEPT_BYTES,
    RDZV_FD_ENV,
    RDZV_PORT_ENV,
    TORCHRUN_ENV,
    WARM_START_METHOD,
    finish,
)
from .ports import listening_socket
from .state import Command
from .supervisor import Supervisor
from .torchrun_output import TorchrunRun

#: How often the job's progress is looked at, in seconds.
POLL_S = 0.1

#: The second node's agent starts with the first and imports torch, then waits
#: until this file exists: it joins when the job is ready for it, not seconds later.
GO_ENV = "DDP_LESSON_NODE_GO"

#: The program of a node's agent: :func:`agent`.
NODE_AGENT = "from ddp_lesson.launch.membership import agent; agent()"


def agent() -> None:
    """Run :func:`.elastic.main` once the file ``$DDP_LESSON_NODE_GO`` is there."""
    import torch.distributed.run  # noqa: F401  (the slow part, done before the wait)

    from .elastic import main

    go = os.environ.pop(GO_ENV, "")
    while go and not os.path.exists(go):
        time.sleep(POLL_S)
    main()

#: torchrun's own settings for a job that resizes quickly on one machine: a
#: round closes 1 s after enough nodes arrived (30 s by default), and the
#: agent looks at its workers twice a second. A lost node is noticed when
#: its heartbeats have stopped for 15 s (torchrun's default: every 5 s, 3
#: missed); shorter, a busy machine's late heartbeat passes for a lost node,
#: and a node that joins may start a job of its own.
RDZV_CONF = ("--rdzv-conf=last_call_timeout=1", "--monitor-interval=0.5")

#: Where the rendezvous endpoint goes in :func:`_flags` (its port is known only at the start).
ENDPOINT = "--rdzv-endpoint=?"


def _flags(nproc_per_node: int, max_restarts: int) -> list[str]:
    return [
        "--nnodes=1:2",
        "--rdzv-backend=c10d",
        ENDPOINT,
        "--rdzv-id=lesson",
        f"--nproc-per-node={nproc_per_node}",
        f"--max-restarts={max_restarts}",
        *RDZV_CONF,
        f"--local-addr={LOOPBACK}",
    ]


def _epochs_done(launch: Supervisor, first_rank: int = 0) -> int:
    """The most epochs any rank from ``first_rank`` on has said it finished (0 if none)."""
    return max((done for rank, (done, _) in launch.progress().items() if rank >= first_rank),
               default=0)  # fmt: skip


def _wait_for(launch: Supervisor, ready: Callable[[], bool], ended: Callable[[], bool]) -> bool:
    """Wait until ``ready()``; ``False`` if ``ended()`` first (the job or the deadline)."""
    while not ready():
        if ended() or launch.timed_out:
            return False
        time.sleep(POLL_S)
    return True


def lose_node(pid: int) -> None:
    """Kill a node's torchrun agent and everything it started, all at once (a machine lost)."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    processes.stop_tree(lambda: tree, grace_s=0)


def torchrun_resizing(
    script: str | os.PathLike,
    *args: object,
    nproc_per_node: int = 1,
    join_after: int = 1,
    leave_after: int | None = None,
    max_restarts: int = 3,
    timeout_s: float = 240,
) -> TorchrunRun:
    """Run ``torchrun --nnodes=1:2 ... script args`` on two simulated nodes that come and go.

    Args:
        script: the worker file; it must resume from a checkpoint, and send
            its epochs done with :func:`ddp_lesson.reports.send_progress`.
        *args: the script's command-line arguments.
        nproc_per_node: ranks each node starts.
        join_after: the second node joins once the job has done this many epochs.
        leave_after: it is lost once a rank of its own has seen this many
            epochs done; ``None`` keeps it to the end.
        max_restarts: restarts after a failure (a node lost uses one up).
        timeout_s: seconds after which everything still running is stopped.

    Raises:
        LaunchTimeout: the job outlived ``timeout_s``.
        LaunchError: the first node's torchrun failed; the message gives its cause.
    """
    whole_number("nproc_per_node", nproc_per_node, minimum=1)
    whole_number("join_after", join_after, minimum=1)
    if leave_after is not None:
        whole_number("leave_after", leave_after, minimum=join_after + 1)
    whole_number("max_restarts", max_restarts, minimum=1 if leave_after else 0)
    seconds("timeout_s", timeout_s)
    run = TorchrunRun(commands=[])
    failed: errors.LaunchError | None = None
    try:
        with Supervisor(None, timeout_s) as launch:
            first = _run_nodes(
                launch, run, [str(script), *map(str, args)],
                _flags(nproc_per_node, max_restarts), nproc_per_node=nproc_per_node,
                join_after=join_after, leave_after=leave_after,
            )  # fmt: skip
    except errors.LaunchTimeout:
        failed = errors.LaunchTimeout(
            f"the resizing torchrun job did not finish within {timeout_s:g} s, so it was "
            "stopped with every process it started: a job that never reaches the epochs "
            "join_after and leave_after ask for, or a rendezvous round that never closes, "
            "keeps it waiting."
        )
        first = launch.commands[0] if launch.commands else None
    finish(run, launch, failed, codes=[first.returncode] if first is not None else [])
    return run


def _run_nodes(
    launch: Supervisor, run: TorchrunRun, tail: list[str], flags: list[str], *,
    nproc_per_node: int, join_after: int, leave_after: int | None,
) -> Command:
    """Start the first node, the second once the job is far enough, and lose it if asked."""
    port, fd = listening_socket()  # the rendezvous store listens on the launch's socket
    flags = [f"--rdzv-endpoint={LOOPBACK}:{port}" if f == ENDPOINT else f for f in flags]
    typed = [f for f in flags if not f.startswith("--local-addr=")]
    run.commands = [" ".join(["torchrun", *typed, *tail])] * 2
    env: dict[str, str | None] = {key: None for key in TORCHRUN_ENV}
    env["LOGLEVEL"] = "INFO"  # torchrun's log says when it restarts and why
    argv = [sys.executable, "-c", NODE_AGENT, *flags, "--run-path", WARM_START_METHOD, *tail]
    handed = {RDZV_FD_ENV: str(fd), RDZV_PORT_ENV: str(port)}
    first = launch.command(argv, env={**env, **handed}, pass_fds=(fd,), kept=OUTPUT_KEPT_BYTES)
    os.close(fd)  # the first node holds it now
    go = Path(launch.state.folder) / "second-node-go"
    second = launch.command(argv, env={**env, GO_ENV: str(go)}, kept=OUTPUT_KEPT_BYTES)

    def over() -> bool:
        return first.returncode is not None

    if not _wait_for(launch, lambda: _epochs_done(launch) >= join_after, over):
        lose_node(second.process.pid)  # the job ended first: the node never joined
    else:
        go.touch()
        if leave_after is not None:
            # a rank of the second node has seen the job reach leave_after
            late = lambda: _epochs_done(launch, nproc_per_node) >= leave_after  # noqa: E731
            if _wait_for(launch, late, over):
                lose_node(second.process.pid)
    launch.wait([first])
    launch.wait()  # (a second node that stays ends with the job)
    return first
