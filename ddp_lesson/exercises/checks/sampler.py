"""Checks for the exercises of ``04_sampler``: the loader and its epochs, and a prediction.

A failure says what the ranks' run showed, never a rank's real list (the
prediction check shows it only after a few wrong tries, or with
``reveal=True``).
"""

from __future__ import annotations

from pathlib import Path

from ... import data, devices
from ...stages import stage
from ..probes import stage_workers as probes
from . import answers, base
from .base import Result, failed, graded, launch_checked, not_attempted, passed

DATA = stage("data_division").title


# -- stage 3: splitting the data ---------------------------------------------------
@graded
def check_sampler(
    path: str | Path, size: int = 10, epochs: int = 2, *, reveal: bool = False
) -> Result:
    """Launch the learner's ``make_loader`` and ``epoch_orders``; judge the items each rank met.

    The ranks run both on a data set of ``size`` items and on one of
    ``size + 3`` (so that one of them needs the sampler's padding), whose
    items are numbers other than their indices. In every epoch the ranks'
    lists must be what ``DistributedSampler`` makes of some shuffled order
    (whatever its seed): equal lengths, every item in one rank's list, only
    the padding repeated, each rank every ``world_size``-th position; and
    each epoch in a new order. ``reveal=True`` shows the line that fixes a
    failure now, even on a first try.
    """
    name = "check_sampler"
    plan = devices.plan()
    sizes = [size, size + 3]
    got = launch_checked(
        name, path, probes.sampler, "make_loader() and epoch_orders()", sizes, epochs,
        stage=DATA, expected="the loader to run",
        fix="make_loader / epoch_orders: the line the error names",
    )  # fmt: skip
    for k, items in enumerate(sizes):
        orders = [r["orders"][k] for r in got]
        wrong = _split_wrong(orders, items, (k + 1) * probes.OFFSET, plan.world_size, got)
        if wrong is not None:
            return wrong
    return passed(
        name,
        f"{epochs} epochs, each split without overlap and reshuffled, "
        "exactly as DistributedSampler does it.",
    )


