"""Whether the ranks built the same data set for their ``DistributedSampler`` to divide.

Each map-style data set a training loader is built on leaves its size, a
fingerprint of a few of its items and, when small and stable, a short one
of every item (:func:`.probe_data.dataset_prints`). Data sets that differ
are a fault when the ranks seeded a generator differently before building
them, or when they hold the same items in other orders or selections; toy
data drawn at random on every rank from a generator nobody seeded (as
PyTorch's own examples make it) is only remarked on.
"""

from __future__ import annotations

from .judge_evidence import note_shown


def by_loader(ranks, key: str) -> dict[int, dict[int, list[dict]]]:
    """Each process's entries under ``key`` by loader number, then by rank."""
    groups: dict[int, dict[int, list[dict]]] = {}
    for r in ranks:
        for entry in getattr(r, key):
            groups.setdefault(entry["loader"], {}).setdefault(r.rank, []).append(entry)
    return groups


def difference(mine: dict, theirs: dict) -> str:
    """How two ranks' data sets differ, as their fingerprints show; "" if they do not."""
    if mine["size"] != theirs["size"]:
        return f"have {mine['size']} and {theirs['size']} items"
    for at in sorted(set(mine["items"]) & set(theirs["items"]), key=int):
        if mine["items"][at] and theirs["items"][at] and mine["items"][at] != theirs["items"][at]:
            return f"differ at item {at}"
    return ""


def _same_items_elsewhere(mine: dict, theirs: dict) -> tuple[int, int] | None:
    """How many of ``mine``'s items ``theirs`` holds too, and of how many, when that is at
    least a quarter of them (another order or selection of the same items); else None.

    Data sets drawn at random on each rank share no item; a split or shuffle
    of one source made differently on each rank shares most of them.

    >>> _same_items_elsewhere({"every": list("abcd")}, {"every": list("dcbx")})
    (3, 4)
    >>> _same_items_elsewhere({"every": list("abcd")}, {"every": list("wxyz")}) is None
    True
    """
    one, other = mine.get("every") or [], theirs.get("every") or []
    if not one or not other:
        return None
    held = set(other)
    shared = sum(item in held for item in one)
    return (shared, len(one)) if 4 * shared >= len(one) else None


def _seeded_apart(mine, theirs, loader: int) -> tuple[str, int | None]:
    """The seeds the two ranks gave differently before building ``loader``, and the first
    one's line; ("", None) if none."""
    def before(r):
        return [s for s in r.seeds if s["loaders"] < loader]

    apart = [
        (a, b) for a, b in zip(before(mine), before(theirs), strict=False)
        if (a["call"], a["value"]) != (b["call"], b["value"])
    ]  # fmt: skip
    if not apart:
        return "", None
    first = apart[0][0]
    calls = _listed([a["call"] for a, _ in apart[:3]])
    lines = sorted({a["line"] for a, _ in apart[:3]})
    where = f"line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))}"
    if first.get("caller") is not None and all(
        a.get("caller") == first["caller"] for a, _ in apart[:3]
    ):
        where += f", called from line {first['caller']}"
    values = {(a["value"], b["value"]) for a, b in apart[:3]}
    if len(values) == 1:
        mine_value, their_value = values.pop()
        said = (
            f"; before building it rank {mine.rank} seeded {calls} with {mine_value} "
            f"({where}) and rank {theirs.rank} with {their_value}"
        )
    else:
        a, b = apart[0]
        said = (
            f"; before building it rank {mine.rank} seeded {a['call']} with {a['value']} "
            f"(line {a['line']}) and rank {theirs.rank} {b['call']} with {b['value']} "
            f"(line {b['line']})"
        )
    return said, first["line"]


