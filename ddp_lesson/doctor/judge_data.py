"""What the run shows of dividing the data: what each rank consumed, compared.

From what each rank's ``DataLoader`` handed out, epoch by epoch: training
shards that overlap, padding that an evaluation counts twice, items no
rank saw, and epochs that repeat one order (``set_epoch`` never called,
called with one value, or called too late), else what each rank iterated.
For an ``IterableDataset``, :mod:`.judge_streams` judges the items its
loader yielded. Whether the ranks built the same data set for a
``DistributedSampler`` to divide is :mod:`.judge_data_sets`' question.
"""

from __future__ import annotations

from .judge_data_sets import by_loader, compare_data_sets, difference
from .judge_evidence import Judged, Shown, note_shown
from .judge_overlap import (
    later_overlap,
    overlap,
    overlap_line,
    overlap_text,
)
from .judge_streams import stream_notes


def _unseen(first: list[dict], world: int) -> list[int]:
    """Items of the data set no rank iterated in an epoch, beyond what drop_last may leave out.

    ``first``: each rank's first epoch of one loader. DistributedSampler's
    ``drop_last`` leaves out fewer items than there are ranks, a DataLoader's
    ``drop_last`` what its last, short batch would have held (``dropped``);
    a sampler of the script's own may do as DistributedSampler's ``drop_last``
    does: equal shares, and exactly the remainder of the size by the world left out.
    """
    size = first[0]["size"]
    if not size or len(first) < world:
        return []  # a rank that iterated nothing: nothing to say about coverage
    seen = {i for e in first for i in e["indices"]}
    unseen = sorted(set(range(size)) - seen)
    allowed = sum(e.get("dropped") or 0 for e in first)
    if first[0]["sampler"] == "DistributedSampler":
        allowed += (first[0].get("replicas") or world) - 1
    elif len({len(e["indices"]) for e in first}) == 1 and len(unseen) == size % world:
        allowed += size % world  # equal shares, the remainder left out (as drop_last does)
    return unseen if len(unseen) > allowed else []


def _unseen_text(first: list[dict], unseen: list[int], world: int, shared: bool = False) -> str:
    size, sampler, replicas = first[0]["size"], first[0]["sampler"], first[0].get("replicas")
    seen = size - len(unseen)
    shown = ", ".join(map(str, unseen[:8])) + (" ..." if len(unseen) > 8 else "")
    text = (
        f"{len(unseen)} of the {size} training items were never seen by any rank in an "
        f"epoch: the {world} ranks together iterated {seen} (never seen: "
        f"{'indices' if len(unseen) > 1 else 'index'} {shown})"
        + ("" if shared else ", though their shards do not overlap")
    )
    if sampler == "DistributedSampler" and replicas and replicas != world:
        return text + (
            f"; the DistributedSampler was made with num_replicas={replicas} for a world of "
            f"{world} ranks, so the shards of the {replicas - world} rank(s) that do not "
            "exist are never trained on; leave num_replicas and rank out (the group gives "
            "them) or pass the world size"
        )
    return text + "; each epoch must cover the data set once, divided among the ranks"


