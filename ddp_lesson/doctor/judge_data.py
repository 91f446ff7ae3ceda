"""What the run shows of dividing the data: the indices each rank iterated, compared.

From what each rank's ``DataLoader`` handed out, epoch by epoch: training
shards that overlap, padding that an evaluation counts twice, items no
rank saw, and epochs that repeat one order (``set_epoch`` never called,
called with one value, or called too late), else what each rank iterated.
"""

from __future__ import annotations

from collections import Counter

from .judge_evidence import note_shown


def _overlap(orders: list[list[int]]) -> set[int]:
    """Indices that more than one rank iterated."""
    seen = Counter(i for order in orders for i in set(order))
    return {i for i, n in seen.items() if n > 1}


def _unseen(first: list[dict], world: int) -> list[int]:
    """Items of the data set no rank iterated in an epoch, beyond what drop_last may leave out.

    ``first``: each rank's first epoch of one loader. DistributedSampler's
    ``drop_last`` leaves out fewer items than there are ranks, a DataLoader's
    ``drop_last`` what its last, short batch would have held (``dropped``).
    """
    size = first[0]["size"]
    if not size or len(first) < world:
        return []  # a rank that iterated nothing: nothing to say about coverage
    seen = {i for e in first for i in e["indices"]}
    unseen = sorted(set(range(size)) - seen)
    allowed = sum(e.get("dropped") or 0 for e in first)
    if first[0]["sampler"] == "DistributedSampler":
        allowed += (first[0].get("replicas") or world) - 1
    return unseen if len(unseen) > allowed else []


def _unseen_text(first: list[dict], unseen: list[int], world: int) -> str:
    size, sampler, replicas = first[0]["size"], first[0]["sampler"], first[0].get("replicas")
    seen = size - len(unseen)
    shown = ", ".join(map(str, unseen[:8])) + (" ..." if len(unseen) > 8 else "")
    text = (
        f"{len(unseen)} of the {size} training items were never seen by any rank in an "
        f"epoch: the {world} ranks together iterated {seen} (never seen: "
        f"{'indices' if len(unseen) > 1 else 'index'} {shown}), "
        "though their shards do not overlap"
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
        return f"{same}: set_epoch was never called", line
    values = sorted({c["epoch"] for c in calls}, key=str)
    if len(values) == 1 and len(calls) > 1:
        return (
            f"{same}: set_epoch is called with the same value, {values[0]!r}, every time "
            f"(line {calls[0]['line']}); pass it the epoch number, set_epoch(epoch)",
            calls[0]["line"],
        )
    at = next(i for i, e in enumerate(mine) if e is repeats[0])
    return (
        f"rank 0 iterated the same order in epoch {at - 1} and epoch {at} (the sampler's "
        f"epoch was still {repeats[0]['epoch']} when epoch {at} began): set_epoch is called "
        f"too late, at line {calls[0]['line']}, after the epoch's loop has iterated the "
        "loader; call set_epoch(epoch) before the loop over the loader, at the top of each "
        "epoch",
        calls[0]["line"],
    )


def data_verdict(ranks, shown, fine) -> None:
    epochs: dict[int, list[list[dict]]] = {}
    for at, r in enumerate(ranks):
        for entry in r.loaders:
            epochs.setdefault(entry["loader"], [[] for _ in ranks])[at].append(entry)
    notes = []
    for per_rank in epochs.values():
        per_rank = [e for e in per_rank if e]
        if len(per_rank) < 2:
            continue
        first = [e[0] for e in per_rank]
        size, line, sampler = first[0]["size"], first[0]["line"], first[0]["sampler"]
        trained = any(e["trained"] for entries in per_rank for e in entries)
        shared = _overlap([e["indices"] for e in first])
        counts = [len(e["indices"]) for e in first]
        padded = sampler == "DistributedSampler" and 0 < len(shared) < len(per_rank)
        if trained and shared and not padded:
            whole = all(set(e["indices"]) >= set(range(size or 0)) for e in first)
            text = (
                f"every rank iterated all {size} items of the training data "
                f"(overlap between ranks {100 * len(shared) // max(size or 1, 1)}%, "
                f"sampler: {sampler})"
                if whole
                else f"{len(shared)} training items went to more than one rank "
                f"(sampler: {sampler})"
            )
            note_shown(shown, "data_division", text, line)
            continue
        if not trained and padded:
            extra = sum(counts) - (size or 0)
            text = (
                f"the evaluation DataLoader (line {line}) hands out {sum(counts)} items "
                f"for {size}: DistributedSampler pads with {extra} repeated index(es) "
                f"{sorted(shared)}, so a metric summed over ranks counts them twice; "
                "evaluate without padding (e.g. the whole set on one rank)"
            )
            note_shown(shown, "data_division", text, line)
            continue
        unseen = _unseen(first, len(ranks))
        if trained and unseen:
            note_shown(shown, "data_division", _unseen_text(first, unseen, len(ranks)),
                 first[0].get("sampler_line") or line)  # fmt: skip
            continue
        # the epochs that trained: a look at one batch (next(iter(loader))) is no epoch
        mine = [e for e in per_rank[0] if e["trained"]] or per_rank[0]
        repeats = [
            e for e in mine[1:] if e["indices"] == mine[0]["indices"] and len(e["indices"]) > 1
        ]
        shuffled = mine[0].get("shuffle", True)
        if trained and sampler == "DistributedSampler" and repeats and shuffled:
            note_shown(shown, "data_division", *_repeated_order(mine, repeats, ranks, line))
            continue
        if trained:
            text = f"each rank iterated its own {counts[0]} of {size} training items" + (
                f" ({len(shared)} repeated as padding)" if shared else ", no overlap"
            )
            if len(mine) > 1:
                text += (
                    f"; a new order in each of {len(mine)} epochs"
                    if shuffled
                    else f"; the same order in each of {len(mine)} epochs (shuffle=False)"
                )
            notes.append(text)
    if notes:
        fine["data_division"] = "; ".join(notes)
