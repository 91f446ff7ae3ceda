"""Checks for the exercises of notebooks 12_batches and 13_evaluation (14's: :mod:`.debugging`).

12's accumulation exercise has a module of its own, :mod:`.accumulate`.

Each failure says what happened and where to look; the line that fixes it
is shown after a few tries at the same mistake, or with ``reveal=True``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from ... import data, devices
from ...stages import stage
from ..probes import on_gpus
from ..probes import practice as probes
from . import base, stand_ins
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
    size = len(data.digits("train"))
    for per_rank, world_size in BATCH_CASES + UNLISTED_CASES:
        global_batch, lr = _planned(plan_batches, per_rank, world_size)
        real = _first_global_batch(per_rank, world_size, size)
        wrong = _global_batch_wrong(global_batch, real, per_rank, world_size)
        if wrong is None:
            rule = base_lr * real / base_batch
            wrong = _rate_wrong(lr, rule, per_rank, world_size, base_lr, base_batch)
        if wrong is not None:
            return wrong
    cases = ", ".join(f"{p}x{w}" for p, w in BATCH_CASES)
    return passed(
        "check_global_batch",
        f"global batches and learning rates right for {cases} (images per rank x ranks), "
        "as the real sampler and the linear scaling rule give them.",
    )


def _planned(plan_batches: Callable, per_rank: int, world_size: int) -> tuple:
    """Call the learner's ``plan_batches`` and return its pair, or end the check with why not."""
    name = "check_global_batch"
    try:
        answer = plan_batches(per_rank, world_size)
    except NotImplementedError:
        raise base.EndCheck(not_attempted(name, "plan_batches()")) from None
    except Exception as error:  # learner code: quote it
        raise base.EndCheck(
            failed(
                name,
                stage=DATA,
                expected="plan_batches() to return (global_batch, lr)",
                happened=quote(error),
                fix="the body of plan_batches",
            )
        ) from None
    if base.is_stub(answer) or (isinstance(answer, tuple) and any(map(base.is_stub, answer))):
        raise base.EndCheck(not_attempted(name, "plan_batches()"))
    if not (isinstance(answer, tuple) and len(answer) == 2):
        raise base.EndCheck(
            failed(
                name,
                stage=DATA,
                expected="a pair (global_batch, lr)",
                happened=repr(answer),
                fix="return global_batch, lr",
            )
        )
    return answer


def _global_batch_wrong(
    global_batch: object, real: int, per_rank: int, world_size: int
) -> Result | None:
    """check_global_batch's failure when the answer's global batch is not ``real``, or None."""
    if global_batch != real:
        return failed(
            "check_global_batch",
            stage=DATA,
            expected="the images all ranks' first steps hold together",
            happened=f"for {per_rank} images per rank on {world_size} rank(s), global_batch = "
            f"{global_batch!r}",
            fix="each rank's loader gives per_rank images, and one DDP step averages the "
            "gradients of all ranks: how many images does one step follow?",
            answer="global_batch = per_rank * world_size",
        )
    return None


def _rate_wrong(
    lr: object, rule: float, per_rank: int, world_size: int, base_lr: float, base_batch: int
) -> Result | None:
    """check_global_batch's failure when the answer's lr is not the scaling rule's, or None."""
    if not isinstance(lr, (int, float)) or not math.isclose(lr, rule, rel_tol=1e-9):
        return failed(
            "check_global_batch",
            stage=RATE,
            expected=f"lr {base_lr:g} at a batch of {base_batch}, scaled by the factor the "
            f"batch grew by",
            happened=f"for {per_rank} images per rank on {world_size} rank(s), lr = {lr!r}"
            + _rate_seen(lr, per_rank, world_size, base_lr, base_batch),
            fix="the linear scaling rule: the learning rate grows by the factor the batch "
            f"grew by, from base_batch ({base_batch}) to the global batch",
            answer="lr = base_lr * global_batch / base_batch",
        )
    return None