def _repeated_order(mine, repeats, ranks, line) -> tuple[str, int | None]:
    """Why epochs repeated one order, and the line that owns it: set_epoch never called,
    called with one value, or called too late (after the epoch's loop)."""
    owner = next((r for r in ranks if any(e is mine[0] for e in r.loaders)), None)
    sampler = mine[0].get("sampler_id")
    calls = [c for c in (owner.set_epochs if owner else []) if c.get("sampler_id") == sampler]
    same = (
        f"rank 0 iterated the same order in epoch 0 and the next {len(repeats)} epoch(s) "
        f"(sampler epoch stayed {repeats[0]['epoch']})"
    )
    if not calls:
        others = [c for c in (owner.set_epochs if owner else [])]
        if others:
            return (
                f"{same}: set_epoch was called (line {others[0]['line']}), but on another "
                "sampler than the one this DataLoader draws from (the loader's sampler was "
                f"made at line {mine[0].get('sampler_line') or line}); call set_epoch on the "
                "loader's own sampler (loader.sampler.set_epoch(epoch))",
                others[0]["line"],
            )
        return f"{same}: set_epoch was never called", line
    values = sorted({c["epoch"] for c in calls}, key=str)
    if len(values) == 1 and len(calls) > 1:
        return (
            f"{same}: set_epoch is called with the same value, {values[0]!r}, every time "
            f"(line {calls[0]['line']}); pass it the epoch number, set_epoch(epoch)",
            calls[0]["line"],
        )
    at = next(i for i, e in enumerate(mine) if e is repeats[0])
    value = repeats[0]["epoch"]
    if at and mine[at - 1].get("epoch") != value:  # set before this epoch, to an old value
        return (
            f"rank 0 iterated the same order in epoch 0 and epoch {at}: before epoch {at}, "
            f"set_epoch (line {calls[0]['line']}) was given {value!r} again, a value an "
            "earlier epoch had (epoch numbers that start again, as in a second phase or a "
            "resumed run), and the same value gives the same order; pass a number that "
            "keeps counting over the whole run",
            calls[0]["line"],
        )
    return (
        f"rank 0 iterated the same order in epoch {at - 1} and epoch {at} (the sampler's "
        f"epoch was still {repeats[0]['epoch']} when epoch {at} began): set_epoch is called "
        f"too late, at line {calls[0]['line']}, after the epoch's loop has iterated the "
        "loader; call set_epoch(epoch) before the loop over the loader, at the top of each "
        "epoch",
        calls[0]["line"],
    )


def data_verdict(ranks) -> Judged:
    """What the run showed about dividing the data: its faults, else what each rank got."""
    shown: list[Shown] = []  # (the helpers below add what they find)
    disproved: list[str] = []
    notes = _index_notes(ranks, shown, disproved) + stream_notes(ranks, shown)
    for loader, per_rank in by_loader(ranks, "datasets").items():
        samplers = {e["sampler"] for entries in per_rank.values() for e in entries}
        if "DistributedSampler" not in samplers and _own_data_sets(ranks, loader):
            disproved.append("data_division")  # split by hand: not every rank reads it all
    remarks = compare_data_sets(ranks, shown)
    said = dict.fromkeys(notes + remarks)  # (a loader built anew each epoch says it each time)
    fine = {"data_division": "; ".join(said)} if notes else {}
    return Judged(tuple(shown), tuple(fine.items()), disproved=tuple(disproved))


#: Collectives that combine what each rank holds: a metric summed (or gathered) over ranks.
COMBINING = frozenset(
    {"all_reduce", "reduce", "all_gather", "all_gather_into_tensor", "all_gather_object",
     "gather", "gather_object", "reduce_scatter", "reduce_scatter_tensor"}
)  # fmt: skip


def _summed_after(ranks, by_place: list[list[dict]]) -> bool:
    """Whether some rank combined values over the ranks (``all_reduce``...) after one of
    these loader's epochs began: what a padded evaluation counts twice must be summed."""
    for r, entries in zip(ranks, by_place, strict=True):
        for e in entries:
            later = r.collectives[e.get("collectives", 0) :]
            if any(c["op"] in COMBINING for c in later):
                return True
    return False


def _own_data_sets(ranks, loader: int) -> bool:
    """Whether the ranks' data sets behind ``loader`` differ (each holds a shard of its own)."""
    built = [entries[0] for entries in by_loader(ranks, "datasets").get(loader, {}).values()]
    return len(built) > 1 and any(difference(built[0], other) for other in built[1:])


