"""The gradient sync view: a DDP-wrapped and an unwrapped copy trained side by side, for real."""

from __future__ import annotations

import html

import ipywidgets as ipw
from IPython.display import HTML

from . import plots, runs
from .base import (
    View,
    html_block,
    html_table,
    number_box,
    parse_whole,
    parse_world_size,
    planned_world_size,
)

#: Steps the gradient sync check may train (each step is a few milliseconds).
MAX_SYNC_STEPS = 50


class GradientSync(View):
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
        world_size = planned_world_size(world_size)
        controls = {
            "world_size": number_box("world_size", world_size, "world size"),
            "steps": number_box("steps", steps, "steps"),
        }
        self.take_controls(controls, self._changed)
        self.reports: list[dict] = []
        self.run_button = self.button(
            "train and compare", "ddp-run", lambda: "training ...", self.run_and_show
        )
        c = self.controls
        self.box = ipw.VBox(
            [ipw.HBox([c["world_size"], c["steps"], self.run_button]), self.bars.box, self.message]
        )

    def label(self) -> str:
        s = self.settings
        return f"GradientSync(world_size={s['world_size']}, steps={s['steps']})"

    def _read(self) -> dict:
        c = self.controls
        steps = parse_whole("steps", c["steps"].value, minimum=1)
        if steps > MAX_SYNC_STEPS:
            raise ValueError(f"steps must be {MAX_SYNC_STEPS} or fewer, got {steps}")
        return {"world_size": parse_world_size(c["world_size"].value), "steps": steps}

    def _changed(self) -> None:
        self.settings = self._read()
        self.say("press the button to train with these settings")

    def run(self, timeout_s: float = 90) -> GradientSync:
        """Launch the ranks, train ``steps`` steps, and keep their reports. Returns the view."""
        s = self.settings
        self.reports = self.run_ranks(
            runs.sync_check, s["world_size"], s["steps"], unit="step", timeout_s=timeout_s
        )
        return self

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

    def renderings(self) -> list:
        if not self.reports:
            return [
                html_block("<p>No run yet: press <i>train and compare</i>.</p>", "ddp-sync"),
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
        body += html_table(header, rows, "ddp-sync-row")
        return [html_block(body, "ddp-sync"), plots.sync_picture(self.reports[0])]
