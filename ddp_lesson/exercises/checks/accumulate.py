"""Check for the second exercise of ``12_batches``: accumulating gradients with ``no_sync()``.

The probe (:func:`ddp_lesson.exercises.probes.practice.accumulate`) notes
what the answer's step did: how often it stepped, where in its loop DDP
exchanged the gradient and ``zero_grad()`` ran, and the weights it ended
with. A failure says which of those went wrong; the line that fixes it is
shown after a few tries at the same mistake, or with ``reveal=True``.
"""

from __future__ import annotations

from pathlib import Path

from ... import reports
from ...stages import stage
from ..probes import practice as probes
from .base import Result, failed, graded, launch_checked, passed

NAME = "check_accumulate"
MODEL = stage("model_wrapping").title

#: Micro-batches per optimiser step in check_accumulate.
MICRO_BATCHES = 4

#: Largest parameter difference that still counts as the same step.
SAME = 1e-5

#: The line that keeps all but the last backward out of DDP's exchange.
ONE_EXCHANGE = (
    "every micro-batch's forward and backward but the last inside `with model.no_sync():`"
)


@graded
def check_accumulate(path: str | Path, *, reveal: bool = False) -> Result:
    """Launch the learner's ``accumulate_step`` on real ranks; count its all-reduces.

    Every rank gives it a DDP model, an SGD optimiser and four micro-batches
    of its own. The step must equal one SGD step on the four together, and
    exchange the gradient once. ``reveal=True`` shows the line that fixes a
    failure now.
    """
    k = MICRO_BATCHES
    got = launch_checked(
        NAME, path, probes.accumulate, "accumulate_step()", k,
        stage=MODEL, expected="accumulate_step() to run",
        fix="accumulate_step: the line the error names",
    )  # fmt: skip
    first = got[0]
    exchanges = first["floats_exchanged"] / first["gradient_floats"]
    ranks_gap = reports.max_abs_difference([r["params"] for r in got])
    gap = reports.max_abs_difference([first["one_batch"], first["params"]])
    wrong = _steps_wrong(first["optimizer_steps"], k)
    if wrong is None:
        wrong = _exchanges_wrong(exchanges, k, ranks_gap)
    if wrong is None and gap > SAME:
        wrong = _cleared_wrong(first["cleared_after"], k)
    if wrong is None:
        wrong = _ranks_differ(ranks_gap, first["exchanged_after"], k)
    if wrong is None and gap > SAME:
        wrong = _step_wrong(first, k, len(got), gap)
    if wrong is None:
        wrong = _left_behind(first)
    if wrong is not None:
        return wrong
    return passed(
        NAME,
        f"{k} micro-batches, one all-reduce of the whole gradient, and the same weights as "
        f"one step on all {k * probes.MICRO_BATCH} images, on every rank.",
    )


def _left_behind(first: probes.AccumulateReport) -> Result | None:
    """The failure when a second call does not step as a second step from cleared gradients."""
    gap = reports.max_abs_difference([first["one_batch_again"], first["params_again"]])
    if gap <= SAME:
        return None
    return failed(
        NAME,
        stage=MODEL,
        expected="a second call that steps from cleared gradients, as a second step on all "
        "the images does",
        happened=f"the first call was right, but after a second one the weights differ from "
        f"two such steps by up to {gap:.3g}: the first call's gradients were still in .grad "
        "when the second began",
        fix="accumulate_step: what is left in each parameter's .grad when it returns, and "
        "where is it cleared?",
        answer="optimizer.zero_grad() after optimizer.step()",
    )


def _steps_wrong(optimizer_steps: int, k: int) -> Result | None:
    """The failure when the answer stepped the optimiser other than once, or None."""
    if optimizer_steps != 1:
        return failed(
            NAME,
            stage=MODEL,
            expected=f"one optimizer.step() for {k} micro-batches",
            happened=f"{optimizer_steps} optimizer.step() calls",
            fix="call optimizer.step() once, after the last micro-batch's backward",
        )
    return None


def _exchanges_wrong(exchanges: float, k: int, ranks_gap: float) -> Result | None:
    """The failure when the gradient was all-reduced other than once, or None."""
    if exchanges == 0:
        return failed(
            NAME,
            stage=MODEL,
            expected="one all-reduce of the gradients, in the last backward",
            happened="DDP's own gradient exchange never ran: every backward was inside no_sync()"
            + (f"; the ranks' weights now differ by up to {ranks_gap:.3g}" if ranks_gap else ""),
            fix="accumulate_step's loop: which backward must DDP's all-reduce run in, and is "
            "that one outside model.no_sync()?",
            answer=ONE_EXCHANGE,
        )
    if exchanges > 1:
        return failed(
            NAME,
            stage=MODEL,
            expected="one all-reduce of the gradients per optimiser step",
            happened=f"{exchanges:g} all-reduces of the whole gradient for {k} micro-batches",
            fix="accumulate_step's loop: every micro-batch but the last must leave out DDP's "
            "all-reduce, and only the last one exchange the sum; DDP reads model.no_sync() at "
            "the forward pass, so is each of those forwards inside it, not only its backward?",
            answer=ONE_EXCHANGE,
        )
    return None


