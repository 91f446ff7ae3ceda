"""Reports that ranks send back to the notebook, and how the notebook prints them.

What a child process prints reaches JupyterLab but not a test run, and the
order of lines from several processes changes from run to run. So ranks print
nothing: each one calls :func:`send_report` with what it saw, and the parent
reads every rank's report and prints one table sorted by rank.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

import torch

from .validate import rows_of_mappings, whole_number


def counted(n: int, one: str, many: str | None = None) -> str:
    """``n`` with its noun, singular for one: what the course prints at any world size.

    >>> counted(1, "rank"), counted(3, "rank"), counted(1, "process", "processes")
    ('1 rank', '3 ranks', '1 process')
    """
    return f"{n} {one if n == 1 else (many or one + 's')}"

#: Where the supervised processes of a launch send their reports; set only by
#: the launch (:mod:`ddp_lesson.launch`), for the processes it starts.
REPORT_DIR_ENV = "DDP_LESSON_REPORT_DIR"


class Channel:
    """The folder where one launch's ranks leave their reports, one file per rank.

    A report is written whole or not at all (written aside, then renamed), so
    the launching process never reads half of one, even from a rank that is
    killed while it writes.

    Args:
        folder: the launch's report folder (created if missing).
    """

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)

    def send(self, rank: int, fields: Mapping[str, object]) -> None:
        """Write rank ``rank``'s report (replacing any earlier one from that rank)."""
        whole_number("rank", rank)
        self.folder.mkdir(parents=True, exist_ok=True)
        path = self.folder / f"rank_{int(rank):04d}.pt"
        partial = path.with_suffix(".partial")
        torch.save({"rank": rank, **fields}, partial)
        os.replace(partial, path)

    def send_progress(self, rank: int, done: int, total: int) -> None:
        """Write how far rank ``rank`` has got: ``done`` of ``total``."""
        path = self.folder / f"progress_{int(rank):04d}.txt"
        partial = path.with_suffix(".partial")
        partial.write_text(f"{done} {total}")
        os.replace(partial, path)

    def collect(self) -> list[dict]:
        """Every rank's report, sorted by rank."""
        return collect(self.folder)

    def progress(self) -> dict[int, tuple[int, int]]:
        """What each rank last wrote with :meth:`send_progress`: ``{rank: (done, total)}``."""
        return read_progress(self.folder)

    def reported(self) -> set[int]:
        """The ranks whose report has arrived."""
        return {int(p.stem.split("_")[1]) for p in self.folder.glob("rank_*.pt")}


#: Where this rank's reports go, set by connect(): a worker calls report() from
#: anywhere in its code, and the rank is the one thing those calls share.
_connected: Channel | None = None


def connect(folder: str | os.PathLike | None) -> None:
    """Send this process's reports to ``folder`` (``None``: print them instead).

    The launch calls this in every rank it starts, before the rank's
    function runs (see :func:`ddp_lesson.launch.ranks.enter`).
    """
    global _connected
    _connected = Channel(folder) if folder else None


def channel() -> Channel | None:
    """Where this process's reports go: the launch that started it, if any.

    A rank started by a course launch is connected explicitly; a process the
    launch started indirectly (a ``torchrun`` worker, the ranks of a script)
    finds the launch's folder in ``$DDP_LESSON_REPORT_DIR``, which only the
    launch sets.
    """
    if _connected is not None:
        return _connected
    folder = os.environ.get(REPORT_DIR_ENV)
    return Channel(folder) if folder else None


def send_report(rank: int, **fields: object) -> None:
    """Send this rank's findings back to the process that launched it.

    Values may be numbers, strings, lists, dicts and tensors. Outside a
    supervised launch (a worker run by hand as a script) the report is
    printed instead.

    Args:
        rank: the rank of the calling process.
        **fields: what to report, e.g. ``device="cpu"``.
    """
    whole_number("rank", rank)
    destination = channel()
    if destination is None:
        print(f"[rank {rank}]", fields)
        return
    destination.send(rank, fields)


