"""Why the ranks' training shares overlap: one rank told to every sampler, seeds or
epochs that differ by rank, in the first epoch or a later one (:mod:`.judge_data`).

Each function reads one loader's epoch as each rank recorded it
(``ProcessRecord.loaders`` entries, with the rank added).
"""

from __future__ import annotations

from collections import Counter

from .judge_evidence import ranks_text


def overlap(orders: list[list[int]]) -> set[int]:
    """Indices that more than one rank iterated."""
    seen = Counter(i for order in orders for i in set(order))
    return {i for i, n in seen.items() if n > 1}


def seeds_apart(first: list[dict]) -> bool:
    """True when the ranks' DistributedSamplers were given different shuffle seeds."""
    seeds = [e.get("seed") for e in first]
    shuffled = all(e.get("shuffle") for e in first)
    return shuffled and None not in seeds and len(set(seeds)) > 1


def told_alike(first: list[dict]) -> str:
    """DistributedSamplers told one rank (or a world of one) on every rank: the text, or ""."""
    told = [e.get("sampler_rank") for e in first]
    line = first[0].get("sampler_line")
    at = f" (line {line})" if line else ""
    if first[0]["sampler"] != "DistributedSampler" or None in told:
        return ""
    if {e.get("replicas") for e in first} == {1}:
        return (
            f"the DistributedSampler{at} was made with num_replicas=1 on every rank, so "
            "each takes the whole data set as its part; give it the world size (or leave "
            "num_replicas out: the sampler asks the group)"
        )
    if len(set(told)) < len(told):
        given = ", ".join(f"rank {e['rank']}: rank={t}" for e, t in zip(first, told, strict=True))
        return (
            f"the ranks' DistributedSamplers{at} were told the same rank ({given}), so they "
            "take the same part of the data; give each its own rank (rank=rank, or leave "
            "rank out: the sampler asks the group). A rank read from the environment with a "
            "default (RANK, LOCAL_RANK) is that default in every process mp.spawn starts: "
            "spawn sets neither"
        )
    return ""


def epochs_apart(first: list[dict]) -> str:
    """DistributedSamplers that shuffle, at different epochs on different ranks: the text."""
    epochs = [e.get("epoch") for e in first]
    if not all(e.get("shuffle") for e in first) or None in epochs or len(set(epochs)) < 2:
        return ""
    given = ", ".join(f"rank {e.get('rank', at)}: {e['epoch']}" for at, e in enumerate(first))
    return (
        f"the ranks' DistributedSamplers were at different epochs ({given}, as set_epoch "
        "gave them), and the epoch seeds the shuffle, so each rank shuffled the data set its "
        "own way before taking its part, and the parts overlap; give every rank the same "
        "epoch number (the training loop's epoch)"
    )


def overlap_line(first: list[dict], ranks) -> int | None:
    """The line that owns overlapping shares: the sampler's when it was given different
    seeds or told one rank everywhere, set_epoch's when the ranks' epochs differ."""
    if epochs_apart(first):
        mine = first[0]["sampler_id"]
        calls = [c for r in ranks[:1] for c in r.set_epochs if c["sampler_id"] == mine]
        return calls[0]["line"] if calls else None
    if seeds_apart(first) or told_alike(first):
        return first[0].get("sampler_line")
    return None


def overlap_text(first: list[dict], shared: set[int]) -> str:
    """What the ranks' overlapping training shards were: the whole data set each, or a part."""
    size, sampler = first[0]["size"], first[0]["sampler"]
    if all(set(e["indices"]) >= set(range(size or 0)) for e in first):
        told = told_alike(first)
        return (
            f"every rank iterated all {size} items of the training data "
            f"(overlap between ranks {100 * len(shared) // max(size or 1, 1)}%, "
            f"sampler: {sampler})" + (f": {told}" if told else "")
        )
    said = f"{len(shared)} training items went to more than one rank (sampler: {sampler})"
    told = told_alike(first)
    if told:
        return f"{said}: {told}"
    if seeds_apart(first):
        given = ", ".join(f"rank {e.get('rank', at)}: {e['seed']}" for at, e in enumerate(first))
        said += (
            f": the ranks gave their DistributedSamplers different seeds ({given}), so each "
            "shuffled the data set its own way before taking its part, and the parts overlap; "
            "give every rank the same seed (it is the shuffle's seed, not the rank's)"
        )
    elif epochs_apart(first):
        said += f": {epochs_apart(first)}"
    return said


def later_overlap(ranks, by_place, before: int) -> tuple[str, int | None] | None:
    """Shares that overlap in a later epoch more than in the first: the text and its line.

    The first epoch can be right while a later one is not: set_epoch called
    on some ranks only leaves their samplers at different epochs from then on.
    """
    trained = [[e for e in entries if e["trained"]] for entries in by_place]
    for t in range(1, min(len(entries) for entries in trained)):
        now = [{**entries[t], "rank": r.rank} for r, entries in zip(ranks, trained, strict=True)]
        shared = overlap([e["indices"] for e in now])
        if len(shared) <= before:
            continue
        said = f"in epoch {t} (not in epoch 0) {overlap_text(now, shared)}"
        calls = {
            r.rank: [c for c in r.set_epochs if c["sampler_id"] == e["sampler_id"]]
            for r, e in zip(ranks, now, strict=True)
        }
        callers = [rank for rank, own in calls.items() if own]
        if epochs_apart(now) and callers and len(callers) < len(calls):
            line = calls[callers[0]][0]["line"]
            never = [rank for rank, own in calls.items() if not own]
            given = ", ".join(f"rank {e['rank']}: {e['epoch']}" for e in now)
            said = (
                f"in epoch {t} (not in epoch 0) {len(shared)} training items went to more "
                f"than one rank: set_epoch (line {line}) ran on {ranks_text(callers)} only, "
                f"never on {ranks_text(never)}, so their DistributedSamplers were at different "
                f"epochs ({given}); the "
                "epoch seeds the shuffle, so the ranks shuffled the data differently and took "
                "overlapping parts. Call set_epoch(epoch) on every rank, at the top of each epoch"
            )
            return said, line
        return said, overlap_line(now, ranks) or now[0]["line"]
    return None