def _subsets_overlap(ranks, loader: int) -> str | None:
    """The fault of ranks whose Subsets of one data set share items or leave some out."""
    built = [entries[0] for entries in by_loader(ranks, "datasets").get(loader, {}).values()]
    if len(built) < 2 or any("positions" not in b for b in built):
        return None
    if any(difference(built[0]["base"], b["base"]) for b in built[1:]):
        return None  # subsets of different data sets: nothing to compare by position
    sets = [set(b["positions"]) for b in built]
    shared = set().union(*(a & b for i, a in enumerate(sets) for b in sets[i + 1 :]))
    size = built[0]["base"]["size"]
    missed = size - len(set().union(*sets)) if isinstance(size, int) else 0
    if not shared and missed < len(sets):  # (fewer than one per rank: a remainder dropped)
        return None
    return (
        f"each rank trains on a Subset of the same data set of {size} items, and the "
        f"ranks' subsets share {len(shared)} item(s) and leave {max(missed, 0)} out: their "
        "index lists must split the data set between them, each item to one rank (one "
        "order the same on every rank, the same seed, cut by rank), or give the whole data "
        "set to a DistributedSampler"
    )


def _own_shards(
    first: list[dict], trained: bool, joined: bool = False
) -> str | tuple[str, int | None] | None:
    """Data split by hand before the loader: what was fine, or the fault of uneven batches.

    DDP needs every rank to take the same number of steps: a rank with more
    batches waits in its extra backward pass for ranks that have finished,
    unless the ranks train inside ``join()`` (``joined``), which lets them.
    """
    if not trained:
        return None
    sizes = [e["size"] for e in first]
    batches = [e["batches"] for e in first]
    held = ", ".join(f"rank {rank}: {n}" for rank, n in enumerate(sizes))
    if len(set(batches)) > 1 and joined:
        per = ", ".join(f"rank {rank}: {n}" for rank, n in enumerate(batches))
        return (
            f"each rank iterated a data set of its own (split by hand before the loader; "
            f"items {held}), with different numbers of batches per epoch ({per}), inside "
            "join(), which lets the ranks that finish first wait for the others"
        )
    if len(set(batches)) > 1:
        per = ", ".join(f"rank {rank}: {n}" for rank, n in enumerate(batches))
        return (
            f"each rank trains on a data set of its own (split by hand before the loader; "
            f"items {held}), and their loaders give different numbers of batches per epoch "
            f"({per}): DDP needs the same number of steps on every rank, so the rank with "
            "more batches makes an extra backward pass that the others never match "
            "(it hangs, or fails on whatever collective they make instead). Split into equal "
            "shards (drop the remainder), or give the whole data set to a DistributedSampler",
            first[0]["line"],
        )
    return (
        f"each rank iterated a data set of its own (split by hand before the loader; items "
        f"{held}), {batches[0]} batches per epoch on every rank"
    )


def _padded(first: list[dict], shared: set[int], size, ranks: int) -> bool:
    """True when the items seen twice are padding, as DistributedSampler pads, whatever the
    sampler: equal shares that cover every item, fewer repeats than ranks."""
    counts = [len(e["indices"]) for e in first]
    covered = set().union(*(e["indices"] for e in first))
    return (
        0 < len(shared) < ranks
        and len(set(counts)) == 1
        and isinstance(size, int)
        and len(covered) == size
        and sum(counts) - size < ranks
    )


def _with_replacement(first: list[dict]) -> bool:
    """Whether each rank's epoch repeats items of its own (a sampler that draws with
    replacement); DistributedSampler never does."""
    return first[0]["sampler"] != "DistributedSampler" and all(
        len(set(e["indices"])) < len(e["indices"]) for e in first
    )


def _draws(first: list[dict], shown: list[Shown]) -> list[str]:
    """Ranks whose samplers draw with replacement: the same draws on every rank (shown), or
    what each drew (a note)."""
    sampler = first[0]["sampler"]
    if all(e["indices"] == first[0]["indices"] for e in first[1:]):
        note_shown(shown, "data_division", (
            f"every rank drew the same {len(first[0]['indices'])} items in the same order "
            f"(sampler: {sampler}, with replacement), so each trains on the same batches; "
            "give each rank its own draws (its own part of one draw, or a seed that differs "
            "by rank for the draw only)"
        ), first[0]["line"])  # fmt: skip
        return []
    counts = "/".join(map(str, sorted({len(e["indices"]) for e in first})))
    return [
        f"each rank drew its own {counts} items with replacement (sampler: {sampler}), so "
        "items recur within a rank's share as across the ranks'; the ranks' draws differ"
    ]


