"""Interactive views of real runs: ranks, sampler partitions, gradient sync, quizzes.

Each view pairs controls (ipywidgets) with a plain rendering, an HTML table
or a matplotlib figure, shown as an ordinary cell output. When a control
changes, the view recomputes from the real objects (``DistributedSampler``,
a real launch) and replaces that output in place. So a saved notebook keeps
what the view last showed for a reader without a kernel, and nbval compares
the rendering, never the widget.

A view only replaces its outputs in response to its own controls. Methods a
notebook cell calls (``verify``, ``run``, ``with_reports``) show their
result in that cell instead, so a re-executed notebook is identical to the
saved one.

Bad input never raises from a control: the view shows what was expected
and how to fix it, and keeps its last good rendering.
"""

from __future__ import annotations

import html
import os
import re
import threading
import time
from collections.abc import Mapping, Sequence

import ipywidgets as ipw
from IPython.display import HTML, display
from matplotlib.colors import to_hex

from . import data, devices, launch, plots, probes
from .validate import rows_of_mappings

#: The explorer draws one column per index; beyond this a grid stops being readable.
MAX_DRAWN_SIZE = 200

#: Epochs the explorer lists side by side (the latest ones).
EPOCHS_LISTED = 5

#: Seconds between two looks at the ranks' progress.
POLL_S = 0.2

#: Steps the gradient sync check may train (each step is a few milliseconds).
MAX_SYNC_STEPS = 50


def _colour(rank: int) -> str:
    return to_hex(plots.RANK_COLOURS[rank % 10])


def _inline(text: str) -> str:
    """Escape ``text`` for HTML and show `backticked` parts as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def parse_whole(label: str, text: object, minimum: int | None = 0) -> int:
    """Read a whole number typed into a text box, or explain what to type.

    Args:
        label: the control's name, used in the message.
        text: what the learner typed.
        minimum: the smallest accepted value (``None``: no limit here).

    Raises:
        ValueError: not a whole number, or below ``minimum``.

    >>> parse_whole("seed", " 7 ")
    7
    >>> parse_whole("seed", "-1")
    Traceback (most recent call last):
    ...
    ValueError: seed must be 0 or more, got -1
    >>> parse_whole("epoch", "1.5")
    Traceback (most recent call last):
    ...
    ValueError: epoch must be a whole number, got '1.5': type digits only, e.g. 2
    """
    raw = str(text).strip()
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(
            f"{label} must be a whole number, got {raw!r}: type digits only, e.g. 2"
        ) from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{label} must be {minimum} or more, got {value}")
    return value


def _world_size(text: object) -> int:
    """Read a world size and check this machine can run it (the one device policy)."""
    value = parse_whole("world size", text, minimum=None)
    try:
        return devices.check_world_size(value)
    except (TypeError, ValueError) as error:
        raise ValueError(str(error)) from None


def _number_box(name: str, value: object, description: str) -> ipw.Text:
    box = ipw.Text(
        value=str(value),
        description=description,
        continuous_update=False,  # act on Enter or leaving the box, not every keystroke
        style={"description_width": "initial"},
        layout=ipw.Layout(width="170px"),
    )
    box.add_class(f"ddp-{name.replace('_', '-')}")
    return box


# -- progress ---------------------------------------------------------------------------
class ProgressBars:
    """One bar per rank, filled from what the ranks send with ``reports.send_progress``."""

    def __init__(self) -> None:
        self.box = ipw.VBox()
        self.box.add_class("ddp-progress")
        self._thread: threading.Thread | None = None

    def follow(self, run: launch.Run, unit: str = "step") -> None:
        """Show ``run``'s progress until it ends; call it inside the ``with`` block."""
        bars = [
            ipw.IntProgress(value=0, min=0, max=1, description=f"rank {rank}")
            for rank in range(run.world_size)
        ]
        labels = [ipw.Label("starting") for _ in bars]
        self.box.children = [ipw.HBox([b, t]) for b, t in zip(bars, labels, strict=True)]

        def show(progress: Mapping[int, tuple[int, int]]) -> None:
            for rank, (done, total) in progress.items():
                if rank < len(bars):
                    bars[rank].max = max(total, 1)
                    bars[rank].value = min(done, total)
                    labels[rank].value = f"{done}/{total} {unit}s"

        def poll() -> None:
            while run.running:
                show(run.progress())
                time.sleep(POLL_S)
            final = run.progress()
            show(final)
            for rank, bar in enumerate(bars):
                finished = rank in final and final[rank][0] >= final[rank][1]
                bar.bar_style = "success" if finished else "danger"
                if not finished:
                    labels[rank].value += " (stopped)"

        self._thread = threading.Thread(target=poll, name="ddp-lesson-progress", daemon=True)
        self._thread.start()

    def wait(self) -> None:
        """Wait until the bars show the run's final state."""
        if self._thread is not None:
            self._thread.join()