def _listed(names: list[str]) -> str:
    """Names in a sentence: "a", "a and b", "a, b and c"."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + f" and {names[-1]}"


def compare_data_sets(ranks, shown) -> list[str]:
    """Note a training loader whose DistributedSampler divides a different data set per rank.

    A FAULT when the ranks seeded a random generator differently before
    building it, or when they hold the same items in other orders or
    selections (a split or shuffle made apart on each rank); data drawn at
    random on each rank from a generator no line seeded (PyTorch's own
    examples make their toy data so) only add a remark to what was fine.
    """
    trained = {e["loader"] for r in ranks for e in r.loaders if e["trained"]}
    records = {r.rank: r for r in ranks}
    remarks = []
    for loader, per_rank in by_loader(ranks, "datasets").items():
        built = {rank: entries[0] for rank, entries in sorted(per_rank.items())}
        if loader not in trained or len(built) < 2:
            continue
        if any(e["sampler"] != "DistributedSampler" for e in built.values()):
            continue  # without the sampler a rank may hold a shard of its own
        (first, mine), *others = built.items()
        for rank, theirs in others:
            where = difference(mine, theirs)
            if not where:
                continue
            apart = f"rank {first}'s and rank {rank}'s data sets {where}"
            seeded, line = _seeded_apart(records[first], records[rank], loader)
            shared = _same_items_elsewhere(mine, theirs)
            if not seeded and shared:
                text = (
                    f"the ranks built different data sets ({apart.replace(' data sets', '')}) "
                    f"out of the same items (rank {rank}'s holds {shared[0]} of rank {first}'s "
                    f"{shared[1]}), so the parts the DistributedSampler "
                    "gives the ranks overlap and leave items out; every rank must build the "
                    "same data set: make any random split or shuffle of it the same on every "
                    "rank (a fixed seed or random_state), or make it once before the "
                    "processes start"
                )
                note_shown(shown, "data_division", text, mine.get("line"))
                break
            alike = _seeded_alike(records[first], records[rank], loader)
            if not seeded and alike is not None:
                note_shown(shown, "data_division", _split_twice(ranks, loader, apart, alike),
                           _sampler_line(ranks, loader) or mine.get("line"))  # fmt: skip
                break
            if not seeded:
                remarks.append(
                    f"{apart} (random data no line seeded): seed it the same on every rank "
                    "if they are to divide one data set"
                )
                break
            text = (
                f"the ranks built different data sets ({apart.replace(' data sets', '')})"
                f"{seeded}; every rank must build the same data set, and the "
                "DistributedSampler then gives each its part: seed the data's generation the "
                "same on every rank (one seed, not the rank), and any shuffle of it too"
            )
            note_shown(shown, "data_division", text, line)
            break
    return remarks


def _seeded_alike(mine, theirs, loader: int) -> str | None:
    """The lines of the seeds both ranks gave alike before building ``loader`` (then data
    that still differs depends on the rank itself), else None."""
    # (a seed of None draws from the system: Python's own reseeding at a fork is one)
    seeds = [
        [s for s in r.seeds if s["loaders"] < loader and s["value"] not in (None, "None")]
        for r in (mine, theirs)
    ]
    if not seeds[0] or [(s["call"], s["value"]) for s in seeds[0]] != [
        (s["call"], s["value"]) for s in seeds[1]
    ]:
        return None
    lines = sorted({s["line"] for s in seeds[0]})
    return f"line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines[:3]))}"


def _sampler_line(ranks, loader: int) -> int | None:
    """The line of the DistributedSampler of ``loader``'s first recorded epoch."""
    return next(
        (e.get("sampler_line") for r in ranks for e in r.loaders if e["loader"] == loader), None
    )


def _split_twice(ranks, loader: int, apart: str, seeded_at: str) -> str:
    """A DistributedSampler dividing a data set each rank built from a part of its own."""
    firsts = [next(e for e in r.loaders if e["loader"] == loader) for r in ranks]
    took = ", ".join(
        f"rank {r.rank}: {len(e['indices'])} of {e['size']}"
        for r, e in zip(ranks, firsts, strict=True)
    )
    return (
        f"the ranks built different data sets ({apart.replace(' data sets', '')}) though "
        f"they seeded their generators alike ({seeded_at}): what each holds depends on "
        "something else that differs by rank (a part split off by rank before the loader, "
        "or a generator no line seeded), and the DistributedSampler then divides each "
        f"rank's own data set again ({took} items): what a rank's sampler leaves out of it, "
        "no rank trains on. Give every rank the same whole data set and let the "
        "DistributedSampler divide it, or keep a split by hand without the sampler"
    )
