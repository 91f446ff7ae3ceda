"""Checks for the exercises of ``11_inside_ddp``: DDP's gradient averaging, built by hand.

:func:`check_hooks` launches real ranks that train with the learner's
``broadcast_parameters``, ``attach_hooks`` and ``finish`` beside a ``DDP``
copy of the same model, on the same batches, and compares gradients and
parameters; when they differ it says which mistake the ranks showed and
which line of the learner's file owns the fix (the fixing line after a few
tries, or with ``reveal=True``).
"""

from __future__ import annotations

import re
from pathlib import Path

from ... import devices
from ...stages import stage
from ..probes import inside as probes
from . import base
from .base import Result, failed, graded, launch_checked, passed

MODEL = stage("model_wrapping").title

#: Largest difference from DDP that still counts as equal: with a world size not a power of
#: two, dividing the sum and DDP's multiplying each gradient by 1 / world_size before
#: summing round differently in the last bits (tests/test_inside.py, three ranks).
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


def _kept(report: probes.HooksReport, grad_gaps: list[float], finish_at: str) -> Result | None:
    """The failure for handles of earlier steps kept, and used again by a later finish():
    waits (or futures taken) in a step on handles an earlier step started, or what
    ``attach_hooks`` returned holding more entries after every step; said only when the
    gradients went wrong (a list that grows while they stay right shows no mistake)."""
    wrong = [n for n, gap in enumerate(grad_gaps, 1) if gap > TOLERANCE]
    if not wrong:
        return None
    held = report["held"]
    grew = (
        all(h is not None for h in held) and held[0] > 0
        and all(b > a for a, b in zip(held, held[1:], strict=False))
    )
    again = [(n, k) for n, k in enumerate(report["stale"], 1) if k]
    if again:
        step, count = again[0]
        seen = (
            f"in step {step}, finish() waited again for {count} handle(s) of all-reduces "
            "that earlier steps had started: what attach_hooks returned still held them"
        )
    elif grew:
        seen = (
            f"what attach_hooks returned held {', '.join(map(str, held))} entries after "
            f"finish() in steps 1 to {len(held)}: the earlier steps' handles were kept"
        )
    else:
        return None
    first = wrong[0]
    right = f"step {first - 1} matched DDP's; " if first > 1 else ""
    return failed(
        "check_hooks",
        stage=MODEL,
        expected="finish() in each step to wait for and divide that step's all-reduces, and only "
        "those",
        happened=f"{seen}, so finish() went through them again, and what it does per handle "
        f"(divide "
        "a gradient) was done again. "
        f"The gradients: {right}from step {first} on they differed from DDP's by up to "
        f"{max(grad_gaps[first - 1 :]):.3g}",
        fix=f"{finish_at}: what a step collected is used up once finish() has waited for it and "
        "divided; the next step must find it empty",
        answer="pending.clear() (empty what attach_hooks returned) as finish's last line",
    )


