"""Checks for the exercises of ``11_inside_ddp``: DDP's gradient averaging, built by hand.

:func:`check_hooks` launches real ranks that train with the learner's
``broadcast_parameters``, ``attach_hooks`` and ``finish`` beside a ``DDP``
copy of the same model, on the same batches, and compares gradients and
parameters. When they differ it says which mistake the ranks showed (the
initial broadcast skipped, no hook, the wrong tensor all-reduced, a handle
never waited for, the sum left undivided) and which line of the learner's
file owns the fix.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...stages import stage
from ..probes import inside as probes
from .base import Result, failed, graded, launch_checked, passed

MODEL = stage("model_wrapping").title

#: Largest difference from DDP that still counts as equal. With a world size
#: that is a power of two the hand-built arithmetic is DDP's to the bit; with
#: others, dividing the sum by the world size and DDP's multiplying each
#: gradient by 1 / world_size before summing round differently in the last
#: bits (about 1e-8 with three ranks: tests/test_inside.py), which this allows.
TOLERANCE = 1e-6

#: Training steps the check runs.
STEPS = 3


def _where(path: Path, pattern: str, fallback: str = "") -> str:
    """``file, line N (`text`)`` for the first line of the learner's file matching ``pattern``."""
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return path.name
    for wanted in filter(None, (pattern, fallback)):
        for number, text in enumerate(lines, 1):
            if re.search(wanted, text):
                return f"{path.name}, line {number} (`{text.strip()}`)"
    return path.name


def _line(path: Path, number: int | None) -> str:
    if number is None:
        return path.name
    try:
        text = path.read_text().splitlines()[number - 1].strip()
    except (OSError, IndexError):
        return f"{path.name}, line {number}"
    return f"{path.name}, line {number} (`{text}`)"


def _defined(name: str) -> str:
    return rf"^\s*def {name}\("


