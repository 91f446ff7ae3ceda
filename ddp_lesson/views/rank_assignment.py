"""The rank view: which processes ``mp.spawn`` starts, the rank each gets, the device each owns."""

from __future__ import annotations

import html
import os
from collections.abc import Mapping, Sequence

import ipywidgets as ipw

from .. import devices
from ..validate import rows_of_mappings
from . import runs
from .base import View, counted, html_block, html_table, number_box, parse_world_size


class RankAssignment(View):
    """Which processes ``mp.spawn`` starts, the rank each gets, the device each owns.

    Type a world size to see the prediction for this machine (and for a GPU
    machine); press the launch button, or pass a launch's reports to
    :meth:`with_reports`, to set what the ranks really reported beside it.

    Args:
        world_size: the starting value; defaults to :func:`devices.plan`'s.
    """

    def __init__(self, world_size: int | None = None) -> None:
        super().__init__()
        start = devices.plan().world_size if world_size is None else world_size
        self.world_size = parse_world_size(start)
        self.reported: list[dict] = []
        self.control = number_box("world_size", start, "world size")
        self.control.observe(self.on_change(self._read), names="value")
        self.launch_button = self.button(
            "launch for real",
            "ddp-launch",
            lambda: f"starting {counted(self.world_size, 'process', 'processes')} ...",
            self._launch_and_show,
        )
        self.box = ipw.VBox(
            [ipw.HBox([self.control, self.launch_button]), self.bars.box, self.message]
        )

    @property
    def plan(self) -> devices.Plan:
        """The device policy's plan for this view's world size."""
        return devices.plan(self.world_size)

    def label(self) -> str:
        return f"RankAssignment(world_size={self.world_size})"

    def _read(self) -> None:
        world_size = parse_world_size(self.control.value)
        self.say("")
        if world_size != self.world_size:
            self.reported = []
        self.world_size = world_size

    def predicted(self) -> list[dict]:
        """One row per process ``mp.spawn(..., nprocs=world_size)`` would start."""
        plan = self.plan
        return [
            {
                "rank": rank,
                "device": str(plan.device(rank)),
                "backend": plan.backend,
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
        with self.control.hold_trait_notifications():
            self.control.value = str(self.world_size)
        return self

    def launch(self, timeout_s: float = 60) -> list[dict]:
        """Start ``world_size`` real processes that join a group and report who they are."""
        reported = self.run_ranks(runs.identity, self.world_size, unit="step", timeout_s=timeout_s)
        self.with_reports(reported)
        return self.reported

    def _launch_and_show(self) -> None:
        self.launch()
        pids = ", ".join(str(r.get("pid", "?")) for r in self.reported)
        self.say(f"the ranks reported; their process ids: {pids}")
        self.publish()

    def _verdict(self) -> str:
        ranks = [r["rank"] for r in self.reported]
        devices_ok = all(
            r["device"] == p["device"]
            for r, p in zip(self.reported, self.predicted(), strict=False)
        )
        if ranks == list(range(self.world_size)) and devices_ok:
            if self.world_size == 1:
                return "As predicted: rank 0 reported once, from its own process, on the " \
                    "predicted device."
            return (
                f"As predicted: ranks 0 to {self.world_size - 1} each reported once, "
                "each from its own process, on the predicted device."
            )
        return f"Not as predicted: ranks {ranks} reported for a world of {self.world_size}."

    def renderings(self) -> list:
        notebook = os.getpid()
        by_rank = {r["rank"]: r for r in self.reported}
        header = [
            "rank",
            "device on this machine",
            "backend",
            f"on a machine with {counted(self.world_size, 'GPU')}",
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
            f"starts {counted(self.world_size, 'process', 'processes')} and calls "
            f"<code>main(rank, world_size, ...)</code> in each, with "
            + (f"rank = 0 ... {self.world_size - 1}:" if self.world_size > 1 else "rank = 0:")
        )
        verdict = f"<p><b>{self._verdict()}</b></p>" if self.reported else ""
        table = html_table(header, rows, "ddp-rank-row")
        return [html_block(f"<p>{call}</p>{table}{verdict}", "ddp-ranks")]
