"""``torchrun``, PyTorch's own launcher, run from a notebook: bounded, loopback only, with reports.

:func:`torchrun` runs one ``torchrun`` invocation per (simulated) node,
exactly as a terminal or a cluster job would, and gives back what every
rank sent with :func:`ddp_lesson.reports.send_report`::

    run = elastic.torchrun("workers/stage_08.py", "--epochs", "3", nproc_per_node=2)
    print(run.command)
    print(run.summary(["rank", "local_rank", "node"]))

What the course adds around torchrun, and nothing more:

* 127.0.0.1 only. torchrun's rendezvous store and the store it shares with
  its workers are ``TCPStore`` servers, and a ``TCPStore`` server listens on
  every network interface. ``python -m ddp_lesson.elastic`` is torchrun
  (``torch.distributed.run.main``) with those servers bound to 127.0.0.1;
  every node also says its address is 127.0.0.1 (``--local-addr``).
* restarts that work: each rendezvous round gives its workers a fresh
  store (see :func:`fresh_worker_store_per_round`);
* a deadline: every invocation and every process it started is stopped
  after ``timeout_s``, and nothing is left running afterwards;
* reports and a short error: the ranks' reports sorted by global rank, and
  when torchrun fails, its own "Root Cause" summary in a few lines.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch.distributed as dist

from .. import devices
from ..validate import seconds, whole_number
from . import errors, torch_hooks
from .ports import listening_socket
from .supervisor import Supervisor
from .torchrun_output import TorchrunRun, failure_text

#: The only address the course's processes listen on.
LOOPBACK = "127.0.0.1"

#: A listening socket handed to the first simulated node for the rendezvous store, and its port.
RDZV_FD_ENV, RDZV_PORT_ENV = "DDP_LESSON_RDZV_FD", "DDP_LESSON_RDZV_PORT"

#: The program of torchrun's agent: ``python -m ddp_lesson.launch.elastic`` from ``-c``, so
#: that the processes forked from its warm server have no main module to import again.
AGENT = "from ddp_lesson.launch.elastic import main; main()"

#: How the agent starts its workers: forked from its warm server.
WARM_START_METHOD = "--start-method=forkserver"

#: Bytes of each torchrun invocation's output kept, head and tail (its log is long).
OUTPUT_KEPT_BYTES = 256 * 1024

#: Variables a torchrun worker reads; the notebook's own values must not leak in.
TORCHRUN_ENV = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE",
    "TORCHELASTIC_RESTART_COUNT",
)

class LoopbackTCPStore(dist.TCPStore):
    """A ``TCPStore`` whose server, if it starts one, listens on 127.0.0.1 only.

    ``TCPStore`` binds its server to every interface; given a socket that is
    already listening (``master_listen_fd``), it serves on that one instead.
    A busy port raises ``RuntimeError``, which torchrun's c10d rendezvous
    takes as "another node hosts the store" and joins it as a client.
    """

    def __init__(self, host_name, port, world_size=None, is_master=False, *args, **kwargs):
        handed = os.environ.pop(RDZV_FD_ENV, None)  # the launch's socket, used once
        if is_master and handed and str(port) == os.environ.get(RDZV_PORT_ENV):
            kwargs["master_listen_fd"] = int(handed)
        elif handed:
            os.close(int(handed))
        if is_master and kwargs.get("master_listen_fd") is None:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((LOOPBACK, port))
            except OSError as error:
                sock.close()
                raise RuntimeError(f"cannot listen on {LOOPBACK}:{port}: {error}") from None
            sock.listen(128)
            port = sock.getsockname()[1]
            kwargs["master_listen_fd"] = sock.detach()  # the store closes it
        super().__init__(host_name, port, world_size, is_master, *args, **kwargs)


def loopback_only() -> None:
    """Make every ``TCPStore`` server this process starts listen on 127.0.0.1 only."""
    from torch.distributed.elastic.rendezvous import (
        c10d_rendezvous_backend,
        static_tcp_rendezvous,
    )

    # (dynamic_rendezvous looks it up in torch.distributed)
    owners = (dist, c10d_rendezvous_backend, static_tcp_rendezvous)
    torch_hooks.wrap(torch_hooks.point(owners, "TCPStore"), _loopback_store)


def _loopback_store(store: type) -> type:
    return LoopbackTCPStore


def fresh_worker_store_per_round() -> None:
    """Give the workers of every rendezvous round a new store, so a restart can connect.

    torchrun's c10d rendezvous shares one ``TCPStore`` server with its
    workers and keeps it for the whole job. After a restart, the new
    workers' ``init_process_group`` finds the keys the old workers left
    there (their gloo or NCCL addresses) and tries to reach ranks that are
    gone: with gloo, the restart then fails with "Gloo
    connectFullMesh failed ... Connect timeout" (pytorch/pytorch#135712
    describes the same for NCCL). A new server per round has no old keys;
    the round-numbered rendezvous keys tell every node its port.
    """
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    handler = dynamic_rendezvous.DynamicRendezvousHandler
    torch_hooks.wrap(torch_hooks.point(handler, "next_rendezvous"), _fresh_store)


def _fresh_store(next_rendezvous: Callable) -> Callable:
    def with_fresh_store(self):
        self._bootstrap_store_info = None
        self._shared_tcp_store_server = None  # the last round's workers are gone
        return next_rendezvous(self)

    return with_fresh_store


def every_failure_reported() -> None:
    """Make torchrun report every forked worker it finds failed, as it does for files.

    torchrun watches the workers it started as files (``python FILE``) by
    polling each of them, and lists every one that has failed. With
    ``--start-method=forkserver`` it watches them through
    ``torch.multiprocessing``, which stops at the first failed worker it
    finds: when rank 1 is killed and rank 0 raises an instant later because
    its peer vanished, torchrun names only whichever comes first in its
    list, rank 0 as often as not. Here each look first notes every worker
    that has already ended with a failure; when torchrun reports a failure,
    the others it would have seen are added to its report.
    """
    from torch.distributed.elastic.multiprocessing import api

    torch_hooks.wrap(torch_hooks.point(api.MultiprocessContext, "_poll"), _every_failure)


def _every_failure(original: Callable) -> Callable:
    from torch.distributed.elastic.multiprocessing import api

    def _poll(self):
        processes = self._pc.processes if self._pc is not None else []
        ended = {i: p.exitcode for i, p in enumerate(processes)}  # never blocks
        pids = {i: p.pid for i, p in enumerate(processes)}
        result = original(self)
        if result is not None and result.failures:
            for rank, code in ended.items():
                if code and rank not in result.failures:
                    result.failures[rank] = api.ProcessFailure(
                        local_rank=rank, pid=pids[rank], exitcode=code,
                        error_file=self.error_files[rank])
        return result

    return _poll


def main(argv: Sequence[str] | None = None, worker: Callable[..., None] | None = None) -> None:
    """``python -m ddp_lesson.launch.elastic ARGS``: torchrun ARGS, loopback stores, restartable.

    With ``--run-path --start-method=forkserver`` (what :func:`torchrun`
    passes), torchrun runs each worker as a function in a process forked
    from a warm server, which this process starts at once, while torchrun
    sets up its rendezvous: ``worker(FILE, *ARGS)``, by default
    ``script_main.torchrun_worker``, which runs the file as
    ``python -u FILE ARGS`` would (the doctor passes its own). A worker
    then starts in a fraction of a second instead of importing torch again.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    loopback_only()
    fresh_worker_store_per_round()
    every_failure_reported()
    import torch.distributed.run as torchrun_module

    if "--run-path" in argv:
        from .script_main import torchrun_worker
        from .warm_server import start_warm_server, warm_server_fits

        runs = worker or torchrun_worker  # what --run-path runs
        torch_hooks.wrap(torch_hooks.point(torchrun_module, "run_script_path"),
                         lambda run_script_path: runs)
        if warm_server_fits():
            start_warm_server()
        else:  # fresh interpreters (see warm_server_fits)
            argv = [WARM_START_METHOD.replace("forkserver", "spawn") if a == WARM_START_METHOD
                    else a for a in argv]
    torchrun_module.main(argv)