def progress(run: launch.Run, unit: str = "epoch") -> ProgressBars:
    """Show a live progress bar per rank for the launch ``run``, below the cell.

    Call it inside the ``with launch.bounded(...)`` block, before ``mp.spawn``;
    ranks report with ``send_progress(rank, done, total)``.
    """
    if not isinstance(run, launch.Run):
        raise TypeError(
            f"run must be the object from `with launch.bounded(...) as run`, got {run!r}"
        )
    bars = ProgressBars()
    bars.follow(run, unit)
    bundle = bars.box._repr_mimebundle_()
    bundle["text/plain"] = f"live progress of {run.world_size} ranks ({unit}s)"
    display(bundle, raw=True)
    return bars


# -- the common shape of a view -----------------------------------------------------------
class _View:
    """Controls in a widget box plus renderings shown as ordinary outputs."""

    box: ipw.Widget

    def __init__(self) -> None:
        self.message = ipw.HTML()
        self.message.add_class("ddp-message")
        self._handles: list[list] = []

    # what subclasses provide
    def _renderings(self) -> list:
        """The objects shown below the controls (HTML, figures), in a fixed number."""
        raise NotImplementedError

    def _label(self) -> str:
        raise NotImplementedError

    # shared behaviour
    #: Show the controls above the renderings (a quiz shows its question first).
    controls_first = True

    def _ipython_display_(self) -> None:
        bundle = self.box._repr_mimebundle_()
        bundle["text/plain"] = self._label()
        if self.controls_first:
            display(bundle, raw=True)
        self._handles.append([display(obj, display_id=True) for obj in self._renderings()])
        if not self.controls_first:
            display(bundle, raw=True)

    def _publish(self) -> None:
        """Replace every rendering this view has shown with the current one."""
        for handles in self._handles:
            for handle, obj in zip(handles, self._renderings(), strict=True):
                handle.update(obj)

    def _button(self, description: str, css_class: str, busy, action) -> ipw.Button:
        """A button that runs ``action`` (a real launch) and reports a failed launch in the view.

        Args:
            busy: a function giving the message shown while ``action`` runs.
            action: what the button does; it shows its own result.
        """
        # as wide as its label, never squeezed by the controls beside it
        button = ipw.Button(
            description=description,
            icon="play",
            layout=ipw.Layout(width="auto", flex="0 0 auto"),
        )
        button.add_class(css_class)

        def clicked(_button: ipw.Button) -> None:
            button.disabled = True  # one launch at a time
            self._say(busy())
            try:
                action()
            except launch.LaunchError as error:
                self._say(str(error), error=True)
            finally:
                button.disabled = False

        button.on_click(clicked)
        return button

    def _say(self, text: str, *, error: bool = False) -> None:
        colour = "#b00020" if error else "#1b5e20"
        self.message.value = f'<span style="color:{colour}">{_inline(text)}</span>' if text else ""


