"""The overlap view: one training step of every rank on a time axis, from the ranks' own clocks.

``11_inside_ddp`` builds DDP by hand. Its worker (``workers/stage_11.py``)
notes, in every rank, when the backward pass started, when each gradient
became ready and when each all-reduce started and ended. This view launches
that worker for real and draws what the ranks reported: each layer's share
of backward and each all-reduce on one time axis per rank, so a learner
sees how much of the exchange overlaps the computation.

Nothing drawn here is computed by the view: every bar starts and ends at a
moment a rank measured.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence

import ipywidgets as ipw
import matplotlib.pyplot as plt
from IPython.display import HTML
from matplotlib.figure import Figure

from .. import launch
from .base import (
    View,
    counted,
    html_block,
    number_box,
    parse_world_size,
    planned_world_size,
    quoted,
)
from .plots import RANK_COLOURS

#: How a launch of the worker exchanges gradients (its ``how`` argument).
HOWS = ("per parameter", "buckets", "DDP")

#: The largest bucket, in MB, the view accepts (the lesson's model has about 1.15 MB).
MAX_BUCKET_MB = 1024.0

#: Examples per rank in each step the view's launch trains.
BATCH_SIZE = 32


def size_text(size: int) -> str:
    """A number of bytes as a reader takes it in.

    >>> [size_text(n) for n in (40, 20480, 1071144, 5 * 2**20)]
    ['40 B', '20 KB', '1046 KB', '5.0 MB']
    """
    if size < 1024:
        return f"{size} B"
    if size < 4 * 2**20:
        return f"{size / 1024:.0f} KB"
    return f"{size / 2**20:.1f} MB"


def layer_of(name: str) -> str:
    """The module a parameter belongs to: its name without the last part.

    >>> layer_of("linear_relu_stack.4.weight")
    'linear_relu_stack.4'
    """
    return name.rsplit(".", 1)[0]


def ready_order(timeline: Mapping) -> list[str]:
    """The parameters in the order their gradients became ready, by the rank's timestamps.

    >>> ready_order({"ready": {"a.weight": 0.3, "b.bias": 0.1, "b.weight": 0.2}})
    ['b.bias', 'b.weight', 'a.weight']
    """
    ready = timeline["ready"]
    return sorted(ready, key=lambda name: ready[name])


def layer_spans(timeline: Mapping) -> list[tuple[str, float, float]]:
    """Each layer's share of backward as ``(layer, start, end)`` seconds, in the order computed.

    A layer's span ends when the last of its gradients was ready and starts
    where the previous layer's ended (the first starts when backward began).

    >>> layer_spans({"backward": 1.0, "ready": {"b.w": 3.0, "a.w": 4.0, "b.b": 2.0}})
    [('b', 1.0, 3.0), ('a', 3.0, 4.0)]
    """
    ends: dict[str, float] = {}
    for name, moment in timeline["ready"].items():
        layer = layer_of(name)
        ends[layer] = max(ends.get(layer, moment), moment)
    spans, start = [], timeline["backward"]
    for layer, end in sorted(ends.items(), key=lambda item: item[1]):
        spans.append((layer, start, end))
        start = end
    return spans


def overlap(timeline: Mapping) -> dict:
    """What one rank's step shows about its all-reduces and its backward pass.

    Returns:
        ``all_reduces`` (how many), ``sizes`` (bytes of each),
        ``started_in_backward`` (how many began before the last gradient was
        ready), ``exchange_s`` (their summed duration), ``overlapped_s``
        (the part of it inside backward) and ``share`` (the ratio).

    >>> facts = overlap({"backward": 0.0, "ready": {"a.w": 2.0},
    ...                  "all_reduces": [(1.0, 3.0, 10), (2.0, 2.5, 5)]})
    >>> facts["started_in_backward"], facts["overlapped_s"], facts["share"]
    (1, 1.0, 0.4)
    """
    begin, end = timeline["backward"], max(timeline["ready"].values())
    exchanges = timeline["all_reduces"]
    total = sum(stop - start for start, stop, _ in exchanges)
    inside = sum(max(0.0, min(stop, end) - max(start, begin)) for start, stop, _ in exchanges)
    return {
        "all_reduces": len(exchanges),
        "sizes": [size for _, _, size in exchanges],
        "started_in_backward": sum(start < end for start, _, _ in exchanges),
        "exchange_s": total,
        "overlapped_s": inside,
        "share": inside / total if total else 0.0,
    }


def _check_reports(reports: Sequence[Mapping]) -> None:
    missing = [r.get("rank") for r in reports if "timeline" not in r or "rank" not in r]
    if not reports or missing:
        raise ValueError(
            "every report needs 'rank' and 'timeline' (what workers/stage_11.py sends); "
            f"these ranks lack them: {missing}"
        )


def shared_clock(reports: Sequence[Mapping]) -> bool:
    """Whether every rank timed its step on the one CPU clock all processes share."""
    return all(isinstance(r["timeline"].get("origin"), float) for r in reports)


def offsets(reports: Sequence[Mapping]) -> dict[int, float]:
    """Where each rank's step began on a shared time axis, in seconds after the earliest.

    On the CPU every rank's ``origin`` is a reading of one clock that all
    processes of a machine share (``time.perf_counter``), so the ranks can
    be drawn on one axis. A GPU's CUDA events only time a rank against
    itself; then (``origin`` missing or ``None``) every rank starts at 0.

    >>> offsets([{"rank": 0, "timeline": {"origin": 5.0}},
    ...          {"rank": 1, "timeline": {"origin": 5.25}}])
    {0: 0.0, 1: 0.25}
    """
    origins = {r["rank"]: r["timeline"].get("origin") for r in reports}
    if not shared_clock(reports):
        return dict.fromkeys(origins, 0.0)
    first = min(origins.values())
    return {rank: origin - first for rank, origin in origins.items()}


def overlap_picture(reports: Sequence[Mapping], title: str = "") -> Figure:
    """Draw one step of every rank: its forward, each layer's backward and each all-reduce.

    Two lanes per rank: *compute* (forward in grey, then one bar per layer
    of backward, last layer first) and *all-reduce* (one bar per all-reduce,
    from the moment it started to the moment it ended; all-reduces in flight
    together are drawn one above the other). Every bar is a rank's own
    measurement, in milliseconds on one axis for all ranks where their
    clocks allow it (see :func:`offsets`); a dotted line marks where the
    rank's optimizer step ended.

    Args:
        reports: the ranks' reports, each with ``rank`` and ``timeline``.
        title: the figure's title (default: the share of all-reduce time
            that overlapped backward, per rank).
    """
    _check_reports(reports)
    fig, ax = plt.subplots(figsize=(10, 1.1 * len(reports) + 1.6))
    layers = sorted({layer_of(n) for r in reports for n in r["timeline"]["ready"]})
    colours = {layer: plt.get_cmap("Set2").colors[n % 8] for n, layer in enumerate(layers)}
    ticks, labels, shares = [], [], []
    shift = offsets(reports)
    for row, report in enumerate(reports):
        rank, timeline = report["rank"], report["timeline"]
        lane = 2 * row
        _draw_rank(ax, lane, rank, timeline, shift[rank], colours)
        ticks += [lane, lane + 1]
        labels += [f"rank {rank}: compute", f"rank {rank}: all-reduce"]
        shares.append(f"rank {rank} {overlap(timeline)['share']:.0%}")
    _label_overlap_axes(ax, reports, layers, colours, ticks, labels)
    ax.set_title(
        title or "one training step; share of all-reduce time inside backward: " + ", ".join(shares)
    )
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    plt.close(fig)
    return fig


#: The outline of every bar of :func:`overlap_picture`.
_EDGE = {"edgecolor": "black", "linewidth": 0.4}


def _draw_rank(
    ax, lane: int, rank: int, timeline: Mapping, offset: float, colours: Mapping
) -> None:
    """Draw one rank's compute lane, its all-reduce lane below, and where its step ended."""

    def ms(seconds: float) -> float:
        return 1e3 * (seconds + offset)

    (bar,) = ax.barh(
        lane, 1e3 * timeline["backward"], left=ms(0), height=0.7, color="0.85", **_EDGE
    )
    bar.set_gid(f"rank{rank}-forward")
    for layer, start, end in layer_spans(timeline):
        (bar,) = ax.barh(
            lane, 1e3 * (end - start), left=ms(start), height=0.7, color=colours[layer], **_EDGE
        )
        bar.set_gid(f"rank{rank}-backward-{layer}")
    rows = min(3, len(timeline["all_reduces"])) or 1  # in flight together: stacked
    for n, (start, end, size) in enumerate(timeline["all_reduces"]):
        middle = lane + 1 + 0.8 * ((n % rows + 0.5) / rows - 0.5)
        (bar,) = ax.barh(
            middle,
            1e3 * (end - start),
            left=ms(start),
            height=0.75 / rows,
            color=RANK_COLOURS[rank % 10],
            alpha=0.75,
            **_EDGE,
        )
        bar.set_gid(f"rank{rank}-all_reduce-{n}")
        ax.text(ms(end), middle, f" {size_text(size)}", va="center", fontsize=7)
    ax.vlines(ms(timeline["end"]), lane - 0.45, lane + 1.45, colors="black", linestyles=":")