def _flags(
    nproc_per_node: int, nnodes: int, max_restarts: int, endpoint: str | None
) -> list[str]:
    flags = []
    if nnodes == 1:
        flags.append("--standalone")
    else:
        flags += [
            f"--nnodes={nnodes}",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint={endpoint}",
            "--rdzv-id=lesson",
        ]
    flags.append(f"--nproc-per-node={nproc_per_node}")
    if max_restarts:
        flags.append(f"--max-restarts={max_restarts}")
    return [*flags, f"--local-addr={LOOPBACK}"]


def _node_devices(nnodes: int, nproc_per_node: int) -> tuple[list[dict], int, str]:
    """Each node's share of the GPUs: (environment per node, GPUs in use, a note).

    A real node sees only its own GPUs, numbered from 0, which is what makes
    ``LOCAL_RANK`` the right device number. Simulated nodes get the same view
    through ``CUDA_VISIBLE_DEVICES``; without enough GPUs for every rank they
    all run as CPU processes, because two NCCL ranks cannot share one GPU.
    """
    import torch

    gpus = torch.cuda.device_count()
    if gpus == 0 or nnodes == 1:
        return [{} for _ in range(nnodes)], gpus, ""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = visible.split(",") if visible else [str(i) for i in range(gpus)]
    need = nnodes * nproc_per_node
    if len(ids) < need:
        note = (
            f"this machine has {gpus} GPU(s), fewer than the {need} that {nnodes} nodes of "
            f"{nproc_per_node} ranks need, so the simulated nodes ran as CPU processes (gloo)"
        )
        return [{"CUDA_VISIBLE_DEVICES": ""} for _ in range(nnodes)], 0, note
    shares = [ids[n * nproc_per_node : (n + 1) * nproc_per_node] for n in range(nnodes)]
    note = "each simulated node saw only its own GPUs (CUDA_VISIBLE_DEVICES), as a real node does"
    return [{"CUDA_VISIBLE_DEVICES": ",".join(share)} for share in shares], need, note


