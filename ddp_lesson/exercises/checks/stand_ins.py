"""The stage checks' second run on a machine without GPUs: each rank given a stand-in GPU.

Without GPUs the device a rank is given is the CPU, where everything
already is: a ``ddp_setup`` that never selects a GPU, or a ``wrap`` that
never moves the model, passes the plain run. Here every rank sees a GPU of
its own (stand-ins: ``torch.cuda`` reports them, nothing is touched) and
what the learner's code does with it is judged:

* :func:`gpu_not_selected` (``check_process_group``): ``ddp_setup`` must ask
  for NCCL and select ``cuda:rank`` before the group; and on a machine with
  one GPU fewer than ranks, ask for neither NCCL nor a GPU it lacks (the
  course runs CPU processes there)
  (:func:`ddp_lesson.exercises.probes.launchers.script_on_gpus`);
* :func:`left_behind` (``check_wrap``): the model must be sent to the GPU
  ``wrap`` is given
  (:func:`ddp_lesson.exercises.probes.placement.wrap_given_a_gpu`);
* :func:`cpu_tensor_handed` (``check_evaluate``, ``check_stop_together``):
  every tensor the answer hands to a collective must be on the rank's GPU,
  as NCCL requires (:mod:`ddp_lesson.exercises.probes.on_gpus`).

Each is judged only where the stand-in run works: what stand-ins cannot
run says nothing of the learner's answer.
"""

from __future__ import annotations

from ... import devices
from ...stages import stage
from ..probes import launchers as gpu_probes
from ..probes import placement as probes
from . import base
from .base import Result, failed
from .launchers import selection_wrong

GROUP, MODEL = (stage(key).title for key in ("process_group", "model_wrapping"))


def gpu_not_selected(name: str, path: str, plan: devices.Plan) -> Result | None:
    """The failure if ``ddp_setup``, given a GPU per rank, does not join with NCCL after
    selecting ``cuda:rank``; or None."""
    if plan.backend == "nccl":
        return None
    got, error = base.launch_probe(plan.world_size, gpu_probes.script_on_gpus, path)
    if error is not None:
        return None
    for report in sorted(got, key=lambda r: r["rank"]):
        device, asked = f"cuda:{report['rank']}", report["asked_backend"]
        if asked is not None and asked.lower() != "nccl":
            return failed(
                name,
                stage=GROUP,
                expected=f"the backend for GPUs, NCCL, when every rank has a GPU (rank "
                f"{report['rank']} was given {device}, a stand-in)",
                happened=f"ddp_setup asked init_process_group for {asked!r}",
                fix="ddp_setup, where it picks the backend: which backend does a machine with "
                "a GPU for every rank need?",
                answer='"nccl" if device.type == "cuda" else "gloo"',
            )
        wrong = selection_wrong(name, report, device, "(given a GPU of its own, a stand-in)")
        if wrong is not None:
            return wrong
    return _too_few_gpus(name, path, plan.world_size)


def _too_few_gpus(name: str, path: str, world_size: int) -> Result | None:
    """The failure if ``ddp_setup``, on a machine with a GPU fewer than ranks, asks for NCCL
    or selects a GPU it does not have; or None (the course runs CPU processes there)."""
    gpus = world_size - 1
    if gpus < 1:
        return None
    got, error = base.launch_probe(world_size, gpu_probes.script_on_gpus, path, gpus)
    if error is not None:
        return None
    given = f"a machine with {gpus} GPU{'s' if gpus > 1 else ''} for {world_size} ranks"
    reports = sorted(got, key=lambda r: r["rank"])
    missing = [
        (r["rank"], d) for r in reports for d in r["set_device"] if int(d.split(":")[1]) >= gpus
    ]
    nccl = [r["rank"] for r in reports if (r["asked_backend"] or "").lower() == "nccl"]
    if missing or nccl:
        happened = (
            f"process {missing[0][0]} selected {missing[0][1]}, a GPU that machine does not have"
            if missing
            else "ddp_setup asked init_process_group for 'nccl' on rank(s) "
            + ", ".join(map(str, nccl))
        )
        return failed(
            name,
            stage=GROUP,
            expected=f"CPU processes and gloo on {given} (stand-ins): NCCL needs a GPU for "
            "every rank",
            happened=happened,
            fix="ddp_setup, where it decides between GPU and CPU: is there a GPU for every "
            "rank, or only some GPU?",
            answer="torch.cuda.device_count() >= world_size (devices.device_for) decides, not "
            "torch.cuda.is_available()",
        )
    return None


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
        ids = report["device_ids"]
        if given in went and ids and given not in ids:
            return failed(
                name,
                stage=MODEL,
                expected=f"DDP told the GPU the model is on (rank {report['rank']}'s model went "
                f"to {given}, a stand-in)",
                happened=f"on rank {report['rank']}, DDP(...) was told the model is on "
                f"{', '.join(ids)} (its device_ids)",
                fix="wrap, where DDP is built: which GPU does device_ids name on each rank?",
                answer="DDP(model, device_ids=[rank]) on a GPU",
            )
        if given in went:
            continue
        moved_late = [report["current"] if a == "cuda" else a for a in report["wrapper_asked"]]
        if went:
            happened = f"rank {report['rank']}'s model was sent to {went[-1]}, not to {given}"
        elif given in moved_late:
            happened = (
                f"rank {report['rank']}'s model was sent to {given} only after DDP(...) had "
                "wrapped it on the CPU (the wrapper's .to()): DDP is built for the device the "
                "model is on when it wraps it"
            )
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


def cpu_tensor_handed(name: str, path: str, probe, *, stage_title: str, made: str) -> Result | None:
    """The failure if, given ``cuda:rank``, the answer hands a CPU tensor to a collective.

    Args:
        probe: one of :mod:`ddp_lesson.exercises.probes.on_gpus`'s.
        stage_title: who owns the fix.
        made: what the tensor holds, in words ("the flag"), for the fix.
    """
    plan = devices.plan()
    if plan.backend == "nccl" or path is None:
        return None
    got, error = base.launch_probe(plan.world_size, probe, path)
    if error is not None:
        return None
    for report in sorted(got, key=lambda r: r["rank"]):
        for call in report["handed"]:
            if call["gpus"] and None in call["gpus"]:
                at = f" at line {call['line']}"
                return failed(
                    name,
                    stage=stage_title,
                    expected=f"every tensor handed to a collective on the rank's GPU (rank "
                    f"{report['rank']} was given {report['given']}, a stand-in): NCCL, the "
                    "backend on GPUs, reduces GPU tensors only",
                    happened=f"on rank {report['rank']}, the tensor handed to "
                    f"{call['collective']}{at} was on the CPU: on GPUs NCCL would refuse it "
                    "(gloo, on this machine, takes it)",
                    fix=f"where {made} is made: on which device? On GPUs it must be the "
                    "rank's own, the device the exercise's function is given",
                    answer="torch.tensor(..., device=device)",
                )
    return None