def send_typed(report: Mapping[str, Any]) -> None:
    """Send a report built as a probe's ``TypedDict``, which holds its own ``"rank"``.

    The launching process reads it back with :func:`read_as` and the same type.
    """
    send_report(report["rank"], **{key: value for key, value in report.items() if key != "rank"})


#: A report type: a ``TypedDict`` that holds "rank" and what a probe measured.
Report = TypeVar("Report", bound=Mapping[str, Any])


class ReportMismatch(TypeError):
    """A rank's report whose keys are not those of the type it is read as."""


def sends(kind: type[Report]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Declare which ``TypedDict`` a rank function sends: ``@sends(GroupReport)``.

    The launching process reads the reports of that function's ranks with
    :func:`reports_of`, so the type is written once, beside the function.
    """

    def declare(function: Callable[..., None]) -> Callable[..., None]:
        function.sends = kind  # type: ignore[attr-defined]
        return function

    return declare


def read_as(kind: type[Report], reports: Iterable[Mapping[str, Any]]) -> list[Report]:
    """``reports`` as ``kind``, after checking each holds exactly the keys ``kind`` declares.

    Raises:
        ReportMismatch: a report lacks a declared key or holds one ``kind`` does not
            declare (the rank function and its type have drifted apart).

    >>> from typing import TypedDict
    >>> class Seen(TypedDict):
    ...     rank: int
    ...     total: float
    >>> read_as(Seen, [{"rank": 0, "total": 1.0}])
    [{'rank': 0, 'total': 1.0}]
    >>> try:
    ...     read_as(Seen, [{"rank": 0, "sum": 1.0}])
    ... except ReportMismatch as error:
    ...     print(error)
    rank 0's report is not a Seen: missing ['total'], not declared ['sum']
    """
    declared = set(kind.__required_keys__) | set(kind.__optional_keys__)  # type: ignore[attr-defined]
    read = []
    for report in reports:
        missing = sorted(set(kind.__required_keys__) - set(report))  # type: ignore[attr-defined]
        extra = sorted(set(report) - declared)
        if missing or extra:
            raise ReportMismatch(
                f"rank {report.get('rank')}'s report is not a {kind.__name__}: "
                f"missing {missing}, not declared {extra}"
            )
        read.append(report)
    return read  # type: ignore[return-value]


def reports_of(function: Callable[..., None], reports: Iterable[Mapping[str, Any]]) -> list:
    """The reports of ``function``'s ranks, read as the type it declares with :func:`sends`."""
    kind = getattr(function, "sends", None)
    if kind is None:
        raise TypeError(f"{function.__qualname__} declares no report type: add @sends(...)")
    return read_as(kind, reports)


def send_progress(rank: int, done: int, total: int) -> None:
    """Tell the launching notebook how far this rank has got (e.g. epochs done).

    The notebook can show it while ``mp.spawn`` is still running (see
    :func:`ddp_lesson.views.progress`). Outside a supervised launch it does
    nothing, so a worker run as a script stays quiet.

    Args:
        rank: the rank of the calling process.
        done: steps (or epochs) finished so far.
        total: steps (or epochs) this rank will do in all.
    """
    whole_number("rank", rank)
    whole_number("done", done)
    whole_number("total", total, minimum=1)
    destination = channel()
    if destination is not None:
        destination.send_progress(rank, done, total)


def watch_indices(
    loader: object, into: list, each_epoch: Callable[[int], object] | None = None
) -> None:
    """Record, epoch by epoch, the data-set indices ``loader`` hands out, as it iterates.

    Each time the loader starts an epoch a new list is appended to ``into``
    and filled with the indices its sampler yields, in order: exactly what
    the training loop receives. The loader keeps working as before, and
    ``loader.sampler`` (where ``set_epoch`` is called) is left as it is.

    Args:
        loader: a ``DataLoader`` with a batch size (it batches indices).
        into: the list to fill (one list per epoch).
        each_epoch: called with the number of epochs handed out so far,
            when an epoch's last index has been handed out.

    >>> from torch.utils.data import DataLoader
    >>> seen = []
    >>> loader = DataLoader(list(range(5)), batch_size=2)
    >>> watch_indices(loader, seen)
    >>> [len(batch) for batch in loader], seen
    ([2, 2, 1], [[0, 1, 2, 3, 4]])
    """
    batches = getattr(loader, "batch_sampler", None)
    if batches is None or not hasattr(batches, "sampler"):
        raise TypeError(
            "watch_indices needs a DataLoader that batches its indices (give it a batch_size), "
            f"got {type(loader).__name__}"
        )
    batches.sampler = _Watched(batches.sampler, into, each_epoch)


class _Watched:
    """A sampler seen through: the same indices, also written down per epoch."""

    def __init__(self, sampler: object, into: list, each_epoch: Callable | None):
        self._sampler, self._into, self._each_epoch = sampler, into, each_epoch

    def __iter__(self):
        epoch: list[int] = []
        self._into.append(epoch)
        for index in self._sampler:
            epoch.append(int(index))
            yield index
        if self._each_epoch is not None:
            self._each_epoch(len(self._into))

    def __len__(self) -> int:
        return len(self._sampler)

    def __getattr__(self, name: str):
        return getattr(self._sampler, name)


def read_progress(folder: str | os.PathLike) -> dict[int, tuple[int, int]]:
    """Read what :func:`send_progress` last wrote for each rank: ``{rank: (done, total)}``."""
    found = {}
    for path in Path(folder).glob("progress_*.txt"):
        try:
            done, total = (int(v) for v in path.read_text().split())
        except (OSError, ValueError):
            continue  # replaced or removed while reading: the next poll sees it
        found[int(path.stem.split("_")[1])] = (done, total)
    return dict(sorted(found.items()))


def collect(folder: str | os.PathLike) -> list[dict]:
    """Read every rank's report from ``folder``, sorted by rank."""
    reports = [torch.load(p, weights_only=True) for p in sorted(Path(folder).glob("rank_*.pt"))]
    return sorted(reports, key=lambda r: r["rank"])


def _cell(value: object, digits: int) -> str:
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return _cell(value.item(), digits)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_cell(v, digits) for v in value) + "]"
    return str(value)


