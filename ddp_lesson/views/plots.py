"""Small matplotlib pictures of what the ranks reported.

Every function takes data that came from a real sampler or a real launch and
returns the matplotlib ``Figure``, so a notebook shows it and a saved
notebook keeps it for readers without a kernel.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from ..data import padding_of
from ..validate import rows_of_mappings, whole_number

#: One colour per rank, used by every picture of the course.
RANK_COLOURS = plt.get_cmap("tab10").colors


def partition_picture(partition: Sequence[Sequence[int]], size: int, title: str = "") -> Figure:
    """Draw which rank receives each data-set index, and in what order.

    One row per rank, one column per index. A filled cell means the rank gets
    that index; the number in it is when (0 = first). Indices that padding
    repeats are labelled in red below the grid, indices that ``drop_last``
    skipped in grey.

    Args:
        partition: ``partition[rank]`` is the list of indices that rank iterates.
        size: items in the data set.
        title: the figure's title.
    """
    whole_number("size", size, minimum=1)
    if not partition or isinstance(partition, str):
        raise ValueError("partition must be a list with one list of indices per rank")
    for rank, indices in enumerate(partition):
        bad = [
            i for i in indices if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < size
        ]
        if bad:
            raise ValueError(
                f"rank {rank}'s indices must be whole numbers from 0 to {size - 1}, got {bad}"
            )
    world_size = len(partition)
    marks = padding_of([list(p) for p in partition], size)
    fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * size + 1.2), 0.55 * world_size + 1.1))
    for rank, indices in enumerate(partition):
        for position, index in enumerate(indices):
            ax.add_patch(
                plt.Rectangle((index, rank), 1, 1, color=RANK_COLOURS[rank % 10], alpha=0.8)
            )
            ax.text(
                index + 0.5,
                rank + 0.5,
                str(position),
                ha="center",
                va="center",
                fontsize=8,
                color="white",
            )
    ax.set_xlim(0, size)
    ax.set_ylim(world_size, 0)
    ax.set_xticks(np.arange(size) + 0.5, [str(i) for i in range(size)], fontsize=8)
    ax.set_yticks(np.arange(world_size) + 0.5, [f"rank {r}" for r in range(world_size)])
    for index, label in enumerate(ax.get_xticklabels()):
        if index in marks["repeated"]:
            label.set_color("red")
            label.set_fontweight("bold")
        elif index in marks["dropped"]:
            label.set_color("grey")
    ax.set_xlabel("data-set index (red: repeated as padding, grey: dropped)")
    ax.set_title(title or "which rank gets each index (number = position in its order)")
    ax.set_aspect("equal")
    fig.tight_layout()
    plt.close(fig)
    return fig


def loss_curves(reports: Sequence[Mapping], key: str = "losses") -> Figure:
    """Plot each rank's mean training loss per epoch from its report."""
    reports = rows_of_mappings("reports", reports)
    missing = [r.get("rank") for r in reports if key not in r or "rank" not in r]
    if not reports or missing:
        raise ValueError(f"every report needs 'rank' and {key!r}; these ranks lack them: {missing}")
    fig, ax = plt.subplots(figsize=(5, 3))
    for report in reports:
        values = list(report[key])
        ax.plot(
            range(len(values)),
            values,
            marker="o",
            color=RANK_COLOURS[report["rank"] % 10],
            label=f"rank {report['rank']}",
        )
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean loss on this rank's shard")
    ax.legend()
    fig.tight_layout()
    plt.close(fig)
    return fig


def gradient_picture(
    reports: Sequence[Mapping], before: str = "own_grad", after: str = "synced_grad"
) -> Figure:
    """Plot every rank's output-layer bias gradient, before and after DDP's all-reduce.

    The last ten entries of a flattened ``NeuralNetwork`` gradient belong to
    the output layer's bias, one per digit class: small enough to read, and
    never zero, unlike the first layer's weights for the blank image border.
    """
    reports = rows_of_mappings("reports", reports)
    missing = [r.get("rank") for r in reports if before not in r or after not in r]
    if not reports or missing:
        raise ValueError(
            f"every report needs {before!r} and {after!r}; these ranks lack them: {missing}"
        )
    fig, axes = plt.subplots(1, 2, figsize=(8, 3), sharey=True)
    width = 0.8 / len(reports)
    titles = ((before, "own batch, before the all-reduce"), (after, "after DDP's all-reduce"))
    for ax, (key, title) in zip(axes, titles, strict=True):
        for n, report in enumerate(reports):
            values = report[key][-10:].numpy()
            ax.bar(
                np.arange(10) + n * width - 0.4 + width / 2,
                values,
                width,
                color=RANK_COLOURS[report["rank"] % 10],
                label=f"rank {report['rank']}",
            )
        ax.axhline(0, color="black", linewidth=0.5)
        ax.set_xticks(range(10))
        ax.set_title(title)
        ax.set_xlabel("digit class (output-layer bias)")
    axes[0].set_ylabel("gradient")
    axes[1].legend(loc="lower right")
    fig.tight_layout()
    plt.close(fig)
    return fig