def _padded_text(line, counts: list[int], size, shared: set[int]) -> str:
    """An evaluation loader whose DistributedSampler repeats items to pad the ranks' shares."""
    extra = sum(counts) - (size or 0)
    return (
        f"the evaluation DataLoader (line {line}) hands out {sum(counts)} items "
        f"for {size}: DistributedSampler pads with {extra} repeated index(es) "
        f"{sorted(shared)}, so a metric summed over ranks counts them twice; "
        "evaluate without padding (e.g. the whole set on one rank)"
    )


def _by_place(ranks) -> dict[int, list[list[dict]]]:
    """Each loader's epochs (by the loader's place in the script), as each rank recorded them."""
    epochs: dict[int, list[list[dict]]] = {}
    for at, r in enumerate(ranks):
        for entry in r.loaders:
            epochs.setdefault(entry["loader"], [[] for _ in ranks])[at].append(entry)
    return epochs


def _index_notes(ranks, shown, disproved) -> list[str]:
    """The indices each rank's map-style loaders iterated: faults noted, else what was fine.

    A loader over data split by hand (the ranks' data sets differ) puts the
    stage in ``disproved``: the code's guess that every rank iterates the
    whole data set is wrong.
    """
    notes = []
    for by_place in _by_place(ranks).values():
        per_rank = [e for e in by_place if e]
        if len(per_rank) < 2:
            continue
        first = [{**e[0], "rank": r.rank} for r, e in zip(ranks, by_place, strict=True) if e]
        size, line, sampler = first[0]["size"], first[0]["line"], first[0]["sampler"]
        trained = any(e["trained"] for entries in per_rank for e in entries)
        joined = any(e.get("join") for r in ranks for e in r.ddp)  # uneven steps are allowed
        if sampler != "DistributedSampler" and _own_data_sets(ranks, first[0]["loader"]):
            # (the code's guess, that each rank iterates the whole data set, is wrong)
            disproved.append("data_division")
            notes += _split_by_hand(ranks, first, trained, joined, shown)
            continue
        shared = overlap([e["indices"] for e in first])
        counts = [len(e["indices"]) for e in first]
        if trained and shared and _with_replacement(first):
            # items recur within each rank's share too: a draw, not a division of the items
            notes += _draws(first, shown)
            continue
        padded = _padded(first, shared, size, len(per_rank))
        unseen = _unseen(first, len(ranks))
        # a padding's few repeats beside many items unseen: the unseen items are the fault
        if trained and shared and not padded and not (unseen and len(shared) < len(first)):
            at = overlap_line(first, ranks)
            note_shown(shown, "data_division", overlap_text(first, shared), at or line)
            continue
        if not trained and padded and _summed_after(ranks, by_place):
            note_shown(shown, "data_division", _padded_text(line, counts, size, shared), line)
            continue
        if trained and unseen:
            said = _unseen_text(first, unseen, len(ranks), bool(shared))
            note_shown(shown, "data_division", said,
                 first[0].get("sampler_line") or line)  # fmt: skip
            continue
        later = later_overlap(ranks, by_place, len(shared)) if trained else None
        if later is not None:
            note_shown(shown, "data_division", *later)
            continue
        mine, repeats, shuffled = _repeats(per_rank[0])
        if trained and sampler == "DistributedSampler" and repeats and shuffled:
            note_shown(shown, "data_division", *_repeated_order(mine, repeats, ranks, line))
            continue
        if trained:
            uneven = None if joined else _uneven_steps(per_rank)
            if uneven is not None:
                note_shown(shown, "data_division", uneven, line)
                continue
            cut = first[0].get("dropped") or 0
            notes.append(_shares_text(counts, size, shared, len(mine), shuffled, sampler, cut))
    return notes