@graded
def check_hooks(path: str | Path) -> Result:
    """Launch the learner's hand-built DDP (the file at ``path``) beside DDP and compare.

    The file defines ``broadcast_parameters(model)``, ``attach_hooks(model)``
    (registers the hooks, returns what ``finish`` needs) and
    ``finish(model, pending)`` (called after ``loss.backward()``, before
    ``optimizer.step()``).
    """
    name = "check_hooks"
    path = Path(path)
    got = launch_checked(
        name, path, probes.hooked_training, "broadcast_parameters(), attach_hooks() and finish()",
        STEPS, stage=MODEL, expected="your three functions to run in every rank",
    )  # fmt: skip
    world_size = got[0]["world_size"]
    broadcast_at = _where(path, _defined("broadcast_parameters"))
    hooks_at = _where(path, r"register_\w*hook\(", _defined("attach_hooks"))
    finish_at = _where(path, _defined("finish"))

    # 1. every rank must start from rank 0's parameters and buffers
    start_gap = max(r["start_gap"] for r in got)
    starts = (
        (
            start_gap,
            "after broadcast_parameters(model), every rank holds rank 0's parameters",
            f"the ranks' parameters still differed by up to {start_gap:.3g}: each rank kept "
            "the weights of its own seed (the initial broadcast was skipped)",
            "dist.broadcast(tensor.detach(), src=0) for every parameter and buffer, as "
            "DDP(model) does first",
        ),
        (
            max(r["buffer_gap"] for r in got),
            "rank 0's buffers on every rank too (DDP broadcasts them as well)",
            "the parameters were equal, but the model's buffer still differed between ranks",
            "broadcast model.buffers() as well as model.parameters()",
        ),
        (
            max(r["start_vs_rank0"] for r in got),
            "every rank to start from rank 0's parameters, as DDP does",
            "the ranks held equal parameters, but not rank 0's",
            "broadcast from src=0",
        ),
    )
    for gap, expected, happened, fix in starts:
        if gap > 0:
            return failed(name, MODEL, expected, happened, f"{broadcast_at}: {fix}")

    report = got[0]
    calls = [c for step in report["calls"] for c in step]
    # 2. the all-reduces start from hooks, while backward still runs
    if not any(c["in_backward"] for c in calls):
        happened = (
            "no all-reduce at all"
            if not calls
            else f"{len(calls)} all-reduce(s) in {STEPS} steps, all started after "
            f"backward had finished ({_line(path, calls[0]['line'])})"
        )
        return failed(
            name, MODEL, "all-reduces started by hooks while loss.backward() runs", happened,
            f"{hooks_at}: in attach_hooks, call param.register_post_accumulate_grad_hook(hook) "
            "on every parameter; the hook starts dist.all_reduce(param.grad, async_op=True)",
        )  # fmt: skip
    # 3. the hook must all-reduce the gradient, not the parameter's values
    wrong = next((c for c in calls if c["target"] == "parameter"), None)
    if wrong is not None:
        return failed(
            name, MODEL, "each hook to all-reduce the parameter's gradient, param.grad",
            f"an all-reduce was given the parameter {wrong['parameter']} itself, its values "
            "(the wrong tensor): the ranks summed their weights, and the gradients stayed "
            "their own",
            f"{_line(path, wrong['line'])}: dist.all_reduce(param.grad, async_op=True)",
        )  # fmt: skip
    blocking = next((c for c in calls if c["in_backward"] and not c["async_op"]), None)
    if blocking is not None:
        return failed(
            name, MODEL, "asynchronous all-reduces, so that backward goes on while they run",
            "an all-reduce made backward wait until it had finished (async_op was not True)",
            f"{_line(path, blocking['line'])}: async_op=True, and wait for the handles in finish()",
        )  # fmt: skip
    if not any(c["target"] == "other" for c in calls):  # one all-reduce per gradient
        for step, step_calls in enumerate(report["calls"], 1):
            reduced = {c["parameter"] for c in step_calls if c["target"] == "gradient"}
            missing = [n for n in report["names"] if n not in reduced]
            if missing:
                return failed(
                    name, MODEL, "every parameter's gradient all-reduced in every step",
                    f"in step {step} the gradient of {', '.join(missing)} was never "
                    "all-reduced (those parameters trained on their own rank's batch only)",
                    f"{hooks_at}: register the hook on every parameter of model.parameters()",
                )  # fmt: skip
    # 4. every handle waited for before optimizer.step()
    for step, step_calls in enumerate(report["calls"], 1):
        unwaited = [c for c in step_calls if not c["waited"]]
        if unwaited:
            return failed(
                name, MODEL, "finish() to wait for every all-reduce before optimizer.step()",
                f"in step {step}, {len(unwaited)} of {len(step_calls)} all-reduce handles were "
                "never waited for: the step read gradients the exchange had not finished with",
                f"{finish_at}: call handle.wait() on every handle attach_hooks collected, "
                "then divide",
            )  # fmt: skip
    # 5. the mean, not the sum
    grad_gaps = [max(r["grad_gap"][n] for r in got) for n in range(STEPS)]
    summed_gaps = [max(r["summed_gap"][n] for r in got) for n in range(STEPS)]
    for step, (gap, summed) in enumerate(zip(grad_gaps, summed_gaps, strict=True), 1):
        if gap <= TOLERANCE:
            continue
        if world_size > 1 and summed <= TOLERANCE * world_size:
            return failed(
                name, MODEL, "the mean gradient after finish(), as DDP leaves it",
                f"the gradients were the sum over the {world_size} ranks, {world_size} times "
                "the mean (nothing divided by the world size)",
                f"{finish_at}: after waiting, param.grad /= dist.get_world_size()",
            )  # fmt: skip
        return failed(
            name, MODEL, "the gradients after finish() to equal DDP's",
            f"in step {step} they differed from DDP's by up to {gap:.3g}",
            f"{finish_at}: wait for each all-reduce of param.grad, then divide by the "
            "world size",
        )  # fmt: skip
    param_gap = max(r["param_gap"] for r in got)
    if param_gap > TOLERANCE:
        return failed(
            name, MODEL, f"parameters equal to DDP's after {STEPS} steps",
            f"they differed by up to {param_gap:.3g}", f"{finish_at} and {hooks_at}",
        )  # fmt: skip
    grad_gap = max(grad_gaps)
    per_step = len(report["calls"][-1])
    return passed(
        name,
        f"{world_size} ranks, {STEPS} steps: {per_step} all-reduce(s) per step, each started "
        "by a hook during backward and waited for before the step; gradients and parameters "
        f"equal to DDP's (largest differences {grad_gap:.3g} and {param_gap:.3g}).",
    )
