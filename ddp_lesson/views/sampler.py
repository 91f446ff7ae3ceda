"""The sampler explorer: every data-set index and the rank that receives it, from the sampler."""

from __future__ import annotations

import html
from collections.abc import Sequence

import ipywidgets as ipw
from IPython.display import HTML

from .. import data
from . import runs
from .base import (
    View,
    colour,
    counted,
    html_block,
    inline,
    number_box,
    parse_whole,
    parse_world_size,
    planned_world_size,
)

#: The explorer draws one column per index; beyond this a grid stops being readable.
MAX_DRAWN_SIZE = 200

#: Epochs the explorer lists side by side (the latest ones), and a real launch iterates.
EPOCHS_LISTED = 5

#: The largest epoch and seed the explorer takes (the sampler seeds with seed + epoch).
MAX_EPOCH = 10**6
MAX_SEED = 2**32 - 1


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
                f'<td class="ddp-taken" style="{cell};background:{colour(rank)};color:white;'
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
    title = f"<p><b>{inline(caption)}</b></p>" if caption else ""
    return (
        f'{title}{grid}<pre class="ddp-rank-lists" style="margin:4px 0">{lists}</pre>'
        f'<p class="ddp-marks">{legend}</p>'
    )


class SamplerExplorer(View):
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
        world_size = planned_world_size(world_size)
        controls = {
            "size": number_box("size", size, "data-set size"),
            "world_size": number_box("world_size", world_size, "world size"),
            "epoch": number_box("epoch", epoch, "epoch"),
            "seed": number_box("seed", seed, "seed"),
            "shuffle": ipw.Checkbox(value=bool(shuffle), description="shuffle", indent=False),
            "drop_last": ipw.Checkbox(value=bool(drop_last), description="drop_last", indent=False),
            "set_epoch": ipw.Checkbox(
                value=bool(set_epoch), description="loop calls set_epoch(epoch)", indent=False
            ),
        }
        for name, control in controls.items():
            control.add_class(f"ddp-{name.replace('_', '-')}")
        self.take_controls(controls, self._changed)  # a bad starting value raises, with the message
        self._compute()
        self.verify_button = self.button(
            "verify with a real launch",
            "ddp-verify",
            lambda: f"launching {counted(self.settings['world_size'], 'rank')} ...",
            self._verify_and_show,
        )
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

    def label(self) -> str:
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
        world_size = parse_world_size(c["world_size"].value)
        if size < world_size:
            raise ValueError(
                f"data-set size {size} is smaller than world size {world_size}: some ranks "
                "would get only repeated (padding) items; use a data set of at least "
                f"{world_size} items, or fewer ranks"
            )
        return {
            "size": size,
            "world_size": world_size,
            "epoch": parse_whole("epoch", c["epoch"].value, maximum=MAX_EPOCH),
            "seed": parse_whole("seed", c["seed"].value, maximum=MAX_SEED),
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

    def _changed(self) -> None:
        settings = self._read()
        previous, self.settings = self.settings, settings
        try:
            self._compute()
        except Exception:
            self.settings = previous
            raise
        self.say("")
        self.bars.box.children = ()  # they showed a launch with other settings

    def renderings(self) -> list:
        s = self.settings
        caption = (
            f"epoch {s['epoch']}: {counted(s['size'], 'item')} on "
            f"{counted(s['world_size'], 'rank')} "
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
        return [html_block(body, "ddp-partition")]

    def verify(self, timeout_s: float = 60) -> HTML:
        """Launch real ranks with the current settings and compare what they iterated.

        Each rank builds ``DistributedSampler(dataset)`` from the process group,
        iterates a ``DataLoader`` in each epoch the view lists (the last
        ``EPOCHS_LISTED`` up to ``epoch``) and reports the indices. Returns the
        verdict as HTML (shown by the cell).
        """
        s = self.settings
        epochs = list(self.history)
        args = (s["size"], epochs, s["shuffle"], s["seed"], s["drop_last"], s["set_epoch"])
        reported = self.run_ranks(
            runs.partition, s["world_size"], *args, unit="epoch", timeout_s=timeout_s
        )
        self.launched = reported
        mismatches = []
        for n, epoch in enumerate(epochs):
            drawn = self._partition_at(epoch)
            iterated = [r["orders"][n] for r in reported]
            if iterated != drawn:
                mismatches.append(f"epoch {epoch}: drawn {drawn}, iterated {iterated}")
        self.verified = not mismatches
        if self.verified:
            verdict = (
                f"Verified by a real launch: {counted(s['world_size'], 'rank')} built "
                f"DistributedSampler "
                f"from the process group and iterated exactly the drawn indices in every "
                f"epoch from {epochs[0]} to {epochs[-1]}."
            )
        else:
            verdict = "The real ranks iterated something else: " + "; ".join(mismatches)
        lists = "\n".join(
            f"rank {r['rank']} (sampler says num_replicas={r['num_replicas']}, "
            f"rank={r['sampler_rank']}): epoch {s['epoch']} {r['orders'][-1]}"
            for r in reported
        )
        return html_block(
            f'<p><b>{html.escape(verdict)}</b></p><pre style="margin:4px 0">{lists}</pre>',
            "ddp-verified",
        )

    def _verify_and_show(self) -> None:
        self.message.value = self.verify().data