@graded
def check_hooks(path: str | Path, *, reveal: bool = False) -> Result:
    """Launch the learner's hand-built DDP (the file at ``path``) beside DDP and compare.

    The file defines ``broadcast_parameters(model)``, ``attach_hooks(model)``
    (registers the hooks, returns what ``finish`` needs) and
    ``finish(model, pending)`` (called after ``loss.backward()``, before
    ``optimizer.step()``). ``reveal=True`` shows the line that fixes a
    failure now, even on a first try.
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
    attach_at = _where(path, _defined("attach_hooks"))
    finish_at = _where(path, _defined("finish"))
    report = got[0]
    grad_gaps = [max(r["grad_gap"][n] for r in got) for n in range(STEPS)]
    param_gap = max(r["param_gap"] for r in got)
    judges = (  # in the order a learner builds it; a failed Result is falsy: test for None
        lambda: _start_wrong(name, got, broadcast_at),
        lambda: _exchange_wrong(name, path, report, hooks_at),
        lambda: _waits_wrong(name, report, finish_at, attach_at),
        lambda: _kept(report, grad_gaps, finish_at),  # each step its own all-reduces
        lambda: _reduced_elsewhere(name, path, report, grad_gaps),
        lambda: _means_wrong(name, got, grad_gaps, param_gap, finish_at, hooks_at),
    )
    for judge in judges:
        wrong = judge()
        if wrong is not None:
            return wrong
    other = devices.another_size(world_size)
    wrong = _elsewhere_wrong(name, path, world_size, other, finish_at)
    if wrong is not None:
        return wrong
    grad_gap = max(grad_gaps)
    per_step = len(report["calls"][-1])
    also = f"; the same in a world of {other} rank(s)" if other else ""
    return passed(
        name,
        f"{world_size} ranks, {STEPS} steps: {per_step} all-reduce(s) per step, each started "
        "by a hook during backward and waited for before the step; gradients and parameters "
        f"equal to DDP's (largest differences {grad_gap:.3g} and {param_gap:.3g}){also}.",
    )


def _elsewhere_wrong(
    name: str, path: Path, world_size: int, other: int | None, finish_at: str
) -> Result | None:
    """Run again in a world of ``other`` ranks: gradients and parameters must still be DDP's
    (a division written in for this machine's world shows there)."""
    if other is None:
        return None
    got, error = base.launch_probe(other, probes.hooked_training, base.worker_path(path), STEPS)
    again = f"run again in a world of {other} rank(s), as on a machine with another count"
    if error is not None:
        return failed(
            name, stage=MODEL, expected=f"your three functions to run in a world of {other} too",
            happened=f"{again}: {base.quote(error)}",
            fix="the line the error names: does it hold a number meant for "
            f"{world_size} ranks?",
        )  # fmt: skip
    gap = max(max(r["grad_gap"]) for r in got)
    param_gap = max(r["param_gap"] for r in got)
    if gap <= TOLERANCE and param_gap <= TOLERANCE:
        return None
    return failed(
        name,
        stage=MODEL,
        expected=f"the gradients after finish() to equal DDP's in any world, also of {other}",
        happened=f"{again}: the gradients differed from DDP's by up to {gap:.3g} (with "
        f"{world_size} ranks they matched)",
        fix=f"{finish_at}: does every number in it come from the group, or was one written "
        f"in for {world_size} ranks?",
    )


def _start_wrong(name: str, got: list[probes.HooksReport], broadcast_at: str) -> Result | None:
    """Step 1: every rank must start from rank 0's parameters and buffers."""
    start_gap = max(r["start_gap"] for r in got)
    seen, into_copies = _broadcast_seen(got, start_gap)
    starts = (
        (
            start_gap,
            "after broadcast_parameters(model), every rank holds rank 0's parameters",
            seen,
            "every parameter and buffer must travel from rank 0 to all ranks before "
            "training, as DDP(model) does first"
            + (": does each broadcast write into the model's own tensor?" if into_copies else ""),
            "dist.broadcast(tensor.detach(), src=0) for every tensor of model.parameters() "
            "and model.buffers()",
        ),
        (
            max(r["buffer_gap"] for r in got),
            "rank 0's buffers on every rank too (DDP broadcasts them as well)",
            "the parameters were equal, but the model's buffer still differed between ranks",
            "which of the model's tensors did the broadcast leave out?",
            "broadcast model.buffers() as well as model.parameters()",
        ),
        (
            max(r["start_vs_rank0"] for r in got),
            "every rank to start from rank 0's parameters, as DDP does",
            "the ranks held equal parameters, but not rank 0's",
            "which rank does each broadcast copy from?",
            "broadcast from src=0",
        ),
    )
    for gap, expected, happened, hint, answer in starts:
        if gap > 0:
            return failed(
                name,
                stage=MODEL,
                expected=expected,
                happened=happened,
                fix=f"{broadcast_at}: {hint}",
                answer=answer,
            )

    return None


def _broadcast_seen(got: list[probes.HooksReport], start_gap: float) -> tuple[str, bool]:
    """What the ranks showed of broadcast_parameters when their parameters still differed.

    Returns:
        the words for it, and whether every broadcast went into a tensor that
        is none of the model's own.
    """
    differed = f"the ranks' parameters still differed by up to {start_gap:.3g}"
    kept = all(r["own_gap"] == 0 for r in got)
    counts = {(r["broadcasts"], r["into_model"]) for r in got}
    if len(counts) != 1:  # the ranks called it differently: say only what they share
        return f"after broadcast_parameters(model), {differed}", False
    calls, into_model = counts.pop()
    if calls == 0 and kept:
        return (
            "no line of your file called dist.broadcast while broadcast_parameters(model) ran, "
            "and each rank's model kept the parameters it started with (the initial broadcast "
            f"was skipped): {differed}"
        ), False
    if into_model == 0 and kept:
        return (
            f"broadcast_parameters(model) called dist.broadcast {calls} time(s), none of them "
            "on one of the model's own parameters or buffers (each call was given a tensor "
            "with memory of its own, such as a copy), so each rank's model kept the "
            f"parameters it started with: {differed}"
        ), True
    said = f"after broadcast_parameters(model), {differed}"
    if calls:
        said += (
            f"; it called dist.broadcast {calls} time(s), {into_model} of them on the model's "
            "own tensors"
        )
    return said, False


def _exchange_wrong(
    name: str, path: Path, report: probes.HooksReport, hooks_at: str
) -> Result | None:
    """Steps 2 and 3: hooks start one asynchronous all-reduce per gradient during backward."""
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
            name,
            stage=MODEL,
            expected="all-reduces started by hooks while loss.backward() runs",
            happened=happened,
            fix=f"{hooks_at}: attach_hooks must give every parameter a hook that backward calls "
            "once that parameter's gradient is complete, and the hook starts its all-reduce",
            answer="param.register_post_accumulate_grad_hook(hook) for every parameter, the "
            "hook starting dist.all_reduce(param.grad, async_op=True)",
        )
    # 3. the hook must all-reduce the gradient, not the parameter's values
    wrong = next((c for c in calls if c["target"] == "parameter"), None)
    if wrong is not None:
        return failed(
            name,
            stage=MODEL,
            expected="each hook to all-reduce the parameter's gradient, param.grad",
            happened=f"an all-reduce was given the parameter {wrong['parameter']} itself, its "
            f"values "
            "(the wrong tensor): the ranks summed their weights, and the gradients stayed "
            "their own",
            fix=f"{_line(path, wrong['line'])}: which tensor holds what backward computed?",
            answer="dist.all_reduce(param.grad, async_op=True)",
        )
    blocking = next((c for c in calls if c["in_backward"] and not c["async_op"]), None)
    if blocking is not None:
        return failed(
            name,
            stage=MODEL,
            expected="asynchronous all-reduces, so that backward goes on while they run",
            happened="an all-reduce made backward wait until it had finished (async_op was not "
            "True)",
            fix=f"{_line(path, blocking['line'])}: start it without waiting, keep its handle, and "
            "wait for the handles in finish()",
            answer="dist.all_reduce(param.grad, async_op=True), its handle kept for finish()",
        )
    if not any(c["target"] == "other" for c in calls):  # one all-reduce per gradient
        return _every_gradient_wrong(name, report, hooks_at)
    return None


