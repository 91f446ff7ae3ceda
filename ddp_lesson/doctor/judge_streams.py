"""What the run shows of dividing an ``IterableDataset``'s stream: the items each rank's
loader yielded.

The same items on several ranks (a stream not divided by rank), the same items
several times on one rank (loader workers that each stream the same records),
or one rank's stream ending batches before another's (steps DDP cannot match).
:func:`stream_notes` is called by :func:`.judge_data.data_verdict`.
"""

from __future__ import annotations

from collections import Counter

from .judge_data_sets import by_loader
from .judge_evidence import note_shown

#: Words of every finding that the ranks' loaders give different numbers of batches.
UNEVEN = "DDP needs the same number of steps on every rank"

#: How a stream that every rank received whole is named.
NOT_DIVIDED = "the stream is not divided among the ranks"


def _stream_ended_early(first: dict[int, dict]) -> str | None:
    """A rank whose stream ended after fewer batches than another rank's gave: the text."""
    ended = {rank: e["yielded"] for rank, e in first.items() if e.get("ended") and "yielded" in e}
    if not ended:
        return None
    shortest = min(ended, key=ended.get)
    counts = {r: e.get("yielded", 0) for r, e in first.items()}
    longer = {r: n for r, n in counts.items() if n > ended[shortest]}
    if not longer:
        return None
    rank, count = max(longer.items(), key=lambda item: item[1])
    more = f"{count}" if first[rank].get("ended") else f"at least {count}"
    return (
        f"rank {shortest}'s loader ran out after {ended[shortest]} batches in the first epoch, "
        f"while rank {rank}'s gave {more}: {UNEVEN}, so the rank with more batches meets "
        "its extra backward pass alone (it waits there, or its all-reduce meets another "
        "collective of the others' and fails). Give every rank as many batches, counted "
        "after whatever each rank filters or drops (equal shares, the remainder dropped), or "
        "train inside model.join()"
    )


def _split_fix(workers: int) -> str:
    by_worker = (
        " and of this loader worker (get_worker_info() gives its id and num_workers)"
        if workers > 1
        else ", and with num_workers > 0 only those of this loader worker too "
        "(get_worker_info())"
    )
    return (
        "; split the stream by rank and by loader worker: in __iter__, yield only the "
        f"items of this rank (e.g. every world_size-th item, starting at the rank){by_worker}, "
        "so that each item goes to one worker of one rank"
    )


def _repeated_text(rank: int, entry: dict, counts: Counter) -> str:
    times, workers = max(counts.values()), entry["workers"]
    each = "each of its items" if set(counts.values()) == {times} else "some items up to"
    repeats = sum(n - 1 for n in counts.values())
    return (
        f"rank {rank} received {each} {times} times in one epoch ({repeats} of the "
        f"{len(entry['items'])} items its loop received in {entry['batches']} batches were "
        f"repeats): its DataLoader has {workers} loader workers, __iter__ runs in each of "
        "them, and each streamed the same items" + _split_fix(workers)
    )


def stream_notes(ranks, shown) -> list[str]:
    """The items each rank's IterableDataset loaders yielded: faults noted, else what was fine."""
    notes = []
    for per_rank in by_loader(ranks, "streams").values():
        if not any(e["trained"] for entries in per_rank.values() for e in entries):
            continue  # a look at a batch, or an evaluation: no training data
        first = {
            rank: next((e for e in entries if e["trained"]), entries[0])
            for rank, entries in sorted(per_rank.items())
        }
        line = next(iter(first.values()))["line"]
        before = len(shown)
        for rank, entry in first.items():
            counts = Counter(entry["items"])
            repeats = sum(n - 1 for n in counts.values())
            # repeats as many as the loader has workers: every worker streamed the same items
            if entry["workers"] > 1 and max(counts.values(), default=1) <= entry["workers"] \
                    and repeats and 4 * repeats >= len(entry["items"]):  # fmt: skip
                note_shown(shown, "data_division", _repeated_text(rank, entry, counts), line)
                break
        uneven = _stream_ended_early(first)
        if uneven is not None and not any(e.get("join") for r in ranks for e in r.ddp):
            note_shown(shown, "data_division", uneven, line)
            continue
        held = Counter(i for entry in first.values() for i in set(entry["items"]))
        shared = {i for i, n in held.items() if n > 1}
        fewest = min(len(set(entry["items"])) for entry in first.values())
        if len(first) > 1 and shared and 4 * len(shared) >= fewest:
            holders = [rank for rank, entry in first.items() if shared & set(entry["items"])]
            named = ", ".join(map(str, holders[:-1])) + f" and {holders[-1]}"
            text = (
                f"ranks {named} received the same {len(shared)} of the {fewest} items "
                f"each loop received in the batches recorded: {NOT_DIVIDED}, so each trains "
                "on the same data"
            )
            workers = max(entry["workers"] for entry in first.values())
            note_shown(shown, "data_division", text + _split_fix(workers), line)
        if len(shown) == before and len(first) > 1 and fewest:
            sizes = sorted({len(entry["items"]) for entry in first.values()})
            recur = len(shared) + sum(len(e["items"]) - len(set(e["items"]))
                                      for e in first.values())  # fmt: skip
            notes.append(
                f"each rank received its own {'/'.join(map(str, sizes))} items from the "
                "IterableDataset's loader in the batches recorded, "
                + (f"{recur} of them more than once (as the data may hold them)" if recur
                   else "no item twice")
            )  # fmt: skip
    return notes