def _rate_seen(lr: object, per_rank: int, world_size: int, base_lr: float, base_batch: int) -> str:
    """What the answer's lr is, when it is a known wrong rule: ``", which is ..."`` or ""."""
    if not isinstance(lr, (int, float)):
        return ""
    known = {
        "base_lr times the world size alone": base_lr * world_size,
        "base_lr times the factor rounded down to a whole number (integer division)": base_lr
        * (per_rank * world_size // base_batch),
        "base_lr times the per-rank batch's factor (per_rank / base_batch)": base_lr
        * per_rank / base_batch,
    }
    for said, value in known.items():
        if math.isclose(lr, value, rel_tol=1e-9, abs_tol=1e-12):
            return f", which is {said}"
    return ""


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
            stage=DATA,
            expected=f"the {size} items split between the ranks, each once",
            happened=f"{overlap} item(s) in more than one rank's share, "
            f"{size - len(everything)} in none",
            fix="make_loader, where the sampler is built: every rank shuffles the whole data set "
            "and keeps its own part, so the parts fit together only with the same seed on "
            "every rank, and each rank's own rank and the world size",
            answer="DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed)",
        )
    if all(r["indices"] == r["reordered"] for r in got):
        return failed(
            name,
            stage=DATA,
            expected="the items shuffled from seed: another seed, another order",
            happened=f"make_loader with seed {seed} and with seed {seed + 1} gave every rank "
            "the same items in the same order",
            fix="make_loader, where the sampler is built: does it shuffle, and does the "
            "shuffle's order follow from the seed make_loader is given?",
            answer="DistributedSampler(dataset, num_replicas=world_size, rank=rank, seed=seed)",
        )
    # with no worker at all the noise is the rank's own process's: the workers come first
    workerless = any(all(w < 0 for w in r["workers"]) for r in got)
    judges = (_workers_wrong, _noise_wrong) if workerless else (_noise_wrong, _workers_wrong)
    for wrong in (judge(got, seed) for judge in judges):
        if wrong is not None:
            return wrong
    return passed(
        name,
        f"{plan.world_size} rank(s) split the {size} items without overlap, each drew "
        "augmentation of its own in its loader's worker processes, and a rebuilt loader drew "
        "it again exactly.",
    )


def _workers_wrong(got: list[probes.SeedsReport], seed: int = 0) -> Result | None:
    """check_seeds' failure when a rank's items were not loaded by worker processes, or None."""
    for report in got:
        workers = [w for w in report["workers"] if w >= 0]
        if len(workers) < 2:
            where = (
                "in the rank's own process (no loader workers)"
                if not workers
                else "by 1 loader worker process"
            )
            return failed(
                "check_seeds",
                stage=DATA,
                expected="each rank's items loaded by the loader's two worker processes",
                happened=f"rank {report['rank']}'s items were all loaded {where}",
                fix="make_loader: how many worker processes does the exercise ask the DataLoader "
                "for? Which random numbers each worker draws is what this exercise is about",
                answer="DataLoader(..., num_workers=2, ...)",
            )
    return None


def _noise_wrong(got: list[probes.SeedsReport], seed: int) -> Result | None:
    """check_seeds' failure when ranks drew the same noise, or a rebuilt loader other noise."""
    name = "check_seeds"
    noises = [r["noise"] for r in got]
    if len(got) > 1 and any(noises[0][:4] == other[:4] for other in noises[1:]):
        return failed(
            name,
            stage=DATA,
            expected="augmentation noise of its own on every rank",
            happened=f"ranks drew the same noise: {noises[0][:3]}...",
            fix="make_loader, where the DataLoader is built: its workers' random numbers follow "
            "from the loader's generator (or, without one, from the rank's own random state, "
            "which every rank here seeds alike); that seed must differ from rank to rank and "
            "still follow from seed",
            answer="DataLoader(..., generator=torch.Generator().manual_seed(seed + rank))",
        )
    unmoved = [r["rank"] for r in got if r["noise"][:4] == r["renoised"][:4]]
    if unmoved:
        return failed(
            name,
            stage=DATA,
            expected="augmentation noise that follows from seed on every rank",
            happened=f"rank {unmoved[0]} drew the same noise from a loader built with seed "
            f"{seed} and with seed {seed + 1}",
            fix="make_loader, where the loader's generator is seeded: does every rank's seed "
            "change when seed does?",
            answer="DataLoader(..., generator=torch.Generator().manual_seed(seed + rank))",
        )
    changed = [r["rank"] for r in got if r["noise"] != r["again"]]
    if changed:
        who = "every rank" if len(got) > 1 and len(changed) == len(got) else f"rank {changed[0]}"
        return failed(
            name,
            stage=DATA,
            expected="the same noise from a loader built again with the same seed",
            happened=f"in {who}, make_loader was called twice with the same arguments (seed "
            f"{seed}), and the second loader's epoch drew other noise than the first's",
            fix="make_loader: where do the loader's random numbers come from, and does a second "
            "call with the same arguments start them from the same state as the first?",
        )
    return None


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
    wrong = stand_ins.cpu_tensor_handed(name, base.worker_path(path), on_gpus.evaluate_on_gpus,
                                        stage_title=GROUP, made="what is all-reduced")  # fmt: skip
    if wrong is not None:
        return wrong
    first = got[0]["cases"][0]
    return passed(
        name,
        f"{plan.world_size} rank(s) each evaluated their own part, every image once, and "
        f"all returned the accuracy on all {first['size']} images ({first['truth']:.4f}).",
    )