def _html(body: str, css_class: str) -> HTML:
    return HTML(f'<div class="{css_class}" style="font-family:sans-serif">{body}</div>')


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], css_class: str = "") -> str:
    cell = "border:1px solid #ccc;padding:2px 8px;text-align:left"
    head = "".join(f'<th style="{cell}">{h}</th>' for h in header)
    body = "".join(
        f'<tr class="{css_class}">' + "".join(f'<td style="{cell}">{v}</td>' for v in row) + "</tr>"
        for row in rows
    )
    return f'<table style="border-collapse:collapse"><tr>{head}</tr>{body}</table>'


# -- 1. rank assignment -------------------------------------------------------------------
class RankAssignment(_View):
    """Which processes ``mp.spawn`` starts, the rank each gets, the device each owns.

    Type a world size to see the prediction for this machine (and for a GPU
    machine); press the launch button, or pass a launch's reports to
    :meth:`with_reports`, to set what the ranks really reported beside it.

    Args:
        world_size: the starting value; defaults to :func:`devices.plan`'s.
    """

    def __init__(self, world_size: int | None = None) -> None:
        super().__init__()
        self.plan = devices.plan()
        start = self.plan.world_size if world_size is None else world_size
        self.world_size = _world_size(start)
        self.reported: list[dict] = []
        self.control = _number_box("world_size", start, "world size")
        self.control.observe(self._changed, names="value")
        self.launch_button = self._button(
            "launch for real",
            "ddp-launch",
            lambda: f"starting {self.world_size} processes ...",
            self._launch_and_show,
        )
        self.bars = ProgressBars()
        self.box = ipw.VBox([ipw.HBox([self.control, self.launch_button]), self.message])

    def _label(self) -> str:
        return f"RankAssignment(world_size={self.world_size})"

    def _changed(self, _change=None) -> None:
        try:
            world_size = _world_size(self.control.value)
        except ValueError as error:
            self._say(str(error), error=True)
            return
        self._say("")
        if world_size != self.world_size:
            self.reported = []
        self.world_size = world_size
        self._publish()

    def predicted(self) -> list[dict]:
        """One row per process ``mp.spawn(..., nprocs=world_size)`` would start."""
        return [
            {
                "rank": rank,
                "device": str(self.plan.device(rank)),
                "backend": self.plan.backend,
                "on_gpus": f"cuda:{rank} (nccl)",
            }
            for rank in range(self.world_size)
        ]

    def with_reports(self, reports: Sequence[Mapping]) -> RankAssignment:
        """Set the ranks' own reports (each needs ``rank`` and ``device``) beside the prediction.

        Returns the view, so a cell ending in ``view.with_reports(run.reports)``
        shows it filled in.
        """
        rows = rows_of_mappings("reports", reports)
        lacking = [r.get("rank") for r in rows if "rank" not in r or "device" not in r]
        if not rows or lacking:
            raise ValueError(
                "pass the reports of a launch whose ranks sent 'rank' and 'device', "
                f"e.g. view.with_reports(run.reports); these lack them: {lacking}"
            )
        self.reported = sorted((dict(r) for r in rows), key=lambda r: r["rank"])
        self.world_size = len(self.reported)
        self.control.unobserve(self._changed, names="value")
        self.control.value = str(self.world_size)
        self.control.observe(self._changed, names="value")
        return self

    def launch(self, timeout_s: float = 60) -> list[dict]:
        """Start ``world_size`` real processes that join a group and report who they are."""
        world_size = self.world_size
        with launch.bounded(world_size, timeout_s=timeout_s) as run:
            self.bars.follow(run, "step")
            launch.start(probes.identity, args=(world_size, run.port), nprocs=world_size)
        self.bars.wait()
        self.with_reports(run.reports)
        return self.reported

    def _launch_and_show(self) -> None:
        self.launch()
        pids = ", ".join(str(r.get("pid", "?")) for r in self.reported)
        self._say(f"the ranks reported; their process ids: {pids}")
        self._publish()

    def _verdict(self) -> str:
        ranks = [r["rank"] for r in self.reported]
        devices_ok = all(
            r["device"] == p["device"]
            for r, p in zip(self.reported, self.predicted(), strict=False)
        )
        if ranks == list(range(self.world_size)) and devices_ok:
            return (
                f"As predicted: ranks 0 to {self.world_size - 1} each reported once, "
                "each from its own process, on the predicted device."
            )
        return f"Not as predicted: ranks {ranks} reported for a world of {self.world_size}."

    def _renderings(self) -> list:
        notebook = os.getpid()
        by_rank = {r["rank"]: r for r in self.reported}
        header = [
            "rank",
            "device on this machine",
            "backend",
            f"on a machine with {self.world_size} GPUs",
        ]
        if self.reported:
            header += ["reported device", "reported backend", "own process"]
        rows = []
        for p in self.predicted():
            row = [str(p["rank"]), p["device"], p["backend"], p["on_gpus"]]
            if self.reported:
                r = by_rank.get(p["rank"], {})
                own = "pid" in r and r["pid"] != notebook
                row += [
                    r.get("device", "did not report"),
                    r.get("backend", "-"),
                    "yes (not the notebook)" if own else "-",
                ]
            rows.append([html.escape(v) for v in row])
        call = (
            f"<code>mp.spawn(main, args=(world_size, ...), nprocs={self.world_size})</code> "
            f"starts {self.world_size} processes and calls <code>main(rank, world_size, ...)</code>"
            f" in each, with rank = 0 ... {self.world_size - 1}:"
        )
        verdict = f"<p><b>{self._verdict()}</b></p>" if self.reported else ""
        return [_html(f"<p>{call}</p>{_table(header, rows, 'ddp-rank-row')}{verdict}", "ddp-ranks")]


