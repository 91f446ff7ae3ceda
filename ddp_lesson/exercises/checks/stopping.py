"""Checks for the exercise of notebook 18_stopping_and_resizing: stopping every rank together."""

from __future__ import annotations

import re
from pathlib import Path

from ... import devices
from ...stages import stage
from ..probes import on_gpus
from ..probes import stopping as probes
from . import base, stand_ins
from .base import Result, failed, graded, launch_checked, passed

GROUP = stage("process_group").title


def _stops(returned: list[bool]) -> int | None:
    """The first step at which the answer said stop (``None``: it never did)."""
    return next((step for step, stop in enumerate(returned) if stop), None)


def _would(step: int | None) -> str:
    if step is None:
        return "would never stop (it went on to the end)"
    return f"would stop at step {step}"


def _raised(raise_at: list[int | None]) -> str:
    """The case in words: which ranks raised their flag, and when."""
    up = [f"rank {rank} at step {step}" for rank, step in enumerate(raise_at) if step is not None]
    return "no rank raised its flag" if not up else "flags raised by " + " and ".join(up)


@graded
def check_stop_together(path: str | Path, *, reveal: bool = False) -> Result:
    """Launch the learner's ``stop_everywhere`` on every rank; compare where each would stop.

    In each case of :func:`.probes.stopping.cases` every rank calls it once
    per step with its own flag; the reference stops every rank at the first
    step at which any rank's flag is up, and never when none is. The ranks
    must agree with each other and with the reference in every case.
    ``reveal=True`` shows the line that fixes a failure now.
    """
    name = "check_stop_together"
    world_size = devices.plan().world_size

    def unpaired(error: BaseException) -> Result | None:
        # (the partner that left closes or resets the connection, whichever comes first)
        if not re.search(r"Connection (closed|reset) by peer", str(error)):
            return None
        return failed(
            name,
            stage=GROUP,
            expected="every rank calling the same collective at every step",
            happened="a rank waited in a collective until its partners, which had not called "
            "it, finished their steps and left the group",
            fix="does every rank call the same collective at every step, whatever its own flag?",
        )

    got = launch_checked(
        name, path, probes.stop_flag, "stop_everywhere()", stage=GROUP,
        expected="stop_everywhere() to run on every rank",
        fix="stop_everywhere: the line the error names",
        hang=(
            "every rank to return from stop_everywhere() at every step",
            f"the ranks had not returned after {base.CHECK_TIMEOUT_S} s: a rank waited in a "
            "collective that another rank did not call at that step",
            "does every rank call the same collective at every step, whatever its own flag?",
        ),
        explain=unpaired,
    )  # fmt: skip
    for case, raise_at in enumerate(probes.cases(world_size)):
        wrong = _case_wrong(name, raise_at, {r["rank"]: _stops(r["returned"][case]) for r in got})
        if wrong is not None:
            return wrong
    wrong = stand_ins.cpu_tensor_handed(name, base.worker_path(path), on_gpus.stop_on_gpus,
                                        stage_title=GROUP, made="the flag")  # fmt: skip
    if wrong is not None:
        return wrong
    return passed(
        name,
        f"{world_size} rank(s) stopped together at the first step any of them raised its "
        "flag (one rank alone, two ranks at different steps), and went on when none did.",
    )


def _case_wrong(
    name: str, raise_at: list[int | None], stops: dict[int, int | None]
) -> Result | None:
    """A failure if the ranks disagree, or agree on another step than the reference's."""
    up = [step for step in raise_at if step is not None]
    right = min(up) if up else None  # the reference: the first raised flag stops everyone
    if len(set(stops.values())) > 1:
        said = "; ".join(f"rank {r} {_would(s)}" for r, s in sorted(stops.items()))
        return failed(
            name,
            stage=GROUP,
            expected=f"with {_raised(raise_at)}: the same answer on every rank",
            happened=said,
            fix="each rank decided from its own flag: what makes every rank see the others' "
            "flags before it decides?",
            answer="all_reduce(flag, op=ReduceOp.MAX) on a tensor holding this rank's flag",
        )
    stop = next(iter(stops.values()))
    if stop == right:
        return None
    return failed(
        name,
        stage=GROUP,
        expected=f"with {_raised(raise_at)}: every rank stopping at the first step any flag "
        "is up" + ("" if up else ", that is never"),
        happened=f"every rank {_would(stop)}",
        fix="which ranks' flags does the answer combine, and how? One raised flag on any rank "
        "must be enough, and no flag must mean no stop",
        answer="all_reduce(flag, op=ReduceOp.MAX), then stop if the result is 1",
    )
