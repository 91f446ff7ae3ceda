"""The conditions of a measurement: how long to measure, and whether the machine was quiet.

:func:`effort` says how long each timing window is and how many there are
(short ones with ``$DDP_LESSON_BENCH_QUICK`` set, to show the code works);
:class:`Others` and :func:`busy` tell whether other processes used enough
of the machine meanwhile to distort the timings.
"""

from __future__ import annotations

import contextlib
import os
import time

import psutil

#: Set to 1 for a quick run (tests): short windows, one launch each; the numbers say little.
QUICK_ENV = "DDP_LESSON_BENCH_QUICK"

#: Share of the machine's cores that other processes may use while figures are
#: measured before the figures get a warning.
OTHERS_MAX = 0.10


def quick() -> bool:
    """True when ``$DDP_LESSON_BENCH_QUICK`` asks for a quick run."""
    return bool(os.environ.get(QUICK_ENV))


def effort() -> dict[str, float]:
    """How long to measure: ``window_s`` per timing window, ``windows`` per launch, ``repeats``.

    Two-second windows, two per launch, three launches per setup: enough
    steps at every batch for a median to hold. With ``$DDP_LESSON_BENCH_QUICK``
    set (the tests do), a run that only shows the code works.
    """
    if quick():
        return {"window_s": 0.05, "windows": 1, "repeats": 1}
    return {"window_s": 2.0, "windows": 2, "repeats": 3}


class Others:
    """The CPU time the rest of the machine uses from now on, this process's own work excluded.

    A load average cannot tell whether timings were disturbed: it counts this
    process's own ranks (two ranks measuring on two cores are a load of 2 on
    an idle machine), and it trails by a minute, so a job that has just
    ended still shows. This counts what every process of the machine used
    (``psutil.cpu_times``) less what this process and its descendants (the
    warm server, the ranks, their ended children) used, from creation on.
    A descendant that outlives its parent counts as this process's own while
    a launch of this process adopts it (every launch does, on Linux, until
    it ends); adopted by the system instead, it counts as another process.

    >>> others = Others()
    >>> 0.0 <= others.share() <= 1.0
    True
    """

    def __init__(self) -> None:
        self._started = (time.monotonic(), _machine_busy_s(), _family_s())

    def share(self) -> float:
        """Of the machine's cores since creation, the share other processes kept busy (0-1)."""
        elapsed = max(time.monotonic() - self._started[0], 1e-6)
        return min(1.0, self.others_s() / (elapsed * (os.cpu_count() or 1)))

    def others_s(self) -> float:
        """CPU seconds the machine's other processes used since creation."""
        return max(0.0, _machine_busy_s() - self._started[1] - self.own_s())

    def own_s(self) -> float:
        """CPU seconds this process and its descendants used since creation."""
        return _family_s() - self._started[2]


def _machine_busy_s() -> float:
    """CPU seconds every core of the machine has spent busy (not idle or waiting on disk)."""
    times = psutil.cpu_times()
    fields = ("user", "nice", "system", "irq", "softirq")
    return sum(getattr(times, name, 0.0) for name in fields)


def _family_s() -> float:
    """CPU seconds of this process and its live descendants, each with its ended children.

    Every descendant, helpers included: :func:`.launch.processes.descendants`
    leaves out multiprocessing's helpers, and the warm server is one; the
    ranks it forked and reaped count in its ``children_*`` times.
    """
    total = 0.0
    me = psutil.Process()
    for proc in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # ended meanwhile: its parent counts it
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def busy(others: Others | None = None, sample_s: float = 0.5) -> str:
    """A sentence when other processes used the machine enough to distort timings, else ``""``.

    Args:
        others: what to judge, from the start of a measurement; without it,
            the machine is watched for ``sample_s`` seconds now.
        sample_s: how long to watch when ``others`` is not given.
    """
    if others is None:
        others = Others()
        time.sleep(sample_s)
    share = others.share()
    if share > OTHERS_MAX:
        return (
            f"warning: other processes kept {share:.0%} of this machine's "
            f"{os.cpu_count() or 1} core(s) busy while measuring; run again on an idle "
            "machine before reading the numbers"
        )
    return ""
