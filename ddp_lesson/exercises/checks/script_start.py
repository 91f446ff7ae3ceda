"""Step 1 of ``check_ddp_script``: the learner's script run as ``python file.py`` runs it,
up to its ``mp.spawn`` call (:func:`ddp_lesson.exercises.probes.script.dry_start`).

What the call asks for is checked before anything starts: one process per
device, the world size main is told, a free port each start, and epochs
enough to show a reshuffle.
"""

from __future__ import annotations

import json

from ... import devices, launch
from ...stages import stage
from ..probes import script as probes
from . import base
from .base import Result, failed, quote
from .script_source import line_at

NAME = "check_ddp_script"
SPAWNING, DATA = (stage(key).title for key in ("spawning", "data_division"))


def dry_start(file: str) -> probes.SpawnCall | None | Result:
    """Run the script up to its ``mp.spawn`` call: the call it made, None, or its failure."""
    try:
        output = launch.run_script(probes.__file__, file, timeout_s=base.CHECK_TIMEOUT_S)
    except launch.LaunchError as error:
        return failed(
            NAME,
            stage=SPAWNING,
            expected="the __main__ block to reach its mp.spawn call",
            happened=quote(error),
            fix="the __main__ block: the line the error names",
        )
    said = [line for line in output.splitlines() if line.startswith(probes.MARK)]
    return json.loads(said[-1][len(probes.MARK) :]) if said else None


def fixed_port(file: str, call: probes.SpawnCall, where: str) -> Result | None:
    """The failure when every start of the script hands main the same port, or None.

    A free port differs from start to start; a port written into the script
    does not (a third start rules out the chance of one free port twice).
    """
    port = call["bound"].get("port")
    if not isinstance(port, int):
        return None
    for _ in range(2):
        again = dry_start(file)
        if not isinstance(again, dict) or again["bound"].get("port") != port:
            return None
    return failed(
        NAME,
        stage=SPAWNING,
        expected="a free port each time the script starts (the exercise asks for one)",
        happened=f"main was given port {port} at each of 3 starts of the script",
        fix=f"{where}: a port written into the script is taken whenever another run (or a "
        "process left from one) holds it; where does the port come from?",
    )


def started(file: str, plan: devices.Plan, lines: list[str], spawn_line: int) -> Result | object:
    """Run the script up to its ``mp.spawn`` call; a Result if the call is wrong, else epochs."""
    call = dry_start(file)
    if isinstance(call, Result):
        return call
    where = line_at(lines, spawn_line)
    if call is None:
        return failed(
            NAME,
            stage=SPAWNING,
            expected="the __main__ block to call mp.spawn",
            happened="it ended without calling it",
            fix=where,
        )
    nprocs, told = call["nprocs"], call["bound"].get("world_size")
    if nprocs != plan.world_size:
        zero = (
            " (torch.cuda.device_count() is 0 without a GPU: nothing starts)" if not nprocs else ""
        )
        return failed(
            NAME,
            stage=SPAWNING,
            expected=f"nprocs={plan.world_size}: one process per device ({plan.reason})",
            happened=f"nprocs={nprocs} on this machine{zero}",
            fix=f"{where}; the world size that is right on every machine is "
            "devices.plan().world_size",
        )
    if "world_size" in call["bound"] and told != nprocs:
        return failed(
            NAME,
            stage=SPAWNING,
            expected=f"every process told world_size={nprocs}, the processes started",
            happened=f"main is told world_size={told!r}",
            fix=f"{where}: args=(world_size, ...)",
        )
    fixed = fixed_port(file, call, where)
    if fixed is not None:
        return fixed
    epochs = call["bound"].get("epochs")
    if isinstance(epochs, int) and epochs < 2:
        return failed(
            NAME,
            stage=DATA,
            expected="at least 2 epochs, so that the run shows each epoch reshuffled",
            happened=f"epochs={epochs}",
            fix=f"{where}: pass epochs=2 (or more)",
        )
    return epochs