def torchrun(
    script: str | os.PathLike,
    *args: object,
    nproc_per_node: int = devices.DEFAULT_CPU_WORLD_SIZE,
    nnodes: int = 1,
    max_restarts: int = 0,
    timeout_s: float = 180,
) -> TorchrunRun:
    """Run ``torchrun ... script args`` once per simulated node; return the ranks' reports.

    With ``nnodes=1`` the invocation is ``torchrun --standalone``. With more,
    each node is its own ``torchrun --nnodes=N --rdzv-backend=c10d`` process,
    all meeting at the same rendezvous endpoint on a free 127.0.0.1 port, as
    separate machines of a cluster would; torchrun numbers the nodes itself.

    Args:
        script: the worker file, e.g. ``"workers/stage_08.py"``.
        *args: the script's command-line arguments.
        nproc_per_node: ranks each node starts (``--nproc-per-node``).
        nnodes: how many nodes to simulate on this machine.
        max_restarts: how often torchrun may restart a failed worker group.
        timeout_s: seconds after which everything still running is stopped.

    Raises:
        FileNotFoundError: ``script`` does not exist yet.
        LaunchTimeout: the run outlived ``timeout_s``.
        LaunchError: torchrun failed; the message gives its root cause.
    """
    __tracebackhide__ = True  # noqa: F841  (IPython hides this frame)
    if not Path(script).is_file():
        raise FileNotFoundError(
            f"{script} does not exist yet: run the %%writefile cell that creates it first"
        )
    whole_number("nproc_per_node", nproc_per_node, minimum=1)
    whole_number("nnodes", nnodes, minimum=1)
    whole_number("max_restarts", max_restarts)
    seconds("timeout_s", timeout_s)
    node_env, gpus, note = _node_devices(nnodes, nproc_per_node)
    devices.check_world_size(nproc_per_node * nnodes, gpus=gpus)
    run = TorchrunRun(commands=[], note=note)
    failed: errors.LaunchError | None = None
    try:
        with Supervisor(None, timeout_s) as launch:
            _start_nodes(launch, run, node_env, [str(script), *map(str, args)],
                         nproc_per_node, nnodes, max_restarts)  # fmt: skip
            launch.wait()
    except errors.LaunchTimeout as timeout:
        failed = errors.LaunchTimeout(
            f"torchrun did not finish within {timeout_s:g} s, so it was stopped with every "
            f"process it started; ranks that reported back: "
            f"{[r['rank'] for r in launch.reports] or 'none'}. A rank that waits in a "
            "collective another rank never reaches, or nodes that never all arrive at the "
            "rendezvous, keep torchrun waiting.",
            output=timeout.output,
        )
    finish(run, launch, failed)
    return run