def _every_gradient_wrong(name: str, report: probes.HooksReport, hooks_at: str) -> Result | None:
    """Every parameter's gradient all-reduced once in every step, by its own hook."""
    for step, step_calls in enumerate(report["calls"], 1):
        given = [c["parameter"] for c in step_calls if c["target"] == "gradient"]
        reduced = set(given)
        missing = [n for n in report["names"] if n not in reduced]
        again = sorted({n for n in given if given.count(n) > 1})
        if missing and again:
            return failed(
                name,
                stage=MODEL,
                expected="every parameter's gradient all-reduced in every step",
                happened=f"in step {step}, {len(given)} all-reduce(s) were started by hooks, but "
                f"they were given the gradient of {', '.join(again)} more than once and "
                f"never that of {', '.join(missing)}",
                fix=f"{hooks_at}: which parameter does each hook reduce: the one it was "
                "registered on? (a function made in a loop sees the loop variable's last "
                "value unless it is bound when the function is made)",
            )
        if missing:
            return failed(
                name,
                stage=MODEL,
                expected="every parameter's gradient all-reduced in every step",
                happened=f"in step {step} the gradient of {', '.join(missing)} was never "
                "all-reduced (those parameters trained on their own rank's batch only)",
                fix=f"{hooks_at}: register the hook on every parameter of model.parameters()",
            )
    return None


def _waits_wrong(
    name: str, report: probes.HooksReport, finish_at: str, attach_at: str
) -> Result | None:
    """Step 4: each step starts as many all-reduces as the first (a hook registered again
    reduces its gradient once more), and every handle is waited for before optimizer.step()."""
    counts = [len(step_calls) for step_calls in report["calls"]]
    more = next((n for n, k in enumerate(counts, 1) if k > counts[0] > 0), None)
    if more is not None:
        return failed(
            name, stage=MODEL, expected=f"step 1's {counts[0]} all-reduces in every step",
            happened=f"step {more} started {counts[more - 1]}: hooks registered after step 1 stay "
            "beside the first ones, and each reduces its gradient once more",
            fix=f"{attach_at}: are the hooks registered once, or again in every step?",
        )  # fmt: skip
    for step, step_calls in enumerate(report["calls"], 1):
        unwaited = [c for c in step_calls if not c["waited"]]
        if unwaited:
            return _handed_over_wrong(name, report, step, unwaited, finish_at, attach_at)
    return None


