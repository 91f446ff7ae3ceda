"""Checks for the exercises of ``04_sampler``: the loader and its epochs, and a prediction.

A failure says what the ranks' run showed, never a rank's real list (the
prediction check shows it only after a few wrong tries, or with
``reveal=True``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict

from ... import data, devices
from ...stages import stage
from ..probes import stage_workers as probes
from . import answers, base
from .base import Result, failed, graded, launch_checked, not_attempted, passed

DATA = stage("data_division").title


# -- stage 3: splitting the data ---------------------------------------------------
#: The batch size the exercise asks make_loader for.
BATCH_SIZE = 4


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
    each epoch in a new order; and the loader's batches of :data:`BATCH_SIZE`.
    ``reveal=True`` shows the line that fixes a failure now, even on a first try.
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
        seen = SeenOfOneSet(
            sampler=got[0]["sampler"], events=got[0]["events"][k], drop_last=got[0]["drop_last"][k]
        )
        wrong = _split_wrong(orders, items, (k + 1) * probes.OFFSET, plan.world_size, seen)
        if wrong is not None:
            return wrong
    batch = got[0]["batch_sizes"][0]
    if batch is not None and batch != BATCH_SIZE:
        return failed(
            name,
            stage=DATA,
            expected=f"make_loader's loader to hand out batches of {BATCH_SIZE}, as the "
            "exercise asks",
            happened=f"its batch size is {batch}",
            fix="make_loader, where the DataLoader is built: which batch size does it get?",
        )
    return passed(
        name,
        f"{epochs} epochs on {sizes[0]} and on {sizes[1]} items, each split among the ranks "
        "(every item in a share, only the padding repeated) and reshuffled, exactly as "
        "DistributedSampler does it.",
    )


class SeenOfOneSet(TypedDict):
    """What rank 0's report says of one data set, besides the orders it met.

    Its sampler's class name, that data set's sampler's epochs (``("set", epoch)``
    and ``("pass", epoch)`` events) and whether the loader and the sampler drop
    the last items: one data set's part of a
    :class:`~ddp_lesson.exercises.probes.stage_workers.SamplerReport`.
    """

    sampler: str
    events: list[tuple[str, int | str]] | None
    drop_last: dict[str, bool]


def _split_wrong(
    orders: list[list[list[int]]], size: int, first: int, world_size: int, seen: SeenOfOneSet
) -> Result | None:
    """check_sampler's failure for what the ranks met on a data set of ``size`` items, or None.

    Args:
        orders: per rank, per epoch, the numbers ``epoch_orders`` returned.
        first: the number item 0 holds (item ``i`` holds ``first + i``).
        seen: what rank 0 saw of this data set's sampler.
    """
    wrong = _stray_items(orders, size, first)
    if wrong is not None:
        return wrong
    indices = [[[n - first for n in epoch] for epoch in epochs] for epochs in orders]
    for epoch in range(len(indices[0])):
        mine = [ranks[epoch] for ranks in indices]
        wrong = _every_rank_everything(mine, size, world_size, seen["sampler"])
        if wrong is None:
            wrong = _shares_wrong(mine, epoch, size, world_size, seen["drop_last"])
        if wrong is None:
            wrong = _order_wrong(mine, epoch, size)
        if wrong is None and epoch > 0 and mine == [ranks[0] for ranks in indices]:
            wrong = _repeated(epoch, size, seen["events"])
        if wrong is not None:
            return wrong
    return None


def _stray_items(orders: list[list[list[int]]], size: int, first: int) -> Result | None:
    """check_sampler's failure when a rank's lists hold a number no item holds, or None."""
    held = range(first, first + size)
    for rank, epochs in enumerate(orders):
        stray = [n for epoch in epochs for n in epoch if n not in held]
        if stray:
            return failed(
                "check_sampler",
                stage=DATA,
                expected="epoch_orders to return the items the loader yields, epoch by epoch",
                happened=f"on a data set of {size} items, rank {rank}'s lists hold {stray[0]}, "
                f"which no "
                "item of it holds",
                fix="epoch_orders: are its lists what iterating train_loader gives, or numbers "
                "worked out beside it?",
            )
    return None


def _every_rank_everything(
    mine: list[list[int]], size: int, world_size: int, sampler: str
) -> Result | None:
    """check_sampler's failure when some rank met every item in one epoch, or None.

    Args:
        mine: per rank, the indices it met in the epoch.
        sampler: the class name of the loader's sampler.
    """
    if world_size > 1 and any(len(m) == size for m in mine) and sampler == "DistributedSampler":
        return failed(
            "check_sampler",
            stage=DATA,
            expected=f"each rank to iterate its own share of the {size} items",
            happened=f"every rank met all {size} items, although the loader's sampler is a "
            "DistributedSampler",
            fix="epoch_orders: are its lists what iterating train_loader gives, or does it "
            "walk the data set some other way?",
        )
    if world_size > 1 and any(len(m) == size for m in mine):
        return failed(
            "check_sampler",
            stage=DATA,
            expected=f"each rank to iterate its own share of the {size} items",
            happened=f"every rank iterated all {size} items (sampler: {sampler})",
            fix="make_loader: a plain DataLoader hands every item to every rank; it needs "
            "something that gives each rank its own share",
            answer="DataLoader(..., sampler=DistributedSampler(dataset))",
        )
    return None


def _shares_wrong(
    mine: list[list[int]], epoch: int, size: int, world_size: int, drop_last: dict[str, bool]
) -> Result | None:
    """check_sampler's failure when one epoch's shares are unequal, short or overlap, or None."""
    share = -(-size // world_size)
    lengths = [len(m) for m in mine]
    if len(set(lengths)) == 1 and lengths[0] < share:
        return _items_dropped(mine, epoch, size, drop_last)
    if len(set(lengths)) > 1 or lengths[0] != share:
        return failed(
            "check_sampler",
            stage=DATA,
            expected="every rank the same number of items, the padding included",
            happened=f"epoch {epoch}, {size} items: the ranks' lists hold {lengths} items",
            fix="make_loader and epoch_orders: every rank must take as many steps as the "
            "others; what makes the shares equal when the items do not divide evenly?",
        )
    order = _interleaved(mine)
    counts = [order[:size].count(i) for i in range(size)]
    if sorted(order[:size]) != list(range(size)) or order[size:] != order[: len(order) - size]:
        twice = sum(c > 1 for c in counts)
        return failed(
            "check_sampler",
            stage=DATA,
            expected="every item in exactly one rank's share, only the padding repeated",
            happened=f"epoch {epoch}, {size} items: {twice} item(s) met by more than one rank "
            f"beyond the padding, {counts.count(0)} by none",
            fix="make_loader and epoch_orders: do all ranks agree on one order of the items, "
            "and does each take its own positions in it?",
        )
    return None


def _order_wrong(mine: list[list[int]], epoch: int, size: int) -> Result | None:
    """check_sampler's failure when an epoch is unshuffled, or None (repeats: :func:`_repeated`)."""
    if _interleaved(mine)[:size] == list(range(size)):
        return failed(
            "check_sampler",
            stage=DATA,
            expected="the items in a shuffled order",
            happened=f"epoch {epoch}: the ranks met the items in the order they are stored",
            fix="make_loader: does the sampler shuffle?",
        )
    return None