def sync_picture(report: Mapping) -> Figure:
    """Plot how far apart the ranks were, step by step, with DDP and without it.

    Args:
        report: one rank's report from :func:`ddp_lesson.probes.sync_check`
            (the differences it holds were measured across all ranks).
    """
    keys = ("own_gap", "synced_gap", "plain_gap", "ddp_param_gap", "plain_param_gap")
    missing = [k for k in keys if k not in report]
    if missing:
        raise ValueError(f"the report needs {missing}: pass a report sent by probes.sync_check")
    steps = np.arange(1, len(report["synced_gap"]) + 1)
    fig, axes = plt.subplots(1, 2, figsize=(9, 3))
    lines = (
        (axes[0], "own_gap", "DDP model, own batch, before the all-reduce", "tab:orange", "s"),
        (axes[0], "synced_gap", "DDP model, after all-reduce", "tab:green", "o"),
        (axes[0], "plain_gap", "unwrapped model", "tab:red", "x"),
        (axes[1], "ddp_param_gap", "wrapped in DDP", "tab:green", "o"),
        (axes[1], "plain_param_gap", "unwrapped", "tab:red", "x"),
    )
    for ax, key, label, colour, marker in lines:
        ax.plot(steps, report[key], marker=marker, color=colour, label=label)
    axes[0].set_title("gradients: largest difference between ranks")
    axes[1].set_title("parameters after the step")
    for ax in axes:
        ax.set_xlabel("training step")
        ax.set_xticks(steps)
        ax.axhline(0, color="black", linewidth=0.5)
        ax.legend(fontsize=8)
    fig.tight_layout()
    plt.close(fig)
    return fig


def shards_picture(reports: Sequence[Mapping], size: int, key: str = "indices") -> Figure:
    """Draw which data-set indices each global rank trained on, grouped by node.

    One strip per rank, a tick for every index in its shard, coloured by the
    node the rank ran on; indices that padding repeats are marked in red on
    every rank that got them.

    Args:
        reports: the ranks' reports, each with ``rank``, ``node``,
            ``local_rank`` and the list of indices under ``key``.
        size: items in the data set.
        key: the report field that holds the indices.
    """
    reports = rows_of_mappings("reports", reports)
    whole_number("size", size, minimum=1)
    needed = ("rank", "node", "local_rank", key)
    missing = [r.get("rank") for r in reports if any(k not in r for k in needed)]
    if not reports or missing:
        raise ValueError(f"every report needs {list(needed)}; these ranks lack them: {missing}")
    shards = [[int(i) for i in r[key]] for r in reports]
    repeated = set(padding_of(shards, size)["repeated"])
    fig, ax = plt.subplots(figsize=(9, 0.5 * len(reports) + 1.2))
    for row, (report, shard) in enumerate(zip(reports, shards, strict=True)):
        colour = RANK_COLOURS[report["node"] % 10]
        ax.vlines(shard, row + 0.1, row + 0.9, color=colour, linewidth=0.4)
        extra = sorted(repeated & set(shard))
        ax.vlines(extra, row, row + 1, color="red", linewidth=2)
    ax.set_xlim(0, size)
    ax.set_ylim(len(reports), 0)
    ax.set_yticks(
        np.arange(len(reports)) + 0.5,
        [f"rank {r['rank']} (node {r['node']}, local {r['local_rank']})" for r in reports],
    )
    ax.set_xlabel(f"data-set index, 0 to {size - 1} (red: repeated as padding)")
    ax.set_title("each global rank's shard; colour = node")
    fig.tight_layout()
    plt.close(fig)
    return fig


# -- the benchmark's pictures ------------------------------------------------------------
def _axes(ax, size=(5.0, 3.2)):
    if ax is not None:
        return ax.figure, ax
    return plt.subplots(figsize=size)


