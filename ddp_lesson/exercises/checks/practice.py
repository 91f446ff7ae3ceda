"""Checks for the exercises of notebooks 12_batches and 13_evaluation (14's: :mod:`.debugging`).

Each failure says what happened and where to look; the line that fixes it
is shown after a few tries at the same mistake, or with ``reveal=True``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from ... import data, devices, reports
from ...stages import stage
from ..probes import practice as probes
from . import base
from .base import Result, failed, graded, launch_checked, not_attempted, passed, quote

GROUP = stage("process_group").title
DATA = stage("data_division").title
MODEL = stage("model_wrapping").title

#: What owns a learning-rate mistake: none of a DDP script's stages (the data are split
#: right, the model synchronises right), but the setting the optimiser is built with.
RATE = "the optimiser's learning rate"

#: (images per rank, world size) pairs that check_global_batch asks about.
BATCH_CASES = ((32, 1), (32, 2), (16, 4), (64, 8), (8, 3))

#: More pairs it asks about and never lists, so that a table of BATCH_CASES' answers
#: written in by hand fails.
UNLISTED_CASES = ((12, 5), (40, 3), (24, 6))

#: Micro-batches per optimiser step in check_accumulate.
MICRO_BATCHES = 4

#: Largest parameter difference that still counts as the same step.
SAME = 1e-5


# -- 12, exercise 1: the global batch and the learning rate ---------------------------
def _first_global_batch(per_rank: int, world_size: int, size: int) -> int:
    """Images in the first optimiser step of all ranks together, from the real sampler."""
    shares = data.sampler_partition(size, world_size)
    return sum(min(per_rank, len(share)) for share in shares)


@graded
def check_global_batch(
    plan_batches: Callable,
    base_lr: float = 0.1,
    base_batch: int = 32,
    *,
    reveal: bool = False,
) -> Result:
    """Check ``plan_batches(per_rank, world_size)`` gives the global batch and the scaled lr.

    The global batch is compared with what the real ``DistributedSampler``
    and ``DataLoader`` put into one step across all ranks, on the lesson's
    1438 training images (a mistake there is the data's split,
    "splitting the data"); the learning rate with the linear scaling rule
    from ``base_lr`` at ``base_batch`` (a mistake there is filed under
    :data:`RATE`). ``reveal=True`` shows the line that fixes a failure now.
    """
    name = "check_global_batch"
    size = len(data.digits("train"))
    for per_rank, world_size in BATCH_CASES + UNLISTED_CASES:
        try:
            answer = plan_batches(per_rank, world_size)
        except NotImplementedError:
            return not_attempted(name, "plan_batches()")
        except Exception as error:  # learner code: quote it
            return failed(
                name,
                DATA,
                "plan_batches() to return (global_batch, lr)",
                quote(error),
                "the body of plan_batches",
            )
        if base.is_stub(answer) or (isinstance(answer, tuple) and any(map(base.is_stub, answer))):
            return not_attempted(name, "plan_batches()")
        if not (isinstance(answer, tuple) and len(answer) == 2):
            return failed(
                name, DATA, "a pair (global_batch, lr)", repr(answer), "return global_batch, lr"
            )
        global_batch, lr = answer
        real = _first_global_batch(per_rank, world_size, size)
        if global_batch != real:
            return failed(
                name,
                DATA,
                "the images all ranks' first steps hold together",
                f"for {per_rank} images per rank on {world_size} rank(s), global_batch = "
                f"{global_batch!r}",
                "each rank's loader gives per_rank images, and one DDP step averages the "
                "gradients of all ranks: how many images does one step follow?",
                answer="global_batch = per_rank * world_size",
            )
        rule = base_lr * real / base_batch
        if not isinstance(lr, (int, float)) or not math.isclose(lr, rule, rel_tol=1e-9):
            return failed(
                name,
                RATE,
                f"lr {base_lr:g} at a batch of {base_batch}, scaled by the factor the batch "
                "grew by",
                f"for {per_rank} images per rank on {world_size} rank(s), lr = {lr!r}",
                "the linear scaling rule: the learning rate grows by the factor the batch "
                f"grew by, from base_batch ({base_batch}) to the global batch (not with the "
                "world size alone)",
                answer="lr = base_lr * global_batch / base_batch",
            )
    cases = ", ".join(f"{p}x{w}" for p, w in BATCH_CASES)
    return passed(
        name,
        f"global batches and learning rates right for {cases} (images per rank x ranks), "
        "as the real sampler and the linear scaling rule give them.",
    )


# -- 12, exercise 2: accumulation with no_sync() -----------------------------------------
@graded
def check_accumulate(path: str | Path, *, reveal: bool = False) -> Result:
    """Launch the learner's ``accumulate_step`` on real ranks; count its all-reduces.

    Every rank gives it a DDP model, an SGD optimiser and four micro-batches
    of its own. The step must equal one SGD step on the four together, and
    exchange the gradient once. ``reveal=True`` shows the line that fixes a
    failure now.
    """
    name = "check_accumulate"
    k = MICRO_BATCHES
    got = launch_checked(
        name, path, probes.accumulate, "accumulate_step()", k,
        stage=MODEL, expected="accumulate_step() to run",
        fix="accumulate_step: the line the error names",
    )  # fmt: skip
    first = got[0]
    exchanges = first["floats_exchanged"] / first["gradient_floats"]
    ranks_gap = reports.max_abs_difference([r["params"] for r in got])
    if first["optimizer_steps"] != 1:
        return failed(
            name,
            MODEL,
            f"one optimizer.step() for {k} micro-batches",
            f"{first['optimizer_steps']} optimizer.step() calls",
            "call optimizer.step() once, after the last micro-batch's backward",
        )
    if exchanges == 0:
        return failed(
            name,
            MODEL,
            "one all-reduce of the gradients, in the last backward",
            "DDP's own gradient exchange never ran: every backward was inside no_sync()"
            + (f"; the ranks' weights now differ by up to {ranks_gap:.3g}" if ranks_gap else ""),
            "leave the last micro-batch's backward outside model.no_sync()",
        )
    if exchanges > 1:
        return failed(
            name,
            MODEL,
            "one all-reduce of the gradients per optimiser step",
            f"{exchanges:g} all-reduces of the whole gradient for {k} micro-batches",
            "accumulate_step's loop: every backward but the last must leave out DDP's "
            "all-reduce, and only the last one exchange the sum",
            answer="every micro-batch's forward and backward but the last inside "
            "`with model.no_sync():`",
        )
    gap = reports.max_abs_difference([first["one_batch"], first["params"]])
    if gap > SAME:
        moved = first["params"] - first["start"]
        wanted = first["one_batch"] - first["start"]
        if float((moved - k * wanted).abs().max()) < SAME * k:
            return failed(
                name,
                MODEL,
                "the same step as one batch of all the micro-batches",
                f"a step {k} times as large: the {k} micro-batch gradients were added up undivided",
                "accumulate_step, where each micro-batch's loss is computed: each loss is the "
                "mean over its own images, and backward adds the gradients up",
                answer="(loss / len(micro_batches)).backward()",
            )
        return failed(
            name,
            MODEL,
            "the same parameters as one SGD step on all the micro-batches at once",
            f"they differ by up to {gap:.3g}",
            "one backward per micro-batch with loss / len(micro_batches), one optimizer.step()",
        )
    if ranks_gap > 1e-6:
        return failed(
            name,
            MODEL,
            "identical weights on every rank",
            f"they differ by up to {ranks_gap:.3g}",
            "the last backward must all-reduce",
        )
    return passed(
        name,
        f"{k} micro-batches, one all-reduce of the whole gradient, and the same weights as "
        f"one step on all {k * probes.MICRO_BATCH} images, on every rank.",
    )


# -- 12, exercise 3: seeds for shuffling and for augmentation -----------------------------
@graded
def check_seeds(path: str | Path, seed: int = 7, *, reveal: bool = False) -> Result:
    """Launch the learner's ``make_loader`` on real ranks; compare shares and augmentation.

    Every rank must get its own share of the items (the sampler's shuffle
    the same on every rank), draw augmentation noise of its own (different
    from every other rank's), and draw the same noise again from a loader
    built again with the same seed. ``reveal=True`` shows the line that
    fixes a failure now.
    """
    name = "check_seeds"
    plan = devices.plan()
    got = launch_checked(
        name, path, probes.seeds, "make_loader()", seed,
        stage=DATA, expected="make_loader() to build a loader that runs",
        fix="make_loader: the line the error names",
    )  # fmt: skip
    size = probes.SEEDS_SIZE
    shares = [set(r["indices"]) for r in got]
    everything = set().union(*shares)
    overlap = sum(len(s) for s in shares) - len(everything)
    if overlap or len(everything) != size:
        return failed(
            name,
            DATA,
            f"the {size} items split between the ranks, each once",
            f"{overlap} item(s) in more than one rank's share, {size - len(everything)} in none",
            "make_loader, where the sampler is built: every rank shuffles the whole data set "
            "and keeps its own part, so the parts fit together only with the same seed on "
            "every rank, and each rank's own rank and the world size",
            answer="DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed)",
        )
    noises = [r["noise"] for r in got]
    if len(got) > 1 and any(noises[0][:4] == other[:4] for other in noises[1:]):
        return failed(
            name,
            DATA,
            "augmentation noise of its own on every rank",
            f"ranks drew the same noise: {noises[0][:3]}...",
            "make_loader, where the DataLoader is built: its workers' random numbers follow "
            "from the loader's random generator, which every rank seeded alike; its seed "
            "must differ from rank to rank and still follow from seed",
            answer="DataLoader(..., generator=torch.Generator().manual_seed(seed + rank))",
        )
    if any(r["noise"] != r["again"] for r in got):
        return failed(
            name,
            DATA,
            "the same noise from a loader built again with the same seed",
            "different noise: the augmentation cannot be reproduced",
            "derive every seed from `seed` and `rank`, never from the time or an unseeded "
            "generator",
        )
    return passed(
        name,
        f"{plan.world_size} rank(s) split the {size} items without overlap, each drew "
        "augmentation of its own, and a rebuilt loader drew it again exactly.",
    )


# -- 13, exercise 1: evaluation on every rank --------------------------------------------
@graded
def check_evaluate(path: str | Path, *, reveal: bool = False) -> Result:
    """Launch the learner's ``evaluate`` on every rank; compare with the whole test set.

    Every rank must return the accuracy on all 359 test images, having
    given the model its own part of them (each image once, over all ranks,
    however the answer reaches the images). It runs again on the first 251
    images with a model trained for fewer steps, so that an accuracy that
    does not follow from the model and the data fails there. ``reveal=True``
    shows the line that fixes a failure now.
    """
    name = "check_evaluate"
    plan = devices.plan()
    got = launch_checked(
        name, path, probes.evaluate, "evaluate()", stage=GROUP, expected="evaluate() to run",
        fix="evaluate: the line the error names",
        hang=(
            "every rank to return from evaluate()",
            f"the ranks had not returned after {base.CHECK_TIMEOUT_S} s: some waited in a "
            "collective the others never called",
            "call all_reduce on every rank (not inside `if rank == 0:`)",
        ),
    )  # fmt: skip
    for case in range(len(probes.EVALUATE_CASES)):
        wrong = _evaluation_wrong([r["cases"][case] for r in got], case)
        if wrong is not None:
            return wrong
    first = got[0]["cases"][0]
    return passed(
        name,
        f"{plan.world_size} rank(s) each evaluated their own part, every image once, and "
        f"all returned the accuracy on all {first['size']} images ({first['truth']:.4f}).",
    )


def _evaluation_wrong(got: list[dict], case: int) -> Result | None:
    """check_evaluate's failure for one case (the ranks' reports of it), or None."""
    name = "check_evaluate"
    size = got[0]["size"]
    on = f"on {size} test images" + (" (the second run)" if case else "")
    accuracies = [r["accuracy"] for r in got]
    if len(got) > 1 and max(accuracies) - min(accuracies) > 1e-9:
        return failed(
            name,
            GROUP,
            "the same accuracy on every rank",
            f"{on}, per rank: {[round(a, 4) for a in accuracies]}",
            "evaluate, after counting: each rank counted its own part only; the ranks must "
            "combine what they counted before anyone divides",
            answer="all_reduce a tensor of (right answers, images) on every rank, then divide",
        )
    given = [r["forwarded"] for r in got]
    everything = [i for indices in given for i in indices]
    if len(got) > 1 and all(len(set(indices) - {-1}) == size for indices in given):
        return failed(
            name,
            DATA,
            f"each rank to give the model its own part of the {size} images",
            f"{on}: every rank gave the model all {size} images",
            "evaluate, where the images to look at are chosen: each rank must take its own "
            "part of the test set, every image in exactly one part",
            answer="Subset(test_dataset, range(rank, len(test_dataset), world_size))",
        )
    twice = sorted({i for i in everything if i >= 0 and everything.count(i) > 1})
    if twice:
        return failed(
            name,
            DATA,
            "each test image given to the model once, over all ranks",
            f"{on}: {len(twice)} image(s) went through the model more than once (indices "
            f"{twice[:5]}); a DistributedSampler pads every rank's share to the same length",
            "evaluate, where the images to look at are chosen: split the test set without "
            "padding, so that every image is in exactly one rank's part",
            answer="Subset(test_dataset, range(rank, len(test_dataset), world_size))",
        )
    missed = size - len(set(everything) - {-1})
    if missed:
        return failed(
            name,
            DATA,
            "every test image given to the model",
            f"{on}: {missed} never went through it on any rank",
            "evaluate: do the ranks' parts together cover every index of test_dataset?",
        )
    if abs(accuracies[0] - got[0]["truth"]) > 1e-6:
        if len(got) > 1 and abs(accuracies[0] - got[0]["mean_of_parts"]) < 1e-6:
            return failed(
                name,
                GROUP,
                "right answers / images, counted over all ranks",
                f"{on}: {accuracies[0]:.4f}, the mean of the ranks' accuracies: the parts "
                "have different sizes",
                "evaluate, after counting: parts of different sizes weigh differently; "
                "combine the counts, not the accuracies",
                answer="all_reduce a tensor of (right answers, images), then divide once",
            )
        return failed(
            name,
            GROUP,
            "the accuracy of the model it is given, on the test set it is given",
            f"{on}: every rank returned {accuracies[0]:.4f}, which is not the share of "
            "those images the model gets right",
            "evaluate: is the accuracy computed from the model's predictions, with right "
            "answers and images added up over all ranks?",
        )
    return None