def _items_dropped(
    mine: list[list[int]], epoch: int, size: int, drop_last: dict[str, bool]
) -> Result:
    """check_sampler's failure when the ranks' shares are equal but leave items out."""
    met = {i for m in mine for i in m}
    does = {
        "loader": "the DataLoader had drop_last=True, which leaves out a last batch that is "
        "not full",
        "sampler": "the sampler had drop_last=True, which leaves out the items that do not "
        "make a whole share for every rank",
    }
    said = [does[name] for name in ("loader", "sampler") if drop_last.get(name)]
    why = f"; {' and '.join(said)}" if said else ""
    return failed(
        "check_sampler",
        stage=DATA,
        expected="every item met by some rank in every epoch, the shares padded to be equal",
        happened=f"epoch {epoch}, {size} items: every rank met {len(mine[0])} items, and "
        f"{size - len(met)} of the {size} items reached no rank{why}",
        fix="make_loader: the shares were equal, but items were left out; what in the loader "
        "or its sampler drops the items left over?",
        answer="DataLoader(dataset, batch_size=..., sampler=DistributedSampler(dataset)), "
        "without drop_last=True",
    )


def _repeated(epoch: int, size: int, events: list | None) -> Result:
    """check_sampler's failure when an epoch repeats epoch 0's order: what set_epoch was told.

    Args:
        events: the loader's DistributedSampler's ``("set", epoch)`` calls and ``("pass",
            epoch)`` passes, in order (``None``: no such sampler).
    """
    same = f"on {size} items every rank met epoch {epoch}'s items in the same order as epoch 0's"
    sets = [e[1] for e in events or [] if e[0] == "set"]
    passes = [e[1] for e in events or [] if e[0] == "pass"]
    shuffled = ", ".join(map(str, passes))
    if events is None or not sets:
        happened = f"{same}: set_epoch was never called on the loader's sampler"
        hint = (
            "at the top of each epoch: the sampler shuffles from seed + epoch, and nothing told "
            "it that the epoch changed"
        )
    elif all(i and events[i - 1][0] == "pass" for i, e in enumerate(events) if e[0] == "set"):
        happened = (
            f"{same}: set_epoch was called with {', '.join(map(str, sets))}, each time after a "
            f"pass over the loader, so the passes shuffled with epochs {shuffled}"
        )
        hint = "where set_epoch is called: a pass shuffles with the epoch set before it"
    elif len(set(sets)) == 1:
        happened = (
            f"{same}: set_epoch was called {len(sets)} time(s), each time with {sets[0]}, so "
            f"the passes shuffled with epochs {shuffled}"
        )
        hint = "where set_epoch is called: the number it is given must change every epoch"
    else:
        happened = f"{same}: the loader's sampler shuffled with epochs {shuffled}"
        hint = "the sampler shuffles from seed + epoch; which sampler does set_epoch reach?"
    return failed(
        "check_sampler",
        stage=DATA,
        expected=f"epoch {epoch} in a new order",
        happened=happened,
        fix=f"epoch_orders, {hint}",
        answer="train_loader.sampler.set_epoch(epoch) before each epoch",
    )


def _interleaved(mine: list[list[int]]) -> list[int]:
    """The order the ranks' equal shares come from: position p is rank p % world_size's."""
    return [i for position in zip(*mine, strict=True) for i in position]


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
            stage=DATA,
            expected=f"a list of {len(real)} indices",
            happened=repr(predicted),
            fix="the prediction is a list of whole numbers, e.g. [0, 3, 6]",
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
            stage=DATA,
            expected=f"{real}" + (f" ({'; '.join(why)})" if why else ""),
            happened=f"{mine}: {what}",
            fix="data.sampler_partition(...) shows every rank's list",
        )
    return failed(
        name,
        stage=DATA,
        expected=f"rank {rank}'s list, in the order the rank meets it",
        happened=f"{mine}",
        fix=what,
    )


def _what_is_wrong(
    mine: list[int],
    partition: list[list[int]],
    size: int,
    world_size: int,
    rank: int,
    settings: dict[str, int | bool],
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