def _done(fig, own: bool):
    if own:
        fig.tight_layout()
        plt.close(fig)
    return fig


def throughput_picture(rows: Sequence[dict], ax=None):
    """Samples per second against global batch, one line per setup, bars from min to max.

    Args:
        rows: what :func:`training` returned.
        ax: draw into this matplotlib axes instead of a new figure.
    """
    fig, axes = _axes(ax)
    setups = list(dict.fromkeys(r["setup"] for r in rows))
    for n, setup in enumerate(setups):
        mine = sorted((r for r in rows if r["setup"] == setup), key=lambda r: r["batch"])
        batches = [r["batch"] for r in mine]
        median = [r["samples_per_s"] for r in mine]
        spread = [
            [m - r["min"] for m, r in zip(median, mine, strict=True)],
            [r["max"] - m for m, r in zip(median, mine, strict=True)],
        ]
        axes.errorbar(
            batches,
            median,
            yerr=spread,
            marker="o",
            capsize=3,
            label=setup,
            color=RANK_COLOURS[n % 10],
        )
    return _throughput_done(fig, axes, ax)


def _throughput_done(fig, axes, ax):
    """Label a samples-per-second plot against the global batch, and finish it."""
    axes.set_xscale("log", base=2)
    axes.set_xlabel("global batch (all ranks together)")
    axes.set_ylabel("samples per second")
    axes.set_title("training throughput (median, min-max)")
    axes.legend(fontsize=8)
    return _done(fig, ax is None)


def scaling_picture(rows: Sequence[dict], ax=None):
    """Samples per second against global batch: world 1, world N, and N ranks alone; min-max bars.

    Args:
        rows: what :func:`ddp_lesson.bench.scaling` returned.
        ax: draw into this matplotlib axes instead of a new figure.
    """
    fig, axes = _axes(ax)
    world = rows[0]["world_size"]
    batches = [r["batch"] for r in rows]
    lines = (
        ("world1", 1, "world 1: one rank, the whole machine"),
        ("worldN", 1, f"world {world}"),
        ("alone", world, f"{world} x one rank alone (no exchange)"),
    )
    for n, (key, times, label) in enumerate(lines):
        median = [times * r[key] for r in rows]
        spread = [
            [times * (r[key] - r[f"{key}_min"]) for r in rows],
            [times * (r[f"{key}_max"] - r[key]) for r in rows],
        ]
        axes.errorbar(batches, median, yerr=spread, marker="o", capsize=3, label=label,
                      color=RANK_COLOURS[n % 10])  # fmt: skip
    return _throughput_done(fig, axes, ax)


def allreduce_picture(rows: Sequence[dict], ax=None):
    """Time of one ``all_reduce`` against tensor size, log-log: median with min-max, and minimum."""
    fig, axes = _axes(ax)
    sizes = [r["bytes"] for r in rows]
    median = [r["ms"] for r in rows]
    spread = [[r["ms"] - r["min_ms"] for r in rows], [r["max_ms"] - r["ms"] for r in rows]]
    axes.errorbar(sizes, median, yerr=spread, marker="o", capsize=3, color="tab:blue",
                  label="median, min-max")  # fmt: skip
    axes.plot(sizes, [r["min_ms"] for r in rows], marker="s", color="tab:green",
              label="minimum: what a call costs")  # fmt: skip
    axes.legend(fontsize=8)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xticks(sizes, [r["size"] for r in rows], rotation=45, fontsize=8)
    axes.set_xlabel("tensor size")
    axes.set_ylabel("ms per all_reduce")
    axes.set_title("all_reduce between the ranks (median, min-max)")
    return _done(fig, ax is None)


def startup_picture(rows: Sequence[dict], ax=None):
    """One horizontal bar per launch stage: median seconds, with min to max."""
    fig, axes = _axes(ax)
    stages = [r for r in rows if r["stage"] != "total"]
    names = [r["stage"] for r in stages]
    median = [r["median"] for r in stages]
    spread = [[r["median"] - r["min"] for r in stages], [r["max"] - r["median"] for r in stages]]
    axes.barh(names, median, xerr=spread, capsize=3, color="tab:grey")
    axes.invert_yaxis()
    axes.set_xlabel("seconds")
    axes.set_title("where a small DDP launch spends its time")
    return _done(fig, ax is None)