def _cleared_wrong(cleared_after: list[int], k: int) -> Result | None:
    """The failure when zero_grad() ran between the backwards and the step, or None.

    Args:
        cleared_after: for each ``zero_grad()`` before the step, the backwards run before it.
    """
    late = [n for n in cleared_after if n > 0]
    if not late:
        return None
    return failed(
        NAME,
        stage=MODEL,
        expected=f"the gradients of all {k} micro-batches added up until optimizer.step()",
        happened=f"zero_grad() ran {len(late)} time(s) after a backward and before the step "
        f"(after backward {', '.join(map(str, late))} of {k}): each time it threw away the "
        "gradients added up so far, so the step used only the micro-batches after the last "
        "of them",
        fix="accumulate_step: backward adds each micro-batch's gradient to those before it; "
        "where in the loop are they cleared?",
        answer="zero_grad() once per step, after optimizer.step(), not inside the loop",
    )


def _ranks_differ(ranks_gap: float, exchanged_after: list[int], k: int) -> Result | None:
    """The failure when the ranks ended with different weights, or None.

    Args:
        exchanged_after: for each bucket DDP all-reduced, the forwards run before it.
    """
    if ranks_gap <= 1e-6:
        return None
    at = sorted(set(exchanged_after))
    if at and max(at) < k:
        return failed(
            NAME,
            stage=MODEL,
            expected="identical weights on every rank",
            happened=f"they differ by up to {ranks_gap:.3g}: DDP's all-reduce ran in backward "
            f"{', '.join(map(str, at))} of {k}, so the gradients of the micro-batches after it "
            "stayed each rank's own",
            fix="accumulate_step's loop: the exchange carries what the backwards have added up "
            "so far; which backward is left outside model.no_sync()?",
            answer=ONE_EXCHANGE,
        )
    return failed(
        NAME,
        stage=MODEL,
        expected="identical weights on every rank",
        happened=f"they differ by up to {ranks_gap:.3g}, although DDP's all-reduce ran in the "
        "last backward",
        fix="accumulate_step: what changes a rank's gradients or weights after the last "
        "backward's exchange?",
    )


def _step_wrong(first: probes.AccumulateReport, k: int, world_size: int, gap: float) -> Result:
    """The failure for a step that differs from one step on all micro-batches at once."""
    moved = first["params"] - first["start"]
    wanted = first["one_batch"] - first["start"]
    ratio = float(moved @ wanted) / float(wanted @ wanted or 1.0)
    scaled = float((moved - ratio * wanted).abs().max()) < SAME * max(k, ratio)
    expected = "the same parameters as one SGD step on all the micro-batches at once"
    where = "accumulate_step, where each micro-batch's loss is computed"
    if scaled and abs(ratio - k) < 0.01 * k:
        return failed(
            NAME,
            stage=MODEL,
            expected="the same step as one batch of all the micro-batches",
            happened=f"a step {k} times as large: the {k} micro-batch gradients were added "
            "up undivided",
            fix=f"{where}: each loss is the mean over its own images, and backward adds the "
            "gradients up",
            answer="(loss / len(micro_batches)).backward()",
        )
    if scaled and world_size > 1 and abs(ratio * world_size - 1) < 0.01:
        return failed(
            NAME,
            stage=MODEL,
            expected=expected,
            happened=f"a step in the right direction but {world_size} times too small, with "
            f"{k} micro-batches on each of {world_size} ranks",
            fix=f"{where}: what is each loss divided by, and how large is that number here?",
            answer="(loss / len(micro_batches)).backward()",
        )
    if scaled:
        return failed(
            NAME,
            stage=MODEL,
            expected=expected,
            happened=f"a step in the right direction, {ratio:.3g} times as large",
            fix=f"{where}: what is each loss divided by, and is it scaled anywhere else?",
        )
    return failed(
        NAME,
        stage=MODEL,
        expected=expected,
        happened=f"they differ by up to {gap:.3g}, and not by a factor: the step went another way",
        fix="accumulate_step: each micro-batch's gradient must be added to the others, "
        "unchanged, until the one step; what changes them on the way?",
    )