def _label_overlap_axes(
    ax, reports: Sequence[Mapping], layers: list[str], colours: Mapping, ticks: list, labels: list
) -> None:
    """Add the legend's entries for forward and each layer, the lanes' names and the x label."""
    ax.barh(0, 0, color="0.85", label="forward (and the loss)")
    for layer in layers[::-1]:
        ax.barh(0, 0, color=colours[layer], label=f"backward of {layer}")
    ax.set_yticks(ticks, labels)
    ax.invert_yaxis()
    if shared_clock(reports):
        axis = "milliseconds after the first rank's step began (one clock for all ranks)"
    else:
        axis = "milliseconds after each rank's own step began (GPU time, CUDA events)"
    ax.set_xlabel(f"{axis}; dotted: the step ended")


def parse_megabytes(text: object) -> float:
    """Read a bucket size in MB typed into a box, or explain what to type.

    >>> parse_megabytes(" 0.25 ")
    0.25
    >>> parse_megabytes("0")
    Traceback (most recent call last):
    ...
    ValueError: bucket cap must be a number of MB above 0, got '0': e.g. 1 or 0.25
    """
    raw = str(text).strip()
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= MAX_BUCKET_MB:  # also refuses nan and inf
        raise ValueError(
            f"bucket cap must be a number of MB above 0, got {quoted(raw)}: e.g. 1 or 0.25"
            + (f" (at most {MAX_BUCKET_MB:g})" if value > MAX_BUCKET_MB else "")
        )
    return value