# -- 2. sampler partition explorer ---------------------------------------------------------
def partition_html(partition: Sequence[Sequence[int]], size: int, caption: str = "") -> str:
    """Draw a partition as an HTML grid: one row per rank, one column per index.

    A filled cell means the rank receives that index, the number in it is
    when (0 = first). Indices handed out twice (padding) have a red frame
    and a red column number; indices nobody gets (``drop_last``) a grey,
    struck-through column number. Below the grid each rank's order as a list.
    """
    marks = data.padding_of([list(p) for p in partition], size)
    cell = "width:1.6em;height:1.6em;text-align:center;font-size:11px;padding:0"
    header = []
    for index in range(size):
        style = cell
        if index in marks["repeated"]:
            style += ";color:#d00000;font-weight:bold"
        elif index in marks["dropped"]:
            style += ";color:#999;text-decoration:line-through"
        header.append(f'<th style="{style}">{index}</th>')
    rows = []
    for rank, indices in enumerate(partition):
        position = {index: n for n, index in enumerate(indices)}
        cells = []
        for index in range(size):
            if index not in position:
                cells.append(f'<td style="{cell};border:1px solid #eee"></td>')
                continue
            frame = "2px solid #d00000" if index in marks["repeated"] else "1px solid #fff"
            cells.append(
                f'<td class="ddp-taken" style="{cell};background:{_colour(rank)};color:white;'
                f'border:{frame}">{position[index]}</td>'
            )
        label = f'<th style="padding:0 6px;text-align:right">rank {rank}</th>'
        rows.append(f'<tr class="ddp-grid-row">{label}{"".join(cells)}</tr>')
    grid = (
        '<table style="border-collapse:collapse"><tr><th></th>'
        + "".join(header)
        + "</tr>"
        + "".join(rows)
        + "</table>"
    )
    lists = "\n".join(
        f'<span class="ddp-rank-list">rank {rank}: {list(indices)}</span>'
        for rank, indices in enumerate(partition)
    )
    legend = (
        f"repeated as padding: {marks['repeated'] or 'none'}; "
        f"dropped by drop_last: {marks['dropped'] or 'none'}"
    )
    title = f"<p><b>{_inline(caption)}</b></p>" if caption else ""
    return (
        f'{title}{grid}<pre class="ddp-rank-lists" style="margin:4px 0">{lists}</pre>'
        f'<p class="ddp-marks">{legend}</p>'
    )