def table(rows: Iterable[Mapping], columns: Sequence[str], *, digits: int = 4) -> str:
    """Format ``rows`` as a fixed-width text table with the given ``columns``.

    Floats are rounded to ``digits`` places so that printed summaries stay
    identical across runs of the same code.

    Args:
        rows: one mapping per rank (or per anything).
        columns: the keys to show, in order; a missing key shows as ``-``.
        digits: decimal places for floats.

    >>> print(table([{"rank": 1, "loss": 0.123456}, {"rank": 0}], ["rank", "loss"]))
    rank  loss
       1  0.1235
       0  -
    """
    rows = rows_of_mappings("rows", rows)
    if isinstance(columns, str) or not columns:
        raise TypeError(f"columns must be a non-empty list of keys, e.g. ['rank'], got {columns!r}")
    whole_number("digits", digits)
    cells = [[_cell(r[c], digits) if c in r else "-" for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]

    def line(values: Sequence[str], header: bool = False) -> str:
        out = []
        for value, width in zip(values, widths, strict=True):
            numeric = not header and value.replace(".", "", 1).lstrip("-").isdigit()
            out.append(value.rjust(width) if numeric else value.ljust(width))
        return "  ".join(out).rstrip()

    return "\n".join([line(columns, header=True)] + [line(row) for row in cells])


def max_abs_difference(tensors: Sequence[torch.Tensor]) -> float:
    """The largest absolute difference between the first tensor and any other.

    >>> max_abs_difference([torch.tensor([1.0, 2.0]), torch.tensor([1.0, 2.5])])
    0.5
    """
    if len(tensors) < 2:
        return 0.0
    first = tensors[0]
    for other in tensors[1:]:
        if other.shape != first.shape:
            raise ValueError(
                f"tensors must all have the same shape to compare, got {tuple(first.shape)} "
                f"and {tuple(other.shape)}"
            )
    return max(float((t - first).abs().max()) for t in tensors[1:])
