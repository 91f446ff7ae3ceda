"""The tables ``11_inside_ddp`` prints from its ranks' reports.

Formatting only, so the notebook's cells show DDP rather than print
statements: every number comes from a report a rank sent
(``workers/stage_11.py`` and ``workers/stage_11_knobs.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..reports import max_abs_difference, table


def all_reduce_counts(runs: Mapping[str, Sequence[Mapping]]) -> str:
    """All-reduces per watched step, one row per way of exchanging, as rank 0 counted them.

    >>> print(all_reduce_counts({"buckets": [{"all_reduces": {1: 2, 10: 2}}]}))
    all-reduces per step, as the ranks counted them
    exchange  step 1  step 10
    buckets        2        2
    """
    rows = [
        {"exchange": how, **{f"step {n}": count for n, count in ran[0]["all_reduces"].items()}}
        for how, ran in runs.items()
    ]
    return "all-reduces per step, as the ranks counted them\n" + table(rows, list(rows[0]))


def median_step_s(ran: Sequence[Mapping]) -> float:
    """Seconds per step: each rank's median over its unwatched steps; the slowest rank's.

    >>> median_step_s([{"step_s": [0.3, 0.1, 0.2]}, {"step_s": [0.25, 0.5, 0.1]}])
    0.25
    """
    return max(sorted(r["step_s"])[len(r["step_s"]) // 2] for r in ran)


def step_times(runs: Mapping[str, Sequence[Mapping]]) -> str:
    """Milliseconds per step of each way of exchanging (see :func:`median_step_s`).

    >>> print(step_times({"a": [{"step_s": [0.002]}], "b": [{"step_s": [0.001]}]}))
    a                  2.00 ms per step
    b                  1.00 ms per step
    quickest here: b
    """
    times = {how: median_step_s(ran) for how, ran in runs.items()}
    lines = [f"{how:16} {1e3 * seconds:6.2f} ms per step" for how, seconds in times.items()]
    return "\n".join([*lines, f"quickest here: {min(times, key=times.get)}"])


def _layout(buckets: Sequence[Sequence[int]] | None) -> str:
    """Buckets as parameter numbers.

    >>> _layout([[5, 4], [3]]), _layout(None)
    ('[5, 4] [3]', '-')
    """
    return " ".join(str(list(bucket)) for bucket in buckets) if buckets else "-"


def knob_findings(reports: Sequence[Mapping], model) -> str:
    """What ``workers/stage_11_knobs.py`` measured: buckets, gradient memory, buffers.

    Args:
        reports: the ranks' reports, each with ``buckets`` (cap: DDP's and
            ``Buckets``' layouts), ``storages`` (gradient_as_bucket_view: blocks
            of memory) and ``buffers`` (forward_sync_buffers: BatchNorm's
            running mean as each forward began).
        model: a model of the kind the worker trained, to name its parameters.
    """
    found = reports[0]
    names = [name for name, _ in model.named_parameters()]
    lines = ["parameter numbers: " + ", ".join(f"{n} {name}" for n, name in enumerate(names))]
    rows = [
        {
            "bucket_cap_mb": "default" if cap is None else f"{cap:g}",
            "DDP's buckets": _layout(theirs),
            "Buckets' buckets": _layout(ours),
        }
        for cap, (theirs, ours) in found["buckets"].items()
    ]
    lines.append(table(rows, list(rows[0])))
    for view, blocks in found["storages"].items():
        lines.append(
            f"gradient_as_bucket_view={view}: the {len(names)} gradients live in "
            f"{blocks} block(s) of memory"
        )
    for flag, seen in found["buffers"].items():
        gaps = [
            max_abs_difference([r["buffers"][flag][step] for r in reports])
            for step in range(len(seen))
        ]
        forwards = ", ".join(str(n) for n in range(1, len(seen) + 1))
        lines.append(
            f"forward_sync_buffers={flag}: running means apart by "
            + ", ".join(f"{g:.3g}" for g in gaps)
            + f" at forwards {forwards}"
        )
    return "\n".join(lines)
