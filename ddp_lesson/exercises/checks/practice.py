"""Checks for the exercises of notebooks 12_batches, 13_evaluation and 14_debugging.

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
    for per_rank, world_size in BATCH_CASES:
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
                f"{per_rank} images per rank on {world_size} rank(s): a global batch of {real} "
                "(what the ranks' first steps hold together)",
                f"global_batch = {global_batch!r}",
                "each rank's loader gives per_rank images, and one DDP step averages the "
                "gradients of all ranks: how many images does one step follow?",
                answer="global_batch = per_rank * world_size",
            )
        rule = base_lr * real / base_batch
        if not isinstance(lr, (int, float)) or not math.isclose(lr, rule, rel_tol=1e-9):
            return failed(
                name,
                RATE,
                f"lr {rule:g} for a global batch of {real} (lr {base_lr:g} at {base_batch}, "
                "scaled by the same factor as the batch)",
                f"lr = {lr!r}",
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
            "no all-reduce at all: every backward ran inside no_sync()"
            + (f"; the ranks' weights now differ by up to {ranks_gap:.3g}" if len(got) > 1 else ""),
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
    looked at its own part of them (each image once, over all ranks).
    ``reveal=True`` shows the line that fixes a failure now.
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
    size = len(data.digits("test"))
    truth = got[0]["truth"]
    accuracies = [r["accuracy"] for r in got]
    if len(got) > 1 and max(accuracies) - min(accuracies) > 1e-9:
        return failed(
            name,
            GROUP,
            f"the same accuracy on every rank ({truth:.4f})",
            f"per rank: {[round(a, 4) for a in accuracies]}, each of its own part",
            "evaluate, after counting: each rank counted its own part only; the ranks must "
            "combine what they counted before anyone divides",
            answer="all_reduce a tensor of (right answers, images) on every rank, then divide",
        )
    looked = [i for r in got for i in r["looked_at"]]
    if looked:
        twice = sorted({i for i in looked if looked.count(i) > 1})
        if len(got) > 1 and len(twice) == size:
            return failed(
                name,
                DATA,
                f"each rank on its own part of the {size} images",
                f"every rank evaluated all {size} images",
                "evaluate, where the images to look at are chosen: each rank must take its own "
                "part of the test set, every image in exactly one part",
                answer="Subset(test_dataset, range(rank, len(test_dataset), world_size))",
            )
        if twice:
            return failed(
                name,
                DATA,
                f"each of the {size} test images counted once",
                f"{len(twice)} image(s) counted more than once ({twice[:5]}): "
                "a DistributedSampler pads every rank's share to the same length",
                "evaluate, where the images to look at are chosen: split the test set without "
                "padding, so that every image is in exactly one rank's part",
                answer="Subset(test_dataset, range(rank, len(test_dataset), world_size))",
            )
        missed = size - len(set(looked))
        if missed:
            return failed(
                name,
                DATA,
                f"all {size} test images evaluated",
                f"{missed} were never looked at",
                "cover every index once",
            )
    if abs(accuracies[0] - truth) > 1e-6:
        if len(got) > 1 and abs(accuracies[0] - got[0]["mean_of_parts"]) < 1e-6:
            return failed(
                name,
                GROUP,
                f"accuracy {truth:.4f} (right answers / images, over all)",
                f"{accuracies[0]:.4f}, the mean of the ranks' accuracies: the parts have "
                "different sizes",
                "evaluate, after counting: parts of different sizes weigh differently; "
                "combine the counts, not the accuracies",
                answer="all_reduce a tensor of (right answers, images), then divide once",
            )
        return failed(
            name,
            GROUP,
            f"accuracy {truth:.4f} on the {size} test images",
            f"{accuracies[0]:.4f}",
            "count right answers and images, all_reduce both",
        )
    return passed(
        name,
        f"{plan.world_size} rank(s) each evaluated their own part, every image once, and "
        f"all returned the accuracy on all {size} images ({truth:.4f}).",
    )


# -- 14, exercise 1: parameters without a gradient -----------------------------------------
@graded
def check_unused(params_without_grad: Callable, *, reveal: bool = False) -> Result:
    """Check ``params_without_grad(model, loss)`` names what DDP's own error names.

    The learner's function runs here, on a plain ``Branchy`` network (a head
    the loss ignores, a frozen layer); the same network then trains under
    DDP on real ranks until DDP fails, with its debug level at INFO, and
    the parameters its error names are the expected answer. Names are
    compared, as ``model.named_parameters()`` gives them: an answer of
    positions (DDP's error also lists indices) or of the parameters
    themselves is told so. ``reveal=True`` shows the line that fixes a
    failure now.
    """
    name = "check_unused"
    import torch

    torch.manual_seed(0)
    model = probes.Branchy()
    try:
        answer = params_without_grad(model, probes.branchy_loss(model))
    except NotImplementedError:
        return not_attempted(name, "params_without_grad()")
    except Exception as error:  # learner code
        return failed(
            name,
            MODEL,
            "params_without_grad() to run",
            quote(error),
            "params_without_grad: the line the error names (p.grad is None for a "
            "parameter that got no gradient)",
        )
    if base.is_stub(answer):
        return not_attempted(name, "params_without_grad()")
    got, error = base.launch_probe(devices.plan().world_size, probes.ddp_unused)
    if error is not None:
        return failed(
            name,
            MODEL,
            "DDP's own run to report its unused parameters",
            quote(error),
            "this is the check's own run: re-run the cell",
        )
    named = got[0]["named"]
    try:
        given = list(answer)
    except TypeError:
        given = None
    if given is None or isinstance(answer, (str, bytes)):
        return failed(
            name,
            MODEL,
            f"a list of parameter names such as {named}",
            repr(answer)[:200],
            "return the names from model.named_parameters()",
        )
    if given and all(isinstance(n, torch.Tensor) for n in given):
        return failed(
            name,
            MODEL,
            f"{named}: names, as model.named_parameters() gives them (the check compares names)",
            f"{len(given)} tensor(s): the parameters themselves, not their names",
            "params_without_grad's return: model.named_parameters() gives each parameter "
            "with its name; return the names",
        )
    yours = sorted(str(n) for n in given)
    if yours == named:
        return passed(name, f"{named}: exactly the parameters DDP's error names.")
    everything = [n for n, _ in model.named_parameters()]
    frozen = sorted(n for n, p in model.named_parameters() if not p.requires_grad)
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    positions = _positions(given)
    if positions is not None:
        why = (
            "positions, not names: the check compares names, as model.named_parameters() "
            "gives them (DDP's error lists the names beside the indices)"
        )
        for order, among in ((trainable, "the parameters that train, as DDP numbers them"),
                             (everything, "model.named_parameters()")):  # fmt: skip
            if all(i < len(order) for i in positions) and (
                sorted(order[i] for i in positions) == named
            ):
                why += f" (they are the right parameters, counted in {among})"
                break
        return failed(
            name, MODEL, f"{named}: names (the check compares names)", f"{positions}: {why}",
            "params_without_grad's return: keep each parameter's name, not its position",
            answer="[name for name, p in model.named_parameters() "
            "if p.requires_grad and p.grad is None], after loss.backward()",
        )  # fmt: skip
    if yours == sorted(trainable):
        why = "every trainable parameter: was loss.backward() called before looking?"
    elif set(frozen) & set(yours):
        extra = sorted(set(frozen) & set(yours))
        why = f"{extra} never train (requires_grad=False), and DDP skips them"
    elif not set(yours) & set(everything):
        why = (
            "none of these is a parameter's name: the check compares names, as "
            "model.named_parameters() gives them"
        )
    else:
        why = "not the parameters that got no gradient (the check compares names)"
    return failed(
        name,
        MODEL,
        f"{named} (what DDP's error names)",
        f"{yours}: {why}",
        "params_without_grad: look at every parameter after loss.backward(): one the loss "
        "did not use has no gradient; frozen ones never train, and DDP leaves them out",
        answer="[name for name, p in model.named_parameters() "
        "if p.requires_grad and p.grad is None], after loss.backward()",
    )


def _positions(given: list) -> list[int] | None:
    """The answer as whole numbers, if it is positions (ints, or strings of digits), else None."""
    if not given:
        return None
    if all(isinstance(i, int) and not isinstance(i, bool) for i in given):
        return [int(i) for i in given]
    if all(isinstance(i, str) and i.strip().isdigit() for i in given):
        return [int(i) for i in given]
    return None
