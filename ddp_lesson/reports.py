"""Reports that ranks send back to the notebook, and how the notebook prints them.

What a child process prints reaches JupyterLab but not a test run, and the
order of lines from several processes changes from run to run. So ranks print
nothing: each one calls :func:`send_report` with what it saw, and the parent
reads every rank's report and prints one table sorted by rank.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import torch

from .validate import rows_of_mappings, whole_number

#: Set by :func:`ddp_lesson.launch.bounded` for the processes it supervises.
REPORT_DIR_ENV = "DDP_LESSON_REPORT_DIR"

#: The pid of the process that opened the launch (set with ``REPORT_DIR_ENV``).
LAUNCHER_PID_ENV = "DDP_LESSON_LAUNCHER_PID"


def _alive(pid: int) -> bool:
    """True while process ``pid`` runs (a zombie, dead but not yet reaped, is not running)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        if os.path.isdir("/proc/self"):  # Linux: no entry, no process
            return False
    except (OSError, IndexError):
        pass
    try:  # no /proc (macOS): ask the kernel whether the pid exists
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _die_with_parent() -> None:
    """Stop this rank as soon as the process that launched it is gone.

    torch.multiprocessing asks Linux for SIGINT on parent death, which does
    nothing in a process that ignores SIGINT (anything started in the
    background inherits that). A kernel that is killed or restarted mid-launch
    must not leave ranks behind, so a supervised rank also watches, from a
    small daemon thread, both its parent (a forked rank's parent is the
    forkserver) and the process that opened the launch, whose pid
    :func:`ddp_lesson.launch.bounded` passes down. The second matters when the
    kernel dies while a rank is still importing torch: by the time this runs,
    the rank's parent may already be whatever adopted it.
    """
    import threading
    import time

    parent = os.getppid()
    launcher = int(os.environ.get(LAUNCHER_PID_ENV) or 0)

    def orphaned() -> bool:
        return os.getppid() != parent or (launcher > 0 and not _alive(launcher))

    def watch() -> None:
        while not orphaned():
            time.sleep(0.5)
        os.kill(os.getpid(), signal.SIGKILL)

    if orphaned():  # gone before this rank got here
        os.kill(os.getpid(), signal.SIGKILL)
    threading.Thread(target=watch, name="ddp-lesson-parent-watch", daemon=True).start()


def _quick_exit() -> None:
    """Spare this rank the interpreter's last garbage collections when it exits.

    At exit Python walks every object still alive looking for reference
    cycles; after importing torch and a first ``DDP(...)`` that is several
    hundred thousand objects and 0.6-0.7 s per rank, on every launch.
    Nothing a rank leaves behind needs a cycle collected to finish its work
    (reports and progress are written as they are sent), so at exit the
    objects are frozen: the collector skips them, and the rest of shutdown
    (atexit handlers, module teardown, reference counting) happens as usual.
    """
    import atexit
    import gc

    atexit.register(gc.freeze)


if os.environ.get(REPORT_DIR_ENV):  # only in ranks started by launch.bounded
    _die_with_parent()
    _quick_exit()


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
    report = {"rank": rank, **fields}
    folder = os.environ.get(REPORT_DIR_ENV)
    if not folder:
        print(f"[rank {rank}]", {k: v for k, v in report.items() if k != "rank"})
        return
    path = Path(folder) / f"rank_{int(rank):04d}.pt"
    partial = path.with_suffix(".partial")
    torch.save(report, partial)
    os.replace(partial, path)  # the parent never sees half a report


def send_progress(rank: int, done: int, total: int) -> None:
    """Tell the launching notebook how far this rank has got (e.g. epochs done).

    The notebook can show it while ``mp.spawn`` is still running (see
    :func:`ddp_lesson.widgets.progress`). Outside a supervised launch it does
    nothing, so a worker run as a script stays quiet.

    Args:
        rank: the rank of the calling process.
        done: steps (or epochs) finished so far.
        total: steps (or epochs) this rank will do in all.
    """
    whole_number("rank", rank)
    whole_number("done", done)
    whole_number("total", total, minimum=1)
    folder = os.environ.get(REPORT_DIR_ENV)
    if not folder:
        return
    path = Path(folder) / f"progress_{int(rank):04d}.txt"
    partial = path.with_suffix(".partial")
    partial.write_text(f"{done} {total}")
    os.replace(partial, path)


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