class SamplerExplorer(_View):
    """Every data-set index and the rank that receives it, from the real ``DistributedSampler``.

    Controls: data-set size, world size, epoch, seed, shuffle, drop_last and
    whether the training loop calls ``set_epoch``. The button (or
    :meth:`verify`) launches real ranks that iterate a ``DataLoader`` with
    these settings and compares what they iterated with the drawing.

    Args:
        size: items in the data set (1 to ``MAX_DRAWN_SIZE``).
        world_size: ranks sharing it; defaults to :func:`devices.plan`'s.
        epoch, seed, shuffle, drop_last, set_epoch: the starting settings.

    Raises:
        ValueError: a starting setting is out of range (the message says which).
    """

    def __init__(
        self,
        size: int = 10,
        world_size: int | None = None,
        *,
        epoch: int = 0,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = False,
        set_epoch: bool = True,
    ) -> None:
        super().__init__()
        if world_size is None:
            world_size = devices.plan().world_size
        self.controls = {
            "size": _number_box("size", size, "data-set size"),
            "world_size": _number_box("world_size", world_size, "world size"),
            "epoch": _number_box("epoch", epoch, "epoch"),
            "seed": _number_box("seed", seed, "seed"),
            "shuffle": ipw.Checkbox(value=bool(shuffle), description="shuffle", indent=False),
            "drop_last": ipw.Checkbox(value=bool(drop_last), description="drop_last", indent=False),
            "set_epoch": ipw.Checkbox(
                value=bool(set_epoch), description="loop calls set_epoch(epoch)", indent=False
            ),
        }
        for name, control in self.controls.items():
            control.add_class(f"ddp-{name.replace('_', '-')}")
        self.settings = self._read()  # a bad starting value raises, with the message
        self._compute()
        for control in self.controls.values():
            control.observe(self._changed, names="value")
        self.verify_button = self._button(
            "verify with a real launch",
            "ddp-verify",
            lambda: f"launching {self.settings['world_size']} ranks ...",
            self._verify_and_show,
        )
        self.bars = ProgressBars()
        c = self.controls
        self.box = ipw.VBox(
            [
                ipw.HBox([c["size"], c["world_size"], c["epoch"], c["seed"]]),
                ipw.HBox([c["shuffle"], c["drop_last"], c["set_epoch"], self.verify_button]),
                self.bars.box,
                self.message,
            ]
        )
        self.box.add_class("ddp-sampler-explorer")

    def _label(self) -> str:
        s = self.settings
        return (
            f"SamplerExplorer(size={s['size']}, world_size={s['world_size']}, "
            f"epoch={s['epoch']}, seed={s['seed']}, shuffle={s['shuffle']}, "
            f"drop_last={s['drop_last']}, set_epoch={s['set_epoch']})"
        )

    def _read(self) -> dict:
        c = self.controls
        size = parse_whole("data-set size", c["size"].value, minimum=1)
        if size > MAX_DRAWN_SIZE:
            raise ValueError(
                f"data-set size {size} is more than the {MAX_DRAWN_SIZE} columns this grid can "
                f"draw; the sampler itself has no limit: try {MAX_DRAWN_SIZE} or fewer"
            )
        world_size = _world_size(c["world_size"].value)
        if size < world_size:
            raise ValueError(
                f"data-set size {size} is smaller than world size {world_size}: some ranks "
                "would get only repeated (padding) items; use a data set of at least "
                f"{world_size} items, or fewer ranks"
            )
        return {
            "size": size,
            "world_size": world_size,
            "epoch": parse_whole("epoch", c["epoch"].value),
            "seed": parse_whole("seed", c["seed"].value),
            "shuffle": c["shuffle"].value,
            "drop_last": c["drop_last"].value,
            "set_epoch": c["set_epoch"].value,
        }

    def _partition_at(self, epoch: int) -> list[list[int]]:
        s = self.settings
        return data.sampler_partition(
            s["size"],
            s["world_size"],
            epoch=epoch if s["set_epoch"] else 0,  # never told: the sampler stays at epoch 0
            shuffle=s["shuffle"],
            seed=s["seed"],
            drop_last=s["drop_last"],
        )

    def _compute(self) -> None:
        s = self.settings
        self.partition = self._partition_at(s["epoch"])
        self.marks = data.padding_of(self.partition, s["size"])
        first = max(0, s["epoch"] - EPOCHS_LISTED + 1)
        self.history = {e: self._partition_at(e)[0] for e in range(first, s["epoch"] + 1)}

    def _changed(self, _change=None) -> None:
        try:
            self.settings = self._read()
        except ValueError as error:
            self._say(str(error), error=True)
            return
        self._say("")
        self.bars.box.children = ()  # they showed a launch with other settings
        self._compute()
        self._publish()

    def _renderings(self) -> list:
        s = self.settings
        caption = (
            f"epoch {s['epoch']}: {s['size']} items on {s['world_size']} ranks "
            f"(shuffle={s['shuffle']}, seed={s['seed']}, drop_last={s['drop_last']})"
        )
        body = partition_html(self.partition, s["size"], caption)
        orders = "\n".join(f"epoch {e}: {order}" for e, order in self.history.items())
        note = (
            "a new order every epoch, because the loop calls set_epoch"
            if s["set_epoch"]
            else "the same order every epoch: without set_epoch the sampler always shuffles "
            "as in epoch 0"
        )
        body += (
            f"<p>rank 0, epoch by epoch ({note}):</p>"
            f'<pre class="ddp-history" style="margin:4px 0">{orders}</pre>'
        )
        return [_html(body, "ddp-partition")]

    def verify(self, timeout_s: float = 60) -> HTML:
        """Launch real ranks with the current settings and compare what they iterated.

        Each rank builds ``DistributedSampler(dataset)`` from the process group,
        iterates a ``DataLoader`` for epochs 0 to ``epoch`` and reports the
        indices. Returns the verdict as HTML (shown by the cell).
        """
        s = self.settings
        epochs = s["epoch"] + 1
        args = (s["size"], epochs, s["shuffle"], s["seed"], s["drop_last"], s["set_epoch"])
        with launch.bounded(s["world_size"], timeout_s=timeout_s) as run:
            self.bars.follow(run, "epoch")
            launch.start(
                probes.partition,
                args=(s["world_size"], run.port, *args),
                nprocs=s["world_size"],
            )
        self.bars.wait()
        self.launched = run.reports
        mismatches = []
        for epoch in range(epochs):
            drawn = self._partition_at(epoch)
            iterated = [r["orders"][epoch] for r in run.reports]
            if iterated != drawn:
                mismatches.append(f"epoch {epoch}: drawn {drawn}, iterated {iterated}")
        self.verified = not mismatches
        if self.verified:
            verdict = (
                f"Verified by a real launch: {s['world_size']} ranks built DistributedSampler "
                f"from their process group and iterated exactly the drawn indices in every "
                f"epoch from 0 to {s['epoch']}."
            )
        else:
            verdict = "The real ranks iterated something else: " + "; ".join(mismatches)
        lists = "\n".join(
            f"rank {r['rank']} (sampler says num_replicas={r['num_replicas']}, "
            f"rank={r['sampler_rank']}): epoch {s['epoch']} {r['orders'][s['epoch']]}"
            for r in run.reports
        )
        return _html(
            f'<p><b>{html.escape(verdict)}</b></p><pre style="margin:4px 0">{lists}</pre>',
            "ddp-verified",
        )

    def _verify_and_show(self) -> None:
        self.message.value = self.verify().data


