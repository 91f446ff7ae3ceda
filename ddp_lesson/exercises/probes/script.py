"""What the whole-script check (``06_full_script``'s conversion) runs around a learner's script.

Two probes, each a small real run:

* :func:`setup` runs the script's ``ddp_setup(rank, world_size, port)`` in
  every rank of a warm launch and reports the group it joined;
* :func:`dry_start` (``python probes/script.py SCRIPT``) runs the script as
  ``python SCRIPT`` would, up to its ``mp.spawn`` call, and reports what
  that call was asked to start on this machine, without starting it.

The rest of the script (data, model, teardown) is run by the doctor.
"""

from __future__ import annotations

import inspect
import json
import os
import runpy
import sys
from typing import TypedDict

#: The line :func:`dry_start` prints its findings after.
MARK = "dry start:"


class SetupReport(TypedDict):
    """What :func:`setup` sends."""

    rank: int
    initialized: bool
    rank_in_group: int | None
    size_of_group: int | None
    backend: str | None
    device: str | None


class SpawnCall(TypedDict):
    """What :func:`dry_start` prints: the ``mp.spawn`` call the script made."""

    nprocs: object
    nargs: int
    bound: dict[str, object]


def setup(rank: int, world_size: int, port: int, path: str) -> None:
    """Run the learner's ``ddp_setup``; report the group it joined and the device it returned."""
    import torch
    import torch.distributed as dist

    from ...reports import send_typed
    from ...sources import load

    worker = load(path)
    device = worker.ddp_setup(rank, world_size, port)
    up = dist.is_initialized()
    report = SetupReport(
        rank=rank,
        initialized=up,
        rank_in_group=dist.get_rank() if up else None,
        size_of_group=dist.get_world_size() if up else None,
        backend=str(dist.get_backend()) if up else None,
        device=str(device) if isinstance(device, torch.device | str | int) else None,
    )
    if up:
        dist.barrier()  # no rank leaves while another still connects to it
        dist.destroy_process_group()
    send_typed(report)


# What reports.reports_of reads setup's reports as (reports.sends, written out: this file
# also runs as a script, where the package cannot be imported at the top).
setup.sends = SetupReport  # type: ignore[attr-defined]


def _literal(value: object) -> object:
    return value if isinstance(value, int | float | str | bool | type(None)) else repr(value)


def dry_start(path: str) -> None:
    """Run ``path`` as ``__main__`` until it calls ``mp.spawn``; print that call and stop."""
    from ddp_lesson.launch import torch_hooks

    said = os.dup(1)  # the call is told here even if the script took over stdout (a launch)

    def record(fn, args=(), nprocs=1, *rest, **options):
        try:
            bound = inspect.signature(fn).bind(0, *args).arguments
        except (TypeError, ValueError):
            bound = {}
        call = SpawnCall(
            nprocs=_literal(nprocs),
            nargs=len(args),
            bound={k: _literal(v) for k, v in list(bound.items())[1:]},
        )
        sys.stdout.flush()
        os.write(said, f"{MARK} {json.dumps(call)}\n".encode())
        os._exit(0)  # started nothing: this is all the check needs

    for where in (torch_hooks.START_PROCESSES, torch_hooks.SPAWN):
        torch_hooks.wrap(where, lambda torch_own: record)
    sys.argv = [path]
    sys.path[0] = os.path.dirname(os.path.abspath(path))
    runpy.run_path(path, run_name="__main__")
    print(MARK, "null", flush=True)  # the script ended without calling mp.spawn


if __name__ == "__main__":
    dry_start(sys.argv[1])
