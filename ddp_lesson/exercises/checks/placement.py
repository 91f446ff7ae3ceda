"""The last step of ``check_wrap`` on a machine without GPUs: is the model moved at all?

Without GPUs the device ``wrap`` is given is the CPU, where the model is
made, so a ``wrap`` that never moves the model trains as the reference
trains. :func:`left_behind` gives every rank a stand-in GPU instead
(:func:`ddp_lesson.exercises.probes.placement.wrap_given_a_gpu`) and fails a
model that is not sent to it.
"""

from __future__ import annotations

from ... import devices
from ...stages import stage
from ..probes import placement as probes
from . import base
from .base import Result, failed

MODEL = stage("model_wrapping").title


def left_behind(name: str, path: str, plan: devices.Plan) -> Result | None:
    """The failure if a rank given ``cuda:rank`` does not send its model there, or None.

    Only judged where the machine has no GPU for every rank (elsewhere the
    plain run already used real ones) and where the stand-in run works:
    what the stand-ins cannot run says nothing of the placement.
    """
    if plan.backend == "nccl":
        return None
    got, error = base.launch_probe(plan.world_size, probes.wrap_given_a_gpu, path)
    if error is not None:
        return None
    for report in sorted(got, key=lambda r: r["rank"]):
        given, asked = report["given"], report["asked"]
        went = [report["current"] if a == "cuda" else a for a in asked]
        if given in went:
            continue
        if went:
            happened = f"rank {report['rank']}'s model was sent to {went[-1]}, not to {given}"
        else:
            happened = (
                f"rank {report['rank']}'s model stayed where it was made, on the CPU: on a "
                f"machine with GPUs it would never reach {given}"
            )
        return failed(
            name,
            stage=MODEL,
            expected=f"the model on the device wrap is given (rank {report['rank']} was given "
            f"{given}, a stand-in GPU) before DDP wraps it",
            happened=happened,
            fix="wrap: where does the model go before DDP wraps it? On this machine the "
            "device is the CPU, where the model already is, so the plain run cannot show it",
            answer="model = model.to(device), before DDP(...)",
        )
    return None
