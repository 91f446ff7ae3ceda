"""Judging the evidence: each stage's verdict from what the ranks did, explained by the code.

The run decides. A stage is at FAULT only when the run shows it: a rank
raised at a line of that stage, the doctor had to stop a rank, or what the
ranks recorded disagrees (shards that overlap, an order that repeats,
parameters that differ, a group left open). What the code shows
(:mod:`.read`) then explains the fault and names the line that owns the
fix; on its own it never makes a verdict: a stage the run showed to be
fine is OK however its code is written, and a stage the run never reached
is NOT CHECKED, with what the code suggests. A run that ended before some
stage could be checked is no healthy one: it fails, quoting what it printed.

This module makes the diagnosis (:func:`verdict`) and the one-line
problems of a run that could not be judged (:func:`import_problem`,
:func:`nothing_checked`). What the run shows of each part is judged in
:mod:`.judge_processes` (spawning, the group, teardown),
:mod:`.judge_data` and :mod:`.judge_model`; :mod:`.judge_crash` finds
what cut the run short, :mod:`.judge_ending` how it ended and what that
left unchecked, :mod:`.judge_notes` the notes under the verdicts, and
:mod:`.judge_evidence` holds what they share.
"""

from __future__ import annotations

import dataclasses

from ..stages import KEYS
from .judge_crash import STEPS_APART, crash_finding, crashes, stop_reasons
from .judge_data import data_verdict
from .judge_ending import passed_unseen, printed, unfinished, why_not_run
from .judge_evidence import Shown
from .judge_model import model_verdict, unused_parameters
from .judge_notes import add_notes
from .judge_processes import judge_group, judge_spawning, judge_teardown
from .judge_streams import NOT_DIVIDED, UNEVEN
from .read import TORCHRUN, Reading
from .record import WAITED_IN_STEP, Outcome, ProcessRecord
from .verdict import FAULT, NOT_CHECKED, OK, Diagnosis, StageVerdict, title


def _stage_verdict(
    key: str, reading: Reading, shown: list[Shown], fine: dict, stopped: str,
    not_run: str, faults: list[str],
) -> StageVerdict:  # fmt: skip
    """One stage's verdict: FAULT if the run showed one, OK if it showed the stage working."""
    code = sorted((f for f in reading.findings if f.stage == key), key=lambda f: f.line or 0)
    ran: list[Shown] = []
    for item in shown:
        same = any(item.finding.evidence == s.finding.evidence for s in ran)
        if item.finding.stage == key and not same:
            ran.append(item)
    if ran or (not_run and code):
        exact = [s.finding.line for s in ran if s.exact and s.finding.line]
        located = [f.line for f in code if f.line] + [s.finding.line for s in ran if s.finding.line]
        line = next(iter(exact + located), reading.lines.get(key))
        parts = [f"run: {s.finding.evidence}" for s in ran] + [f"code: {f.evidence}" for f in code]
        return StageVerdict(FAULT, "; ".join(parts), line, parts)
    if key in fine:
        return StageVerdict(OK, fine[key], reading.lines.get(key))
    reason = (
        stopped
        or (faults and f"the run ended at the {title(faults[0])} fault")
        or "the run showed nothing about this stage"
    )
    evidence = f"not reached: {reason}"
    if code:
        evidence += "; the code suggests: " + "; ".join(f.evidence for f in code)
    return StageVerdict(NOT_CHECKED, evidence, None)


def launches(ranks: list[ProcessRecord]) -> list[list[ProcessRecord]]:
    """The ranks by the start of processes that made them: each one's group is judged alone.

    A script that starts several groups (a sweep, one group after another)
    trains each apart: their data and parameters are compared within a group.
    """
    groups: dict[int, list[ProcessRecord]] = {}
    for r in ranks:
        groups.setdefault(r.launch, []).append(r)
    return [groups[k] for k in sorted(groups)]


def _uneven_explains(shown: list[Shown]) -> tuple[list[Shown], bool]:
    """``shown`` less a rank's wait for a partner in its extra DDP step when the ranks'
    batches were uneven: that (splitting the data) is the cause, not how they connected."""
    if not any(UNEVEN in s.finding.evidence for s in shown):
        return shown, False
    return [
        s for s in shown
        if not (s.finding.stage == "process_group" and WAITED_IN_STEP in s.finding.evidence)
    ], True  # fmt: skip


def _asked_in_workers(reading: Reading, shown: list[Shown]) -> None:
    """A stream every rank received whole, from a dataset that asks the group for its rank:
    the DataLoader's workers run that question, where there is no group."""
    line = reading.group_in_dataset
    for s in shown if line is not None else ():
        if s.finding.stage == "data_division" and NOT_DIVIDED in s.finding.evidence:
            s.finding.evidence = s.finding.evidence.split("; split the stream")[0] + (
                f"; the dataset asks the process group for the rank (line {line}), but "
                "__iter__ runs in the DataLoader's worker processes, which a process started "
                "by spawn (as mp.spawn starts each rank) starts by spawn too, without the "
                "group: there dist.is_initialized() is False and no rank is known. Give the "
                "dataset the rank and world size in the training process (its __init__ runs "
                "there), and keep splitting each rank's share among the loader workers in "
                "__iter__ (get_worker_info() answers there)"
            )