class OverlapTimeline(View):
    """Launch the lesson's hand-built DDP (or DDP) for real and draw one step of every rank.

    Args:
        main: the worker's ``main(rank, world_size, port, steps, how,
            batch_size, bucket_cap_mb)``, as ``11_inside_ddp`` writes it
            (``workers/stage_11.py``); each rank reports a ``timeline``.
        world_size: ranks to launch; defaults to :func:`devices.plan`'s.
        how: ``"per parameter"``, ``"buckets"`` or ``"DDP"``.
        bucket_cap_mb: the bucket size, for ``"buckets"`` and ``"DDP"``.
        steps: training steps; the last one is drawn.
    """

    def __init__(
        self,
        main: Callable,
        world_size: int | None = None,
        *,
        how: str = "buckets",
        bucket_cap_mb: float = 1.0,
        steps: int = 5,
    ) -> None:
        super().__init__()
        if how not in HOWS:
            raise ValueError(f"how must be one of {list(HOWS)}, got {how!r}")
        world_size = planned_world_size(world_size)
        self.main, self.world_size = main, parse_world_size(world_size)
        self.steps = steps
        how_box = ipw.Dropdown(options=list(HOWS), value=how, description="exchange")
        how_box.add_class("ddp-how")
        controls = {
            "how": how_box,
            "bucket_cap_mb": number_box("bucket_cap_mb", bucket_cap_mb, "bucket cap (MB)"),
        }
        self.take_controls(controls, self._changed)
        self.reports: list[dict] = []
        self.drawn: dict = {}
        self.run_button = self.button(
            "launch and draw", "ddp-run", lambda: "training ...", self.run_and_show
        )
        c = self.controls
        self.box = ipw.VBox(
            [ipw.HBox([c["how"], c["bucket_cap_mb"], self.run_button]), self.message]
        )
        self.box.add_class("ddp-overlap-view")

    def label(self) -> str:
        s = self.settings
        return f"OverlapTimeline(how={s['how']!r}, bucket_cap_mb={s['bucket_cap_mb']:g})"

    def _read(self) -> dict:
        c = self.controls
        return {"how": c["how"].value, "bucket_cap_mb": parse_megabytes(c["bucket_cap_mb"].value)}

    def _changed(self) -> None:
        self.settings = self._read()
        self.say("press the button to launch with these settings")

    def run(self, timeout_s: float = 90) -> OverlapTimeline:
        """Launch the worker with the current settings and keep the ranks' reports."""
        s = dict(self.settings)
        self.reports = launch.run_ranks(
            self.main, self.world_size, self.steps, s["how"], BATCH_SIZE, s["bucket_cap_mb"],
            timeout_s=timeout_s,
        )  # fmt: skip
        self.drawn = s
        return self

    def facts(self) -> list[str]:
        """What the drawn step shows, in sentences that do not depend on the machine's speed."""
        if not self.reports:
            return []
        s = self.drawn
        setting = s["how"] + (
            f", bucket cap {s['bucket_cap_mb']:g} MB" if s["how"] != "per parameter" else ""
        )
        per_rank = {r["rank"]: overlap(r["timeline"]) for r in self.reports}
        orders = {tuple(ready_order(r["timeline"])) for r in self.reports}
        counts = {(f["all_reduces"], f["started_in_backward"]) for f in per_rank.values()}
        lines = [
            f"Step {self.steps} of {counted(len(self.reports), 'rank')} ({setting}), as each "
            "rank timed it."
        ]
        if len(orders) == 1:
            lines.append(
                "Gradients became ready last layer first, on every rank: "
                + ", ".join(next(iter(orders)))
                + "."
            )
        else:
            lines.append("The ranks saw their gradients become ready in different orders.")
        sizes = ", ".join(size_text(n) for n in per_rank[self.reports[0]["rank"]]["sizes"])
        if len(counts) == 1:
            n, early = next(iter(counts))
            lines.append(
                f"{n} all-reduce(s) in the step ({sizes}); on every rank {early} of them "
                "started before the last gradient was ready, while backward was still running."
            )
        else:
            lines += [
                f"rank {rank}: {f['all_reduces']} all-reduce(s), {f['started_in_backward']} "
                "started while backward was still running."
                for rank, f in per_rank.items()
            ]
        return lines

    def renderings(self) -> list:
        if not self.reports:
            return [
                html_block("<p>No run yet: press <i>launch and draw</i>.</p>", "ddp-overlap"),
                HTML(""),
            ]
        body = "".join(f"<p>{html.escape(line)}</p>" for line in self.facts())
        return [html_block(body, "ddp-overlap"), overlap_picture(self.reports)]