def _split_wrong(
    orders: list[list[list[int]]], size: int, first: int, world_size: int, got: list[dict]
) -> Result | None:
    """check_sampler's failure for what the ranks met on a data set of ``size`` items, or None.

    Args:
        orders: per rank, per epoch, the numbers ``epoch_orders`` returned.
        first: the number item 0 holds (item ``i`` holds ``first + i``).
    """
    name = "check_sampler"
    held = range(first, first + size)
    for rank, epochs in enumerate(orders):
        stray = [n for epoch in epochs for n in epoch if n not in held]
        if stray:
            return failed(
                name, DATA, "epoch_orders to return the items the loader yields, epoch by epoch",
                f"on a data set of {size} items, rank {rank}'s lists hold {stray[0]}, which no "
                "item of it holds",
                "epoch_orders: are its lists what iterating train_loader gives, or numbers "
                "worked out beside it?",
            )  # fmt: skip
    indices = [[[n - first for n in epoch] for epoch in epochs] for epochs in orders]
    sampled = got[0]["sampler"] == "DistributedSampler"
    share = -(-size // world_size)
    for epoch in range(len(indices[0])):
        mine = [ranks[epoch] for ranks in indices]
        if world_size > 1 and any(len(m) == size for m in mine) and sampled:
            return failed(
                name, DATA, f"each rank to iterate its own share of the {size} items",
                f"every rank met all {size} items, although the loader's sampler is a "
                "DistributedSampler",
                "epoch_orders: are its lists what iterating train_loader gives, or does it "
                "walk the data set some other way?",
            )  # fmt: skip
        if world_size > 1 and any(len(m) == size for m in mine):
            return failed(
                name, DATA, f"each rank to iterate its own share of the {size} items",
                f"every rank iterated all {size} items (sampler: {got[0]['sampler']})",
                "make_loader: a plain DataLoader hands every item to every rank; it needs "
                "something that gives each rank its own share",
                answer="DataLoader(..., sampler=DistributedSampler(dataset))",
            )  # fmt: skip
        lengths = [len(m) for m in mine]
        if len(set(lengths)) > 1 or lengths[0] != share:
            return failed(
                name, DATA, "every rank the same number of items, the padding included",
                f"epoch {epoch}, {size} items: the ranks' lists hold {lengths} items",
                "make_loader and epoch_orders: every rank must take as many steps as the "
                "others; what makes the shares equal when the items do not divide evenly?",
            )  # fmt: skip
        order = [i for position in zip(*mine, strict=True) for i in position]
        counts = [order[:size].count(i) for i in range(size)]
        if sorted(order[:size]) != list(range(size)) or order[size:] != order[: len(order) - size]:
            twice = sum(c > 1 for c in counts)
            return failed(
                name, DATA, "every item in exactly one rank's share, only the padding repeated",
                f"epoch {epoch}, {size} items: {twice} item(s) met by more than one rank "
                f"beyond the padding, {counts.count(0)} by none",
                "make_loader and epoch_orders: do all ranks agree on one order of the items, "
                "and does each take its own positions in it?",
            )  # fmt: skip
        if order[:size] == list(range(size)):
            return failed(
                name, DATA, "the items in a shuffled order",
                f"epoch {epoch}: the ranks met the items in the order they are stored",
                "make_loader: does the sampler shuffle?",
            )  # fmt: skip
        if epoch > 0 and mine == [ranks[0] for ranks in indices]:
            return failed(
                name, DATA, f"epoch {epoch} in a new order",
                f"on {size} items every rank met epoch {epoch}'s items in the same order as "
                "epoch 0's",
                "epoch_orders, at the top of each epoch: the sampler shuffles from seed + "
                "epoch, and nothing told it that the epoch changed",
                answer="train_loader.sampler.set_epoch(epoch) before each epoch",
            )  # fmt: skip
    return None


def check_sampler_prediction(
    predicted: object,
    *,
    size: int,
    world_size: int,
    rank: int,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    drop_last: bool = False,
    reveal: bool = False,
) -> Result:
    """Compare a predicted index list for one rank with the real ``DistributedSampler``.

    A wrong prediction is first told what kind of mistake it is (how many
    indices, which positions, the padding, the order); the right list is
    shown after a few wrong tries, or at once with ``reveal=True``.
    """
    name = "check_sampler_prediction"
    if base.is_stub(predicted):
        return not_attempted(name, "the prediction line")
    settings = dict(epoch=epoch, shuffle=shuffle, seed=seed, drop_last=drop_last)
    partition = data.sampler_partition(size, world_size, **settings)
    real = partition[rank]
    try:
        mine = [int(i) for i in predicted]
    except (TypeError, ValueError):
        return failed(
            name,
            DATA,
            f"a list of {len(real)} indices",
            repr(predicted),
            "the prediction is a list of whole numbers, e.g. [0, 3, 6]",
        )
    key = f"{name}:{size}:{world_size}:{rank}:{sorted(settings.items())}"
    if mine == real:
        answers.forget(key)
        return passed(name, f"rank {rank} gets {real}, as DistributedSampler says.")
    tries = answers.tried(key)
    what = _what_is_wrong(mine, partition, size, world_size, rank, settings)
    if reveal or tries >= answers.REVEAL_AFTER:
        marks = data.padding_of(partition, size)
        why = [f"padding repeats {marks['repeated']}"] if marks["repeated"] else []
        why += [f"drop_last skips {marks['dropped']}"] if marks["dropped"] else []
        return failed(
            name,
            DATA,
            f"{real}" + (f" ({'; '.join(why)})" if why else ""),
            f"{mine}: {what}",
            "data.sampler_partition(...) shows every rank's list",
        )
    return failed(
        name, DATA, f"rank {rank}'s list, in the order the rank meets it", f"{mine}", what
    )


def _what_is_wrong(
    mine: list[int],
    partition: list[list[int]],
    size: int,
    world_size: int,
    rank: int,
    settings: dict,
) -> str:
    """One sentence on what kind of mistake a wrong prediction is, without the answer."""
    real = partition[rank]
    count = len(real)
    trimmed = settings["drop_last"]
    if len(mine) != count:
        if trimmed:
            return (
                f"the length: with drop_last=True every rank gets {size} // {world_size} "
                "indices, and the leftover items are skipped"
            )
        rounded = "rounded up" if size % world_size else "exactly"
        return (
            f"the length: every rank gets the same number of indices, {size} / "
            f"{world_size} {rounded}, so that all ranks take the same number of steps"
            + ("; the sampler makes up the difference by padding" if size % world_size else "")
        )
    if mine in partition:
        return (
            f"that is rank {partition.index(mine)}'s list: rank {rank} starts at "
            f"position {rank} of the order"
        )
    if sorted(mine) == sorted(real):
        return "the right indices in the wrong order: a rank meets them in the sampler's order"
    # the whole padded order, as the ranks share it: position p goes to rank p % world_size
    order = [i for indices in zip(*partition, strict=True) for i in indices]
    block = order[rank * count : (rank + 1) * count]
    if mine == block:
        return (
            "ranks do not take consecutive blocks: a rank takes one position in every "
            f"{world_size} of the order, starting at its own rank"
        )
    if settings["shuffle"]:
        unshuffled = data.sampler_partition(size, world_size, **{**settings, "shuffle": False})
        if mine == unshuffled[rank]:
            return (
                "the order: shuffle=True, so the order is a permutation drawn from "
                "seed + epoch, not 0, 1, 2, ..."
            )
        if settings["epoch"]:
            first = data.sampler_partition(size, world_size, **{**settings, "epoch": 0})
            if mine == first[rank]:
                return (
                    f"that is epoch 0's list: set_epoch({settings['epoch']}) draws a "
                    "new permutation"
                )
    if mine[: count - 1] == real[: count - 1]:
        return "the last index: the padding repeats indices from the start of the order, in order"
    return (
        "work it through: the order (0, 1, 2, ... unless shuffled), made long enough "
        f"for {world_size} equal shares, then rank {rank}'s positions"
    )