def verdict(
    reading: Reading, outcome: Outcome, world_size: int, not_run: str = ""
) -> Diagnosis:
    """Each stage's verdict from what the run showed, explained by what the code says.

    Args:
        reading: what the code says (:func:`ddp_lesson.doctor.read.read`).
        outcome: what the run left (:func:`ddp_lesson.doctor.run.run_probed`).
        world_size: the processes the doctor asked for.
        not_run: why the file was not run at all (then the code's findings are
            the verdicts, since running it is not possible).
    """
    ranks = outcome.ranks
    diagnosis = Diagnosis(str(reading.path), ranks=ranks, launch=outcome.launch)
    crashed = crashes(outcome)
    crash = crash_finding(reading, crashed, unused_parameters(ranks), ranks, outcome.script)
    diagnosis.failure = crash.failure
    shown = stop_reasons(outcome)
    fine: dict[str, str] = {}
    disproved: set[str] = set()
    for judged in (
        crash,
        judge_spawning(reading, outcome),
        judge_group(ranks, stand_in=outcome.stand_in, reading=reading),
        *[data_verdict(group) for group in launches(ranks)],
        *[model_verdict(group, crashed, stand_in=outcome.stand_in) for group in launches(ranks)],
        judge_teardown(reading, outcome),
    ):
        shown.extend(judged.shown)
        fine.update(judged.fine)
        disproved.update(judged.disproved)
    shown, uneven = _uneven_explains(shown)
    if uneven and crash.failure is not None and STEPS_APART in crash.failure.evidence:
        diagnosis.failure = None  # a rank left waiting for its extra step: the data's fault
    _asked_in_workers(reading, shown)
    if "teardown" in fine and any(UNEVEN in s.finding.evidence for s in shown):
        fine["teardown"] += (
            " in the doctor's short run, which takes the same few batches on every rank; run "
            "in full, the rank with more batches would first wait at its extra step (see "
            "splitting the data)"
        )
    if disproved:  # the run showed these guesses of the code wrong
        kept = [f for f in reading.findings if f.stage not in disproved]
        reading = dataclasses.replace(reading, findings=kept)
    stopped = not_run or why_not_run(outcome, reading)
    if uneven and stopped.endswith(f"the {title('process_group')} fault"):
        stopped = f"the run ended at the {title('data_division')} fault"
    for key in KEYS:
        diagnosis.stages[key] = _stage_verdict(
            key, reading, shown, fine, stopped, not_run, diagnosis.faults
        )
    passed_unseen(diagnosis)
    if diagnosis.failure is None and not diagnosis.faults:
        diagnosis.failure = unfinished(reading, outcome, diagnosis)
    diagnosis.completed = not (outcome.timed_out or outcome.error or not_run)
    diagnosis.notes = add_notes(reading, outcome, diagnosis)
    return diagnosis


def import_problem(reading: Reading, outcome: Outcome) -> str:
    """A one-line problem when the file crashed before any process could run main."""
    name = reading.path.name
    crashed = [r for r in outcome.ranks if (r.error or {}).get("import")]
    script = outcome.script
    if crashed:
        e = crashed[0].error
    elif script is not None and not script.spawns and script.error:
        e = script.error
        if e.get("interrupted"):
            return ""
    else:
        return ""
    at = f" (line {e['line']})" if e["line"] else ""
    said = printed(outcome.output) if e["type"] == "SystemExit" else ""
    return (
        f"{name} crashed before any process could run main: {e['type']}: {e['message']}"
        f"{at}" + (f"; the last lines it printed: {said}" if said else "")
        + "; fix that, then run the doctor again"
    )


def nothing_checked(diagnosis: Diagnosis, outcome: Outcome, reading: Reading) -> str:
    """A one-line problem when the run checked no stage at all (which is no success)."""
    if diagnosis.faults or diagnosis.failure is not None:
        return ""
    if any(v.status == OK for v in diagnosis.stages.values()):
        return ""
    why = why_not_run(outcome, reading) or "the processes it started did nothing the doctor checks"
    hint = (
        "; if the script only needs longer, pass a larger --timeout"
        if outcome.timed_out
        else "; make sure it starts its processes and trains when run as "
        + ("torchrun runs it" if reading.mode == TORCHRUN else "a script")
    )
    said = printed(outcome.output)
    said = f"; the last lines it printed: {said}" if said else ""
    return f"nothing in {reading.path.name} could be checked: {why}{said}{hint}"