def _handed_over_wrong(
    name: str,
    report: probes.HooksReport,
    step: int,
    unwaited: list[probes.AllReduceCall],
    finish_at: str,
    attach_at: str,
) -> Result:
    """The failure for handles never waited for, by what finish() was handed in ``step``.

    What ``attach_hooks`` returned is what ``finish`` gets. Holding nothing
    when ``finish`` is called, while the hooks had started all-reduces, the
    handles went somewhere else: ``attach_hooks`` (what it returns, or where
    its hooks keep them) is at fault, not ``finish``. When it cannot be
    counted, both are named; when it held entries, ``finish`` did not wait.
    """
    given = report["given"][step - 1]
    count = len(report["calls"][step - 1])
    hooked = sum(c["in_backward"] for c in report["calls"][step - 1])
    if given == 0 and hooked:
        return failed(
            name,
            stage=MODEL,
            expected="the handles the hooks start to reach finish() through what attach_hooks "
            "returns, and finish() to wait for each",
            happened=f"in step {step}, the hooks started {hooked} all-reduce(s), but what "
            "attach_hooks returned (what finish() is given) held 0 entries when finish() "
            f"was called: {len(unwaited)} handle(s) were never waited for",
            fix=f"{attach_at}: does what attach_hooks returns fill up as the hooks run, or do "
            "the hooks keep their handles somewhere else?",
            answer="return the very list (or dict) the hooks add their handles to, not a copy",
        )
    if given is None:  # what attach_hooks returned could not be counted: both may be at fault
        fix = (
            f"{attach_at} and {finish_at}: every handle a hook starts must reach finish() "
            "through what attach_hooks returns, and finish() must wait for each"
        )
        answer = ""
    else:
        fix = (
            f"{finish_at}: every handle attach_hooks collected must have finished before "
            "the gradients are read"
        )
        answer = "handle.wait() on every handle attach_hooks collected, then divide"
    return failed(
        name,
        stage=MODEL,
        expected="finish() to wait for every all-reduce before optimizer.step()",
        happened=f"in step {step}, {len(unwaited)} of {count} all-reduce handles were never "
        "waited for: the step read gradients the exchange had not finished with",
        fix=fix,
        answer=answer,
    )


def _reduced_elsewhere(
    name: str, path: Path, report: probes.HooksReport, grad_gaps: list[float]
) -> Result | None:
    """The failure for hooks whose all-reduces were given some tensor other than ``.grad``.

    Said only when the gradients after ``finish()`` went wrong, and only for
    all-reduces every hook started from the learner's file: a bucket that is
    copied back into ``.grad`` leaves them right, and is no mistake.
    """
    wrong = [n for n, gap in enumerate(grad_gaps, 1) if gap > TOLERANCE]
    hooked = [c for step in report["calls"] for c in step if c["in_backward"]]
    if not wrong or not hooked or any(c["target"] != "other" for c in hooked):
        return None
    if any(c["line"] is None for c in hooked):
        return None
    step = wrong[0]
    return failed(
        name,
        stage=MODEL,
        expected="the gradients after finish() to equal DDP's",
        happened=f"in step {step} they differed from DDP's by up to {grad_gaps[step - 1]:.3g}; "
        "every all-reduce the hooks started was given a tensor that is neither a parameter "
        "nor its .grad",
        fix=f"{_line(path, hooked[0]['line'])}: which tensor is this all-reduce given, and is "
        "its sum what ends up in .grad?",
        answer="dist.all_reduce(param.grad, async_op=True)",
    )


def _means_wrong(
    name: str,
    got: list[probes.HooksReport],
    grad_gaps: list[float],
    param_gap: float,
    finish_at: str,
    hooks_at: str,
) -> Result | None:
    """Step 5: the mean, not the sum; gradients and parameters equal to DDP's."""
    world_size = got[0]["world_size"]
    summed_gaps = [max(r["summed_gap"][n] for r in got) for n in range(STEPS)]
    for step, (gap, summed) in enumerate(zip(grad_gaps, summed_gaps, strict=True), 1):
        if gap <= TOLERANCE:
            continue
        if world_size > 1 and summed <= TOLERANCE * world_size:
            return failed(
                name,
                stage=MODEL,
                expected="the mean gradient after finish(), as DDP leaves it",
                happened=f"the gradients were the sum over the {world_size} ranks, "
                f"{world_size} times "
                "the mean (nothing divided by the world size)",
                fix=f"{finish_at}: after waiting, turn each summed gradient into the mean",
                answer="param.grad /= dist.get_world_size()",
            )
        return failed(
            name,
            stage=MODEL,
            expected="the gradients after finish() to equal DDP's",
            happened=f"in step {step} they differed from DDP's by up to {gap:.3g}",
            fix=f"{finish_at}: follow one gradient through a step: which all-reduce sums it, "
            "when finish() waits for it, and what it is divided by",
            answer="for each (param, handle) of this step: handle.wait(), then "
            "param.grad /= dist.get_world_size()",
        )
    if param_gap > TOLERANCE:
        return failed(
            name,
            stage=MODEL,
            expected=f"parameters equal to DDP's after {STEPS} steps",
            happened=f"they differed by up to {param_gap:.3g}",
            fix=f"{finish_at} and {hooks_at}",
        )
    return None
