"""What the timings come to: medians with their spread, and ratios between setups.

Each figure is summarised as a median with the minimum and maximum over
repeated timing windows or launches, and speed-ups are ratios of medians
taken in the same run. Absolute times depend on the machine and on
whatever else it is running; the ratios are what the course reads.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

#: A spread (max - min) above this share of the median is too wide to read a ratio from.
UNSTEADY = 0.25


def summarise(values: Iterable[float]) -> dict[str, float]:
    """Median, minimum and maximum of ``values``.

    >>> summarise([3.0, 1.0, 2.0, 10.0])
    {'median': 2.5, 'min': 1.0, 'max': 10.0}

    Raises:
        ValueError: ``values`` is empty.
    """
    values = list(values)
    if not values:
        raise ValueError("summarise needs at least one value, got none")
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def unsteady(rows: Sequence[dict], value: str, low: str = "min", high: str = "max") -> list[dict]:
    """The rows whose spread (``high - low``) is more than :data:`UNSTEADY` of ``value``.

    >>> unsteady([{"v": 10.0, "min": 9.0, "max": 11.0}, {"v": 10.0, "min": 5.0, "max": 20.0}], "v")
    [{'v': 10.0, 'min': 5.0, 'max': 20.0}]
    """
    return [r for r in rows if r[value] and (r[high] - r[low]) / r[value] > UNSTEADY]


def speedups(rows: Sequence[dict], baseline: str) -> list[dict]:
    """Each row's median samples/s divided by the baseline's with the same trial.

    Adds ``speedup`` and ``efficiency`` (speed-up divided by the world size:
    1.0 means every added rank contributed a full rank's worth).

    Args:
        rows: what :func:`.throughput.training` returned.
        baseline: the ``setup`` label to divide by, e.g. ``"DDP world 1"``.

    Raises:
        ValueError: no row has the ``baseline`` setup.

    >>> rows = [{"setup": "a", "trial": "t", "world_size": 1, "samples_per_s": 100.0},
    ...         {"setup": "b", "trial": "t", "world_size": 2, "samples_per_s": 190.0}]
    >>> [(r["speedup"], r["efficiency"]) for r in speedups(rows, "a")]
    [(1.0, 1.0), (1.9, 0.95)]
    """
    base = {r["trial"]: r["samples_per_s"] for r in rows if r["setup"] == baseline}
    if not base:
        labels = sorted({r["setup"] for r in rows})
        raise ValueError(f"no row has setup {baseline!r}; choose one of {labels}")
    out = []
    for row in rows:
        if row["trial"] in base:
            speedup = row["samples_per_s"] / base[row["trial"]]
            out.append({**row, "speedup": speedup, "efficiency": speedup / row["world_size"]})
    return out