def _evaluation_wrong(got: list[probes.EvaluateReport], case: int) -> Result | None:
    """check_evaluate's failure for one case (the ranks' reports of it), or None."""
    size = got[0]["size"]
    on = f"on {size} test images" + (" (the second run)" if case else "")
    accuracies = [r["accuracy"] for r in got]
    wrong = _not_a_number(got, on)
    if wrong is None:
        wrong = _denominator_wrong(got, on)
    if wrong is None:
        wrong = _accuracies_differ(accuracies, on)
    if wrong is None:
        wrong = _parts_wrong([r["forwarded"] for r in got], size, on)
    if wrong is None:
        wrong = _accuracy_wrong(got, accuracies[0], on)
    return wrong


def _not_a_number(got: list[probes.EvaluateReport], on: str) -> Result | None:
    """check_evaluate's failure for a rank whose evaluate returned no number, or None."""
    odd = [r for r in got if r["returned"] is not None]
    if not odd:
        return None
    named = "; ".join(f"rank {r['rank']}'s evaluate returned {r['returned']}" for r in odd)
    return failed(
        "check_evaluate",
        stage=GROUP,
        expected="every rank's evaluate to return the accuracy, a number",
        happened=f"{on}: {named}",
        fix="evaluate's return: every rank must return the accuracy on all the test images",
    )


def _denominator_wrong(got: list[probes.EvaluateReport], on: str) -> Result | None:
    """check_evaluate's failure for an accuracy no share of images can be, or None.

    An accuracy outside 0 to 1 is not right answers over the images they
    were counted on; when it equals the right answers of all ranks together
    over the images of the returning rank's own part, the message says so.
    """
    accuracies = [r["accuracy"] for r in got]
    if not any(a > 1 or a < 0 for a in accuracies):  # NaN is left to the checks after this
        return None
    shown = [round(a, 6) for a in accuracies]
    happened = f"{on}, per rank: {shown}, {_outside(accuracies)}"
    right = round(got[0]["truth"] * got[0]["size"])  # of all the images, all ranks together
    own = [sum(i >= 0 for i in r["forwarded"]) for r in got]
    if all(n and abs(r["accuracy"] - right / n) < 1e-6 for r, n in zip(got, own, strict=True)):
        happened += (
            ": each is the right answers of all ranks together divided by that rank's own "
            "number of images"
        )
    return failed(
        "check_evaluate",
        stage=GROUP,
        expected="each rank to return a share of the images the model got right (0 to 1)",
        happened=happened,
        fix="evaluate, where it divides: over which images were the right answers counted, and "
        "how many images is that number divided by?",
        answer="all_reduce a tensor of (right answers, images) on every rank, then divide one "
        "by the other",
    )


def _outside(accuracies: list[float]) -> str:
    """Whether the accuracies outside 0 to 1 are above 1, below 0, or both."""
    above, below = any(a > 1 for a in accuracies), any(a < 0 for a in accuracies)
    if above and below:
        return "above 1 and below 0"
    return "above 1" if above else "below 0"


