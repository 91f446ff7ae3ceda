"""What every view is made of: controls, renderings shown as plain outputs, and real launches.

A view pairs controls (ipywidgets) with a plain rendering, an HTML table
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
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence

import ipywidgets as ipw
from IPython.display import HTML, display
from matplotlib.colors import to_hex

from .. import devices, launch
from ..reports import counted  # noqa: F401  (the views' counts)
from .plots import RANK_COLOURS

#: Seconds between two looks at the ranks' progress.
POLL_S = 0.2

#: Characters of a learner's entry quoted back in a message.
QUOTED_CHARS = 40


def colour(rank: int) -> str:
    """The course's colour for ``rank``, as an HTML colour."""
    return to_hex(RANK_COLOURS[rank % 10])


def inline(text: str) -> str:
    """Escape ``text`` for HTML and show `backticked` parts as code."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def quoted(text: object) -> str:
    """What a learner typed, as a message quotes it: short, whatever they typed.

    >>> quoted("x" * 100)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...' (100 characters)"
    """
    raw = str(text)
    if len(raw) <= QUOTED_CHARS:
        return repr(raw)
    return f"{raw[:QUOTED_CHARS]!r}"[:-1] + f"...' ({len(raw)} characters)"


def parse_whole(
    label: str, text: object, minimum: int | None = 0, maximum: int | None = None
) -> int:
    """Read a whole number typed into a text box, or explain what to type.

    Args:
        label: the control's name, used in the message.
        text: what the learner typed.
        minimum: the smallest accepted value (``None``: no limit here).
        maximum: the largest accepted value (``None``: no limit here).

    Raises:
        ValueError: not a whole number, or outside the limits.

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
    if len(raw) > 30 or not re.fullmatch(r"[+-]?\d+", raw):
        raise ValueError(
            f"{label} must be a whole number, got {quoted(raw)}: type digits only, e.g. 2"
        )
    value = int(raw)
    if minimum is not None and value < minimum:
        raise ValueError(f"{label} must be {minimum} or more, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{label} must be {maximum} or less, got {value}")
    return value


def parse_world_size(text: object) -> int:
    """Read a world size and check this machine can run it (the one device policy)."""
    value = parse_whole("world size", text, minimum=None)
    try:
        return devices.check_world_size(value, source="world size")
    except (TypeError, ValueError) as error:
        raise ValueError(str(error)) from None


def planned_world_size(world_size: int | None) -> object:
    """A view's world size: the one given, or :func:`devices.plan`'s when ``None``."""
    return devices.plan().world_size if world_size is None else world_size


def number_box(name: str, value: object, description: str) -> ipw.Text:
    """A text box for a whole number that acts on Enter or on leaving it."""
    box = ipw.Text(
        value=str(value),
        description=description,
        continuous_update=False,  # act on Enter or leaving the box, not every keystroke
        style={"description_width": "initial"},
        layout=ipw.Layout(width="170px"),
    )
    box.add_class(f"ddp-{name.replace('_', '-')}")
    return box


class Revealed:
    """Text a prediction asked about, folded away until the learner opens it.

    Shown in a notebook as a closed ``<details>`` block (JupyterLab keeps it
    closed after a run too); its plain-text form, what nbval and a terminal
    see, is the text itself.

    >>> Revealed("same: True")
    same: True
    """

    def __init__(self, text: str, summary: str = "Show the result (after your prediction)") -> None:
        self.text, self.summary = text, summary

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        return (
            f'<details class="ddp-reveal"><summary>{html.escape(self.summary)}</summary>'
            f'<pre style="margin:4px 0">{html.escape(self.text)}</pre></details>'
        )


def reveal(*lines: object) -> Revealed:
    """The lines, one per line, to show only when the learner opens them (see :class:`Revealed`).

    >>> reveal("identical:", True)
    identical:
    True
    """
    return Revealed("\n".join(str(line) for line in lines))


def html_block(body: str, css_class: str) -> HTML:
    """An HTML output in the course's style."""
    return HTML(f'<div class="{css_class}" style="font-family:sans-serif">{body}</div>')


def html_table(header: Sequence[str], rows: Sequence[Sequence[str]], css_class: str = "") -> str:
    """A plain bordered HTML table (cells already escaped)."""
    cell = "border:1px solid #ccc;padding:2px 8px;text-align:left"
    head = "".join(f'<th style="{cell}">{h}</th>' for h in header)
    body = "".join(
        f'<tr class="{css_class}">' + "".join(f'<td style="{cell}">{v}</td>' for v in row) + "</tr>"
        for row in rows
    )
    return f'<table style="border-collapse:collapse"><tr>{head}</tr>{body}</table>'