# -- 3. gradient sync check ----------------------------------------------------------------
class GradientSync(_View):
    """Train a DDP-wrapped and an unwrapped copy of one model for real, and compare ranks.

    Every rank starts both copies from the same weights, so differences
    between ranks can only come from their different batches. After
    :meth:`run` (or the button), the view shows per-parameter gradient norms
    on every rank before and after DDP's all-reduce, a verdict, and a plot of
    the largest difference between ranks at each step, wrapped and unwrapped.

    Args:
        world_size: ranks to launch; defaults to :func:`devices.plan`'s.
        steps: training steps (1 to ``MAX_SYNC_STEPS``).
    """

    def __init__(self, world_size: int | None = None, steps: int = 3) -> None:
        super().__init__()
        if world_size is None:
            world_size = devices.plan().world_size
        self.controls = {
            "world_size": _number_box("world_size", world_size, "world size"),
            "steps": _number_box("steps", steps, "steps"),
        }
        self.settings = self._read()
        self.reports: list[dict] = []
        for control in self.controls.values():
            control.observe(self._changed, names="value")
        self.run_button = self._button(
            "train and compare", "ddp-run", lambda: "training ...", self._run_and_show
        )
        self.bars = ProgressBars()
        c = self.controls
        self.box = ipw.VBox(
            [ipw.HBox([c["world_size"], c["steps"], self.run_button]), self.bars.box, self.message]
        )

    def _label(self) -> str:
        s = self.settings
        return f"GradientSync(world_size={s['world_size']}, steps={s['steps']})"

    def _read(self) -> dict:
        c = self.controls
        steps = parse_whole("steps", c["steps"].value, minimum=1)
        if steps > MAX_SYNC_STEPS:
            raise ValueError(f"steps must be {MAX_SYNC_STEPS} or fewer, got {steps}")
        return {"world_size": _world_size(c["world_size"].value), "steps": steps}

    def _changed(self, _change=None) -> None:
        try:
            self.settings = self._read()
        except ValueError as error:
            self._say(str(error), error=True)
            return
        self._say("press the button to train with these settings")

    def run(self, timeout_s: float = 90) -> GradientSync:
        """Launch the ranks, train ``steps`` steps, and keep their reports. Returns the view."""
        s = self.settings
        with launch.bounded(s["world_size"], timeout_s=timeout_s) as run:
            self.bars.follow(run, "step")
            launch.start(
                probes.sync_check,
                args=(s["world_size"], run.port, s["steps"]),
                nprocs=s["world_size"],
            )
        self.bars.wait()
        self.reports = run.reports
        return self

    def _run_and_show(self) -> None:
        self.run()
        self._say("")
        self._publish()

    def verdict(self) -> dict:
        """The measured answer: largest differences between ranks, and what they mean."""
        if not self.reports:
            raise ValueError("nothing measured yet: call run() first (or press the button)")
        first = self.reports[0]  # every rank measured the same cross-rank differences
        steps = len(first["synced_gap"])
        return {
            "steps": steps,
            "own_gradients": max(first["own_gap"]),
            "synced_gradients": max(first["synced_gap"]),
            "ddp_parameters": first["ddp_param_gap"][-1],
            "plain_parameters": first["plain_param_gap"][-1],
            "in_sync": max(first["synced_gap"]) == 0.0 and first["ddp_param_gap"][-1] == 0.0,
            "plain_diverged": first["plain_param_gap"][-1] > 0.0,
        }

    def _renderings(self) -> list:
        if not self.reports:
            return [
                _html("<p>No run yet: press <i>train and compare</i>.</p>", "ddp-sync"),
                HTML(""),
            ]
        v = self.verdict()
        ranks = [r["rank"] for r in self.reports]
        header = ["parameter"]
        header += [f"rank {r}: own batch" for r in ranks]
        header += [f"rank {r}: after all-reduce" for r in ranks]
        rows = []
        for n, name in enumerate(self.reports[0]["names"]):
            row = [html.escape(name)]
            row += [f"{r['own_norms'][-1][n]:.5g}" for r in self.reports]
            row += [f"{r['synced_norms'][-1][n]:.5g}" for r in self.reports]
            rows.append(row)
        wrapped = "identical on every rank" if v["in_sync"] else "NOT identical: something is wrong"
        diverged = "diverged" if v["plain_diverged"] else "stayed equal"
        lines = [
            f"With DDP: gradients after the all-reduce and parameters after {v['steps']} "
            f"step(s) are {wrapped} (largest difference between ranks: "
            f"{v['synced_gradients']:.3g} and {v['ddp_parameters']:.3g}).",
            f"Each rank's own gradient, before the all-reduce, differed by up to "
            f"{v['own_gradients']:.3g}.",
            f"Without DDP: the same model, started from the same weights, {diverged} after "
            f"{v['steps']} step(s): parameters differ by up to {v['plain_parameters']:.3g}.",
        ]
        body = "".join(f"<p><b>{html.escape(t)}</b></p>" for t in lines)
        body += f"<p>Gradient norm per parameter at step {v['steps']}:</p>"
        body += _table(header, rows, "ddp-sync-row")
        return [_html(body, "ddp-sync"), plots.sync_picture(self.reports[0])]