def _repeats(entries: list[dict]) -> tuple[list[dict], list[dict], bool]:
    """One rank's epochs that trained, those that repeat its first epoch's order, and
    whether its loader shuffles (or its epochs' orders differ anyway)."""
    # the epochs that trained: a look at one batch (next(iter(loader))) is no epoch
    mine = [e for e in entries if e["trained"]] or entries
    repeats = [e for e in mine[1:] if e["indices"] == mine[0]["indices"] and len(e["indices"]) > 1]
    return mine, repeats, mine[0].get("shuffle", True) or len(repeats) < len(mine) - 1


def _split_by_hand(ranks, first: list[dict], trained: bool, joined: bool, shown) -> list[str]:
    """Loaders over data sets of each rank's own: a fault noted in ``shown``, or what was fine.

    Subsets of one data set are compared by position (:func:`_subsets_overlap`);
    shards of their own, by the batches they give (:func:`_own_shards`).
    """
    line = first[0]["line"]
    picked = _subsets_overlap(ranks, first[0]["loader"]) if trained else None
    if picked is not None:
        note_shown(shown, "data_division", picked, line)
        return []
    own = _own_shards(first, trained, joined)  # different data sets: no overlap
    if isinstance(own, str):
        return [own]
    if own is not None:
        note_shown(shown, "data_division", *own)
    return []


def _uneven_steps(per_rank: list[list[dict]]) -> str | None:
    """Ranks whose loaders give different numbers of batches in an epoch (with no join()).

    DDP needs every rank to take the same number of steps: the rank with more
    batches waits in its extra backward pass for ranks that have finished.
    """
    firsts = [entries[0] for entries in per_rank]
    batches = [e["batches"] for e in firsts]
    if len(set(batches)) < 2:
        return None
    per = ", ".join(f"rank {rank}: {n}" for rank, n in enumerate(batches))
    drops = {bool(e.get("dropped")) for e in firsts}
    why = " (drop_last differs from rank to rank)" if len(drops) > 1 else ""
    return (
        f"the ranks' loaders give different numbers of batches in an epoch ({per}){why}: "
        "DDP needs the same number of steps on every rank, so the rank with more batches "
        "makes an extra backward pass that the others never match (it hangs, or fails on "
        "whatever collective they make instead). Give every rank the same number of batches "
        "(the same drop_last and batch size everywhere), or train inside model.join()"
    )


def _shares_text(
    counts: list[int], size, shared: set[int], epochs: int, shuffled: bool, sampler: str,
    dropped: int = 0,
) -> str:
    """What was fine: each rank's own share, and a new order in each epoch (or none asked).

    ``counts``: the items each rank iterated; ``sampler``: its class's name (torch's own
    say in ``shuffle`` whether they shuffle); ``dropped``: the items of a rank's share its
    DataLoader's ``drop_last`` left out.
    """
    known = sampler in ("DistributedSampler", "RandomSampler", "SequentialSampler")
    count = counts[0]
    if len(set(counts)) > 1:  # shares of different sizes (a sampler that pads nothing)
        each = ", ".join(f"rank {rank}: {n}" for rank, n in enumerate(counts))
        got = f"each rank's sampler gave it its own share of {size} training items ({each})"
    elif dropped:
        got = (
            f"each rank's sampler gave it its own {count + dropped} of {size} training items, "
            f"{count} of them in full batches (drop_last)"
        )
    else:
        got = f"each rank's sampler gave it its own {count} of {size} training items"
    text = got + (f" ({len(shared)} repeated as padding)" if shared else ", no overlap")
    if epochs > 1:
        text += (
            f"; a new order in each of {epochs} epochs the doctor ran"
            if shuffled
            else f"; the same order in each of {epochs} epochs the doctor ran"
            + (" (shuffle=False)" if known else "")
        )
    return text
