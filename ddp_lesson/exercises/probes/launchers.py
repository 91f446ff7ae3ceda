"""What the two-launchers check (``08_torchrun``) runs in every rank around a learner's worker.

The worker has the shape of ``stage_08.py``: ``ddp_setup()`` joins the
group from the environment ``torchrun`` sets, ``run_rank(epochs)`` is what
every process does, and ``main(rank, world_size, port, ...)`` is what
``mp.spawn`` starts. Each probe runs the learner's ``ddp_setup`` and reports
what the process became: its global rank, its device, its backend.

* :func:`spawned` starts the worker as ``mp.spawn`` does, through its
  ``main``, with ``run_rank`` replaced by the observation;
* :func:`on_node` gives the process the environment ``torchrun`` gives
  each of its processes on one node of several, with that node's GPUs
  simulated (one per process of the node): ``torch.cuda`` reports them,
  ``set_device`` is recorded, and the group runs on gloo whatever the
  backend asked for. So the device a process chooses is checked the same
  way on a laptop and on a cluster.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TypedDict

import torch

from ...launch import torch_hooks
from ...reports import send_typed, sends
from ...sources import load


class SetupReport(TypedDict):
    """What each probe sends: who the process became after the learner's ``ddp_setup()``."""

    rank: int
    rank_in_group: int
    size_of_group: int
    local_rank: int | None  # LOCAL_RANK as ddp_setup found it (None: unset, or not a number)
    local_world_size: int | None  # LOCAL_WORLD_SIZE, the same way
    node: int
    device: str
    backend: str
    asked_backend: str | None
    set_device: list[str]
    set_before_group: list[str]  # the set_device calls made before init_process_group


#: What this rank asked of init_process_group and set_device, noted by the probe's
#: replacements of them (torch calls those with no argument to carry it).
_seen: dict = {"asked_backend": None, "set_device": [], "set_before_group": [], "port": None}

#: What the probe raises when the group is told to meet elsewhere than at the port
#: main was given (the launch hosts the meeting there: elsewhere, nobody would come).
PORT_MISMATCH = "the group was told to meet at port {met}, not at the port main was given"


def _observe(rank: int, worker, node: int, *setup_args: object) -> None:
    """Run the learner's ``ddp_setup(*setup_args)``, report what this process became, leave
    the group."""
    import torch.distributed as dist

    device = worker.ddp_setup(*setup_args)
    report = SetupReport(
        rank=rank,
        rank_in_group=dist.get_rank(),
        size_of_group=dist.get_world_size(),
        local_rank=_number("LOCAL_RANK"),
        local_world_size=_number("LOCAL_WORLD_SIZE"),
        node=node,
        device=str(device),
        backend=str(dist.get_backend()),
        asked_backend=_seen["asked_backend"],
        set_device=list(_seen["set_device"]),
        set_before_group=list(_seen["set_before_group"]),
    )
    dist.barrier()  # no rank leaves while another still connects to it
    dist.destroy_process_group()
    send_typed(report)


def _number(variable: str) -> int | None:
    """The whole number in the environment variable, or ``None``."""
    value = os.environ.get(variable, "").strip()
    return int(value) if value.isdigit() else None


def _record_backend() -> None:
    """Note the backend the learner asks ``init_process_group`` for (names bound later see it)."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    real = c10d.init_process_group

    def init_process_group(backend=None, *args, **kwargs):
        _seen["asked_backend"] = None if backend is None else str(backend)
        _seen["set_before_group"] = list(_seen["set_device"])  # the order the calls came in
        met = _meeting_port(kwargs.get("init_method"))
        if _seen["port"] is not None and met is not None and met != _seen["port"]:
            raise RuntimeError(PORT_MISMATCH.format(met=met))
        if not torch.cuda.is_available() or _simulated():
            backend = "gloo"  # the GPUs are simulated, or there are none
            kwargs.pop("device_id", None)  # a simulated GPU cannot be bound
        return real(backend, *args, **kwargs)

    where = torch_hooks.point((c10d, dist), "init_process_group")
    torch_hooks.wrap(where, lambda torch_init: init_process_group)


def _meeting_port(init_method: object) -> int | None:
    """The port a group joined with ``init_method`` (or the environment) meets at, if told."""
    if isinstance(init_method, str) and init_method.startswith("tcp://"):
        tail = init_method.removeprefix("tcp://").split("?")[0].rsplit(":", 1)[-1]
        return int(tail) if tail.isdigit() else None
    if init_method in (None, "env://"):
        return _number("MASTER_PORT")
    return None


#: How many GPUs this rank's stand-ins pretend to have (set once, read by the stand-ins).
_state = {"gpus": 0}


def _simulated() -> bool:
    return _state["gpus"] > 0


def simulate_gpus(gpus: int) -> Callable[[], str]:
    """Make this process see ``gpus`` CUDA GPUs, without touching any.

    Returns what names the GPU ``set_device`` last chose (``"cuda:0"`` before any).
    """

    def set_device(device) -> None:
        index = device if isinstance(device, int) else torch.device(device).index
        _seen["set_device"].append(f"cuda:{index}")

    _state["gpus"] = gpus
    for name, stand_in in (
        ("device_count", lambda: gpus),
        ("is_available", lambda: True),
        ("set_device", set_device),
    ):
        torch_hooks.wrap(torch_hooks.point(torch.cuda, name), lambda torch_own, f=stand_in: f)
    return lambda: (_seen["set_device"] or ["cuda:0"])[-1]


@sends(SetupReport)
def spawned(rank: int, world_size: int, port: int, path: str) -> None:
    """Start the learner's worker as ``mp.spawn`` would: ``main(rank, world_size, port)``."""
    _record_backend()
    worker = load(path)
    worker.run_rank = lambda *args, **kwargs: _observe(rank, worker, node=0)
    _seen["port"] = port
    worker.main(rank, world_size, port)


@sends(SetupReport)
def on_node(rank: int, world_size: int, port: int, path: str, per_node: int) -> None:
    """Run the learner's ``ddp_setup()`` in the environment ``torchrun`` gives process ``rank``.

    Processes ``rank`` of ``world_size`` sit ``per_node`` to a node, each node
    with ``per_node`` GPUs, as ``torchrun --nnodes=N --nproc-per-node=per_node``
    would start them.
    """
    node, local = divmod(rank, per_node)
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(local),
        WORLD_SIZE=str(world_size),
        LOCAL_WORLD_SIZE=str(per_node),
        GROUP_RANK=str(node),
        GROUP_WORLD_SIZE=str(world_size // per_node),
        ROLE_RANK=str(rank),
        ROLE_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        TORCHELASTIC_RESTART_COUNT="0",
        TORCHELASTIC_MAX_RESTARTS="0",
        TORCHELASTIC_RUN_ID="check",
    )
    simulate_gpus(per_node)
    _record_backend()
    worker = load(path)
    _observe(rank, worker, node)


@sends(SetupReport)
def script_on_gpus(
    rank: int, world_size: int, port: int, path: str, gpus: int | None = None
) -> None:
    """Run a whole script's ``ddp_setup(rank, world_size, port)`` as if the machine had
    ``gpus`` GPUs (one for every rank when None).

    The GPUs are stand-ins (see :func:`simulate_gpus`): what is recorded is
    which device the script selects, and whether before its group.
    """
    simulate_gpus(world_size if gpus is None else gpus)
    _record_backend()
    _seen["port"] = port
    worker = load(path)
    _observe(rank, worker, 0, rank, world_size, port)