# -- 4. quiz ------------------------------------------------------------------------------
class Quiz(_View):
    """A "What do you think happens?" question: choices, a check, and a reveal.

    The question, the lettered choices and a collapsed answer are plain HTML
    (readable without a kernel); the widget lets the learner pick a letter
    and check it.

    Args:
        question: the question, `backticks` for code.
        choices: two or more possible answers.
        answer: the index of the right choice.
        explanation: why it is right, shown on a right answer and in the reveal.
        hints: optional, per wrong choice index, why that choice is wrong.
    """

    LETTERS = "ABCDEFGH"
    controls_first = False

    def __init__(
        self,
        question: str,
        choices: Sequence[str],
        answer: int,
        explanation: str,
        hints: Mapping[int, str] | None = None,
    ) -> None:
        super().__init__()
        if isinstance(choices, str) or not 2 <= len(choices) <= len(self.LETTERS):
            raise ValueError(
                f"choices must be a list of 2 to {len(self.LETTERS)} answers, got {choices!r}"
            )
        if isinstance(answer, bool) or answer not in range(len(choices)):
            raise ValueError(f"answer must be the index of the right choice (0-{len(choices) - 1})")
        self.question, self.choices, self.answer = question, list(choices), answer
        self.explanation, self.hints = explanation, dict(hints or {})
        self.picker = ipw.ToggleButtons(
            options=list(self.LETTERS[: len(choices)]),
            value=None,
            description="your answer:",
            style={"button_width": "3em", "description_width": "initial"},
        )
        self.picker.add_class("ddp-quiz-choice")
        self.check_button = ipw.Button(description="check")
        self.check_button.add_class("ddp-quiz-check")
        self.check_button.on_click(lambda _: self.check())
        self.box = ipw.VBox([ipw.HBox([self.picker, self.check_button]), self.message])

    def _label(self) -> str:
        return f"Quiz: {self.question}"

    def check(self) -> bool:
        """Say whether the picked letter is right; returns True if it is."""
        if self.picker.value is None:
            self._say("Pick a letter first.", error=True)
            return False
        picked = self.LETTERS.index(self.picker.value)
        if picked == self.answer:
            self._say(f"Right. {self.explanation}")
            return True
        hint = self.hints.get(picked, "Think again, or open the answer below the choices.")
        self._say(f"Not quite. {hint}", error=True)
        return False

    def _renderings(self) -> list:
        items = "".join(
            f"<li><b>{self.LETTERS[n]}.</b> {_inline(c)}</li>" for n, c in enumerate(self.choices)
        )
        right = self.LETTERS[self.answer]
        body = (
            f"<p><b>What do you think happens?</b> {_inline(self.question)}</p>"
            f'<ul style="list-style:none">{items}</ul>'
            f"<details><summary>Reveal the answer</summary><p><b>{right}.</b> "
            f"{_inline(self.explanation)}</p></details>"
        )
        return [_html(body, "ddp-quiz")]


__all__ = [
    "GradientSync",
    "ProgressBars",
    "Quiz",
    "RankAssignment",
    "SamplerExplorer",
    "parse_whole",
    "partition_html",
    "progress",
]