class ProgressBars:
    """One bar per rank, filled from what the ranks send with ``reports.send_progress``."""

    def __init__(self) -> None:
        self.box = ipw.VBox()
        self.box.add_class("ddp-progress")
        self._thread: threading.Thread | None = None

    def follow(self, run: launch.Supervisor, unit: str = "step") -> None:
        """Show ``run``'s progress until it ends; call it inside the ``with`` block."""
        bars = [
            ipw.IntProgress(value=0, min=0, max=1, description=f"rank {rank}")
            for rank in range(run.world_size or 0)
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


def progress(run: launch.Supervisor, unit: str = "epoch") -> ProgressBars:
    """Show a live progress bar per rank for the launch ``run``, below the cell.

    Call it inside the ``with launch.bounded(...)`` block, before ``mp.spawn``;
    ranks report with ``send_progress(rank, done, total)``.
    """
    if not isinstance(run, launch.Supervisor):
        raise TypeError(
            f"run must be the object from `with launch.bounded(...) as run`, got {run!r}"
        )
    bars = ProgressBars()
    bars.follow(run, unit)
    bundle = bars.box._repr_mimebundle_()
    bundle["text/plain"] = f"live progress of {counted(run.world_size, 'rank')} ({unit}s)"
    display(bundle, raw=True)
    return bars


class View:
    """Controls in a widget box plus renderings shown as ordinary outputs.

    A view provides :meth:`renderings` and :meth:`label`; the rest is shared.
    """

    box: ipw.Widget

    #: Show the controls above the renderings (a quiz shows its question first).
    controls_first = True

    def __init__(self) -> None:
        self.message = ipw.HTML()
        self.message.add_class("ddp-message")
        self.bars = ProgressBars()
        self._handles: list[list] = []

    def renderings(self) -> list:
        """The objects shown below the controls (HTML, figures), in a fixed number."""
        raise NotImplementedError

    def label(self) -> str:
        """The text shown where widgets cannot be (a plain-text front end)."""
        raise NotImplementedError

    def _ipython_display_(self) -> None:
        bundle = self.box._repr_mimebundle_()
        bundle["text/plain"] = self.label()
        if self.controls_first:
            display(bundle, raw=True)
        self._handles.append([display(obj, display_id=True) for obj in self.renderings()])
        if not self.controls_first:
            display(bundle, raw=True)

    def publish(self) -> None:
        """Replace every rendering this view has shown with the current one."""
        for handles in self._handles:
            for handle, obj in zip(handles, self.renderings(), strict=True):
                handle.update(obj)

    def take_controls(self, controls: dict, changed: Callable[[], None]) -> None:
        """Adopt ``controls``: read them now, and call ``changed()`` whenever one changes.

        A bad starting value raises here, with the message ``_read`` gives.
        """
        self.controls = controls
        self.settings = self._read()
        for control in controls.values():
            control.observe(self.on_change(changed), names="value")

    def _read(self) -> dict:
        """The current settings, parsed from the controls (a bad value raises)."""
        raise NotImplementedError

    def run_and_show(self) -> None:
        """The run button's action: ``run()`` with the current settings, then redraw."""
        self.run()
        self.say("")
        self.publish()

    def on_change(self, read: Callable[[], None]) -> Callable:
        """A control handler: ``read()`` the controls; a bad value becomes the view's message.

        Whatever goes wrong, the view keeps its last good rendering and says
        why in its message; no traceback reaches the cell.
        """

        def changed(_change=None) -> None:
            try:
                read()
            except Exception as error:  # any bad value: say so, keep the drawing
                self.say(str(error), error=True)
                return
            self.publish()

        return changed

    def run_ranks(self, fn: Callable, world_size: int, *args: object, unit: str, timeout_s: float):
        """Run ``fn`` on ``world_size`` real ranks with this view's progress bars; their reports."""
        try:
            return launch.run_ranks(
                fn, world_size, *args, timeout_s=timeout_s,
                watch=lambda run: self.bars.follow(run, unit),
            )  # fmt: skip
        finally:
            self.bars.wait()

    def button(self, description: str, css_class: str, busy, action) -> ipw.Button:
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
            self.say(busy())
            try:
                action()
            except (launch.LaunchError, launch.LaunchInterrupted, ValueError) as error:
                self.say(str(error), error=True)
            finally:
                button.disabled = False

        button.on_click(clicked)
        return button

    def say(self, text: str, *, error: bool = False) -> None:
        """Show ``text`` in the view's message line (red for an error)."""
        tint = "#b00020" if error else "#1b5e20"
        self.message.value = f'<span style="color:{tint}">{inline(text)}</span>' if text else ""
