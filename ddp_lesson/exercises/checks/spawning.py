"""The check of notebook 02's exercise: ``start`` launches one process per device, by rank.

A right answer starts ``world_size`` processes whichever number it is
given, so the check calls it twice: with this machine's world size, and
with one more (as on a machine with another device), where an ``nprocs``
written in as a number starts the wrong count.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable

from ... import devices, launch, reports
from ...stages import stage
from ..probes import stage_workers as probes
from . import base, world_size_cell
from .base import Result, failed, graded, not_attempted, passed, quote

SPAWNING = stage("spawning").title


@graded
def check_spawn(start: Callable, world_size: object, *, reveal: bool = False) -> Result:
    """Check ``start(main, world_size, port)`` starts one process per device with the right ranks.

    Then ``start`` is called again with one rank more, as on a machine with
    another device: it must start that many. In a notebook, the cell that set
    ``world_size`` is also run again as on other machines
    (:mod:`.world_size_cell`).

    Args:
        start: the learner's function; it must call ``mp.spawn`` on ``main``.
        world_size: the learner's world size for this machine.
        reveal: show the line that fixes a failure now, even on a first try.
    """
    name = "check_spawn"
    plan = devices.plan()
    if base.is_stub(world_size):
        return not_attempted(name, "the world_size line")
    wrong = _world_size_for_machine(name, plan, world_size)
    if wrong is None:  # (a failed Result is falsy: each step is asked in turn)
        wrong = world_size_cell.cell_wrong(name)
    if wrong is None:
        wrong = _started(name, start, world_size)
    other = devices.another_size(world_size)
    if wrong is None and other is not None:
        wrong = _elsewhere(_started(name, start, other), other)
    if wrong is not None:
        return wrong
    also = f"; given world_size={other} instead, it started ranks {list(range(other or 0))}"
    return passed(
        name, f"ranks {list(range(world_size))} each started once, all told world_size="
        f"{world_size}{also if other else ''}."
    )  # fmt: skip


def _started(name: str, start: Callable, world_size: int) -> Result | None:
    """A failure unless ``start(main, world_size, port)`` runs each rank of world_size once."""
    got = _spawned(name, start, world_size)
    if isinstance(got, Result):
        return got
    wrong = _one_process_per_rank(name, world_size, [r["rank"] for r in got])
    if wrong is None:
        wrong = _told_world_size(name, got, world_size)
    return wrong if wrong is not None else _one_after_another(name, got)


def _one_after_another(name: str, got: list[probes.RankReport]) -> Result | None:
    """A failure if some rank ran while the others of its world were not running."""
    alone = sorted(r["rank"] for r in got if not r["together"])
    if not alone:
        return None
    return failed(
        name,
        stage=SPAWNING,
        expected="every rank running at the same time, as a process group needs them",
        happened=f"{'rank' if len(alone) == 1 else 'ranks'} {', '.join(map(str, alone))} "
        f"waited {probes.TOGETHER_S:.0f} s for the other ranks to be running, and they were "
        "not: the processes ran one after another, so in a real run the first would wait in "
        "init_process_group for partners that start only after it ends",
        fix="start(): does it wait for a process to end before it starts the next one?",
    )


def _elsewhere(wrong: Result | None, world_size: int) -> Result | None:
    """``wrong``, said to come from the call with another world size than this machine's."""
    if wrong is None or wrong.status != base.FAILED:
        return wrong
    return dataclasses.replace(
        wrong,
        happened=f"called again as start(main, {world_size}, port), on this same machine, "
        f"as for a world of {world_size}: {wrong.happened}",
        fix=f"{wrong.fix} (start is given world_size: does every number in it follow that "
        "argument?)",
    )


def _world_size_for_machine(name: str, plan: devices.Plan, world_size: object) -> Result | None:
    """A failure if the learner's world size is not one process per device on this machine."""
    if world_size != plan.world_size:
        return failed(
            name,
            stage=SPAWNING,
            expected=f"world_size = {plan.world_size}: one process per device on this machine "
            f"({plan.reason})",
            happened=f"world_size = {world_size!r}"
            + (" (torch.cuda.device_count() is 0 without GPUs)" if world_size == 0 else ""),
            fix="the world_size line: torch.cuda.device_count() where there are 2 GPUs or "
            "more, else 2 CPU processes (DDP_LESSON_WORLD_SIZE asks this course for another)",
        )
    return None