def _start_nodes(
    launch: Supervisor, run: TorchrunRun, node_env: list[dict], tail: list[str],
    nproc_per_node: int, nnodes: int, max_restarts: int,
) -> None:
    """Start one torchrun agent per simulated node, all meeting at one rendezvous."""
    handed: dict[str, str] = {}
    endpoint = None
    if nnodes > 1:  # the rendezvous store listens on the launch's own socket
        port, fd = listening_socket()
        endpoint = f"{LOOPBACK}:{port}"
        handed = {RDZV_FD_ENV: str(fd), RDZV_PORT_ENV: str(port)}
    flags = _flags(nproc_per_node, nnodes, max_restarts, endpoint)
    # what a learner would type: the course's own --local-addr is left out
    typed = [f for f in flags if not f.startswith("--local-addr=")]
    run.commands = [" ".join(["torchrun", *typed, *tail])] * nnodes
    env: dict[str, str | None] = {key: None for key in TORCHRUN_ENV}
    env["LOGLEVEL"] = "INFO"  # torchrun's log says when it restarts and why
    # each worker runs the script as `python -u script args` would, with the
    # pause after destroy_process_group, in a process forked from a warm server
    argv = [sys.executable, "-c", AGENT, *flags, "--run-path", WARM_START_METHOD, *tail]
    for node, own in enumerate(node_env):
        first = handed and node == 0
        launch.command(argv, env={**env, **own, **(handed if first else {})},
                       pass_fds=(int(handed[RDZV_FD_ENV]),) if first else (),
                       kept=OUTPUT_KEPT_BYTES)  # fmt: skip
    if handed:
        os.close(int(handed[RDZV_FD_ENV]))  # node 0 holds it now


def finish(
    run: TorchrunRun, launch: Supervisor, failed: errors.LaunchError | None,
    codes: list[int | None] | None = None,
) -> None:
    """Fill ``run`` from its ended launch; raise ``failed``, or torchrun's failure if any.

    Args:
        codes: the exit codes that decide whether torchrun failed (default:
            every node's); a node lost on purpose is left out by its caller.
    """
    run.outputs = [node.output for node in launch.commands]
    run.reports = launch.reports
    run.elapsed_s = launch.elapsed_s
    run.restarts = [out.count("will restart worker group") for out in run.outputs]
    codes = [node.returncode for node in launch.commands] if codes is None else codes
    if failed is None and any(codes):
        failed = errors.LaunchError(failure_text(run, codes))
    if failed is not None:
        failed.output = "\n".join(run.outputs)
        failed.run = run
        raise failed

if __name__ == "__main__":
    main()