def _accuracies_differ(accuracies: list[float], on: str) -> Result | None:
    """check_evaluate's failure when the ranks returned different accuracies, or None."""
    if len(accuracies) > 1 and max(accuracies) - min(accuracies) > 1e-9:
        return failed(
            "check_evaluate",
            stage=GROUP,
            expected="the same accuracy on every rank",
            happened=f"{on}, per rank: {[round(a, 4) for a in accuracies]}",
            fix="evaluate, after counting: each rank counted its own part only; the ranks must "
            "combine what they counted before anyone divides",
            answer="all_reduce a tensor of (right answers, images) on every rank, then divide",
        )
    return None


def _parts_wrong(given: list[list[int]], size: int, on: str) -> Result | None:
    """check_evaluate's failure when the ranks' parts are not each test image once, or None.

    Args:
        given: per rank, the indices of the images it gave the model (-1: not a test image).
    """
    name = "check_evaluate"
    everything = [i for indices in given for i in indices]
    if len(given) > 1 and all(len(set(indices) - {-1}) == size for indices in given):
        return failed(
            name,
            stage=DATA,
            expected=f"each rank to give the model its own part of the {size} images",
            happened=f"{on}: every rank gave the model all {size} images",
            fix="evaluate, where the images to look at are chosen: each rank must take its own "
            "part of the test set, every image in exactly one part",
            answer="Subset(test_dataset, range(rank, len(test_dataset), world_size))",
        )
    idle = [rank for rank, indices in enumerate(given) if not set(indices) - {-1}]
    if len(given) > 1 and idle and size >= len(given):
        seen = [f"rank {r} {len(set(ix) - {-1})}" for r, ix in enumerate(given) if r not in idle]
        return failed(
            name,
            stage=DATA,
            expected=f"each rank to give the model its own part of the {size} images",
            happened=f"{on}: rank {idle[0]} gave the model none of them (images given: "
            f"{', '.join(seen)})" if seen else f"{on}: no rank gave the model any of them, yet "
            "evaluate returned an accuracy",
            fix="evaluate, where the images to look at are chosen: every rank must take a "
            "part of the test set, every image in exactly one part" if seen else "evaluate: "
            "where does the number it returns come from, if not from this model and images?",
            answer="Subset(test_dataset, range(rank, len(test_dataset), world_size))" * bool(seen),
        )
    twice = sorted({i for i in everything if i >= 0 and everything.count(i) > 1})
    if twice:
        return failed(
            name,
            stage=DATA,
            expected="each test image given to the model once, over all ranks",
            happened=f"{on}: {len(twice)} image(s) went through the model more than once (indices "
            f"{twice[:5]})",
            fix="evaluate, where the images to look at are chosen: which ranks' parts hold "
            "those images? Every image must be in exactly one part (a DistributedSampler pads "
            "the parts with repeats; a split by hand can overlap at its edges)",
            answer="Subset(test_dataset, range(rank, len(test_dataset), world_size))",
        )
    missed = size - len(set(everything) - {-1})
    if missed:
        return failed(
            name,
            stage=DATA,
            expected="every test image given to the model",
            happened=f"{on}: {missed} never went through it on any rank",
            fix="evaluate: do the ranks' parts together cover every index of test_dataset?",
        )
    return None


def _accuracy_wrong(got: list[probes.EvaluateReport], accuracy: float, on: str) -> Result | None:
    """check_evaluate's failure when the accuracy is not the model's on the whole set, or None."""
    if abs(accuracy - got[0]["truth"]) > 1e-6:
        if len(got) > 1 and abs(accuracy - got[0]["mean_of_parts"]) < 1e-6:
            return failed(
                "check_evaluate",
                stage=GROUP,
                expected="right answers / images, counted over all ranks",
                happened=f"{on}: {accuracy:.6g}, the mean of the ranks' accuracies: the parts "
                "have different sizes",
                fix="evaluate, after counting: parts of different sizes weigh differently; "
                "combine the counts, not the accuracies",
                answer="all_reduce a tensor of (right answers, images), then divide once",
            )
        return failed(
            "check_evaluate",
            stage=GROUP,
            expected="the accuracy of the model it is given, on the test set it is given",
            happened=f"{on}: every rank returned {accuracy:.6g}, which is not the share of "
            "those images the model gets right",
            fix="evaluate: is the accuracy computed from the model's predictions, with right "
            "answers and images added up over all ranks?",
        )
    return None