def _spawned(name: str, start: Callable, world_size: int) -> list[probes.RankReport] | Result:
    """Run the learner's ``start`` around a probe and return the ranks' reports, or its failure.

    The launch's report folder is in this process's environment while
    ``start`` runs, so a rank started past the launch (through a
    ``functools.partial(mp.start_processes, ...)`` made before the check
    ran) still reports.
    """
    try:
        with launch.bounded(world_size, timeout_s=base.CHECK_TIMEOUT_S) as run:
            with _reports_to(run.channel.folder, run.port):
                start(probes.report_rank, world_size, run.port)
    except NotImplementedError:
        return not_attempted(name, "start()")
    except launch.LaunchError as error:
        return _launch_failure(name, world_size, error)
    except Exception as error:  # learner code: report it, never a traceback wall
        return failed(
            name,
            stage=SPAWNING,
            expected="start() to run without an error",
            happened=quote(error),
            fix="the body of start(): one call to mp.spawn",
        )
    got = reports.reports_of(probes.report_rank, run.reports)
    if run.state.unjoined and run.state.stopped and len(got) < world_size:
        return failed(
            name,
            stage=SPAWNING,
            expected="start() to return once its processes have ended",
            happened=f"start() returned while {run.state.stopped} of the processes it started "
            "were still running (they were started with join=False, which hands back at "
            "once), so the check's run ended with start() and stopped them before they "
            "reported",
            fix="start(): what does it wait for before it returns?",
        )
    elsewhere = sorted({r["port"] for r in got} - {run.port})
    if elsewhere:
        return failed(
            name,
            stage=SPAWNING,
            expected="main given the port start() was given",
            happened=f"main was given port {', '.join(map(str, elsewhere))}, not the one "
            "start() was given: the ranks are to meet at that one, and nothing waits for them "
            "at another",
            fix="start(): which port does it hand main, and where does that number come from?",
        )
    return got


class _reports_to:
    """``with _reports_to(folder, port):`` processes started inside send their reports to
    ``folder``, and know the launch's ``port`` (:data:`.probes.stage_workers.LAUNCH_PORT_ENV`)."""

    def __init__(self, folder, port: int) -> None:
        self.given = {reports.REPORT_DIR_ENV: str(folder), probes.LAUNCH_PORT_ENV: str(port)}

    def __enter__(self) -> None:
        self.before = {key: os.environ.get(key) for key in self.given}
        os.environ.update(self.given)

    def __exit__(self, *exc) -> None:
        for key, value in self.before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _launch_failure(name: str, world_size: int, error: launch.LaunchError) -> Result:
    """The failure for a launch by ``start`` that raised: wrong arguments, no process, or other."""
    text = str(error)
    if "positional argument" in text:
        return failed(
            name,
            stage=SPAWNING,
            expected="main(rank, world_size, port) called with rank supplied by mp.spawn",
            # (the main start() was given is the check's own, report_rank: named as start's)
            happened=quote(error).replace(f"{probes.report_rank.__name__}()", "main()"),
            fix="the mp.spawn call: mp.spawn hands each process its rank as main's first "
            "argument; which of main's arguments does args= hold, then?",
            answer="mp.spawn(main, args=(world_size, port), nprocs=world_size)",
        )
    other = re.search(r"nprocs=(\d+)\) inside launch\.bounded\(world_size=(\d+)\)", text)
    if other:
        return _other_count(name, int(other[1]), int(other[2]))
    if "no process was started" in text:
        return failed(
            name,
            stage=SPAWNING,
            expected=reports.counted(world_size, "process", "processes"),
            happened="no process was started (nprocs=0 starts nothing, silently)",
            fix="the mp.spawn call: how many processes does its nprocs ask for?",
            answer="nprocs=world_size",
        )
    return failed(
        name,
        stage=SPAWNING,
        expected="every rank to run main",
        happened=quote(error),
        fix="start(): how are the processes started, and with which arguments?",
    )


def _other_count(name: str, nprocs: int, world_size: int) -> Result:
    """The failure for a start of ``nprocs`` processes for ``world_size`` ranks, in start()'s terms.

    The check refuses such a start before any process runs (the ranks
    started would wait in their group for ranks that never come), so the
    message says what start() asked for and that nothing was started.
    """
    if nprocs < world_size:
        what = (
            f"only {_ranks(0, nprocs - 1)} would have run main, and "
            f"{_ranks(nprocs, world_size - 1)} never"
        )
    else:
        what = f"{nprocs} processes would have run main for {world_size} ranks"
    return failed(
        name,
        stage=SPAWNING,
        expected=f"one process for each of the {world_size} ranks",
        happened=f"start() asked for {nprocs} process(es) (nprocs={nprocs}), and world_size is "
        f"{world_size}: {what}, so the check started none",
        fix="start(), where it starts the processes: how many processes does it ask for, for "
        "world_size ranks?",
    )


def _ranks(first: int, last: int) -> str:
    return f"rank {first}" if first == last else f"ranks {first} to {last}"


def _one_process_per_rank(name: str, world_size: int, ranks: list[int]) -> Result | None:
    """A failure if the ranks reported are not 0 to world_size - 1, one process each."""
    expected = list(range(world_size))
    if ranks != expected:
        return failed(
            name,
            stage=SPAWNING,
            expected=f"ranks {expected}, one process each",
            happened=f"ranks {ranks} reported"
            + (
                " (the check hears from the processes mp.spawn or mp.start_processes starts, "
                "and from no others)"
                if not ranks
                else ""
            ),
            fix="start(): how many processes does it start with mp.spawn, and is each given a "
            "rank of its own?",
        )
    return None


def _told_world_size(name: str, got: list[probes.RankReport], world_size: object) -> Result | None:
    """A failure if some rank was told another world size than the learner's."""
    if {r["world_size"] for r in got} != {world_size}:
        return failed(
            name,
            stage=SPAWNING,
            expected=f"every rank told world_size={world_size}",
            happened=f"ranks were told {[r['world_size'] for r in got]}",
            fix="start(): what is each process told as its world size?",
        )
    return None
