"""How the run ended, and what that left unchecked.

Why a stage was not reached (:func:`why_not_run`: the doctor's stop, the
deadline, a crash, a script that never spawned, processes that returned),
where the processes were when the deadline came, the last lines the run
printed, stages the run went past without showing, and the failure of a
run that ended badly or early with no stage at fault: a run is healthy
only when it shows every stage working.
"""

from __future__ import annotations

from .judge_crash import crashes
from .judge_evidence import ranks_text
from .read import TORCHRUN, Reading
from .record import Outcome
from .verdict import FAULT, NOT_CHECKED, OK, Diagnosis, StageVerdict, title


def _where(outcome: Outcome, reading: Reading) -> tuple[str, int | None]:
    """Where the processes were when the deadline stopped them (the ranks, else the script).

    Returns the words (starting with a space, or empty) and the line, when
    they all were at one.
    """
    places = []
    who = "the processes were" if outcome.ranks else "the script was"
    for r in outcome.ranks or ([outcome.script] if outcome.script else []):
        if r.waiting:
            places.append((f"waiting in {r.waiting['op']}() at line", r.waiting["line"]))
        elif r.stopped_at:
            places.append(("at line", r.stopped_at))
        elif r.error and r.error.get("interrupted") and r.error.get("line"):
            places.append(("at line", r.error["line"]))
    unique = list(dict.fromkeys(places))
    if not unique:
        return "", None
    lines = {line for _, line in unique}
    text = "; ".join(f"{how} {line}" for how, line in unique)
    if len(lines) == 1:
        line = unique[0][1]
        quoted = reading.source(line)
        return f" ({who} {text}" + (f": `{quoted}`)" if quoted else ")"), line
    return f" ({who} {text})", None


def why_not_run(outcome: Outcome, reading: Reading) -> str:
    """One sentence on why the run ended early, if it did."""
    own = [outcome.script] if outcome.script is not None else []
    stops = [r for r in outcome.ranks + own if r.stop]
    if stops:
        return f"the run ended at the {title(stops[0].stop['stage'])} fault"
    if outcome.timed_out:
        # The deadline comes first: stopping the ranks makes each of them
        # raise (KeyboardInterrupt, SystemExit), which is not their fault.
        return (
            f"the run did not finish within its deadline of {outcome.timeout_s:g} s and "
            f"was stopped{_where(outcome, reading)[0]}"
        )
    crashed = crashes(outcome)
    if crashed:
        e = crashed[0][1]
        at = f" at line {e['line']}" if e["line"] else ""
        return f"a rank raised {e['type']}{at}"
    script = outcome.script
    pools = [s for s in (script.spawns if script else []) if s.get("by") == "multiprocessing.Pool"]
    if pools and not outcome.ranks:
        return (
            f"the script started a multiprocessing Pool (line {pools[0]['line']}), and no "
            "task it sent its workers reached a step the doctor checks"
        )
    if script is not None and not script.spawns:
        e = script.error
        if e:
            return f"the script raised {e['type']}: {e['message']} before starting any process"
        reads = (
            " (it reads torchrun's variables, but went on without them)"
            if reading.reads_torchrun else ""
        )  # fmt: skip
        from .sandbox import programs_started

        started = programs_started("\n".join(reading.sources)) if reading.sources else []
        others = (
            f"; the programs it starts (line {', '.join(map(str, started))}) are not followed: "
            "start the ranks with mp.spawn, or start each child with torchrun's variables "
            "(RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) in its environment: the doctor then "
            "runs the children under torchrun"
            if started else ""
        )  # fmt: skip
        return (
            "the script ended without starting any process (mp.spawn, start_processes, "
            f"elastic_launch, multiprocessing.Process) or needing torchrun's variables{reads}"
            f"{others}"
        )
    ended = _returned(outcome, reading)
    return f"{ended} before this stage" if ended else ""


def _returned(outcome: Outcome, reading: Reading) -> str:
    """Which processes ended normally, in words ("main returned on ranks 0, 1"), if any did."""
    ranks = sorted(r.rank for r in outcome.ranks if r.returned)
    if not ranks or outcome.timed_out or outcome.error:
        return ""
    if reading.mode == TORCHRUN:
        return f"the script ended on {ranks_text(ranks)}"
    return f"main returned on {ranks_text(ranks)}"


#: Lines of the run's output quoted when it ended before the doctor could check a stage.
OUTPUT_LINES = 3


def printed(output: str, most: int = OUTPUT_LINES) -> str:
    """The last lines a run printed, quoted on one line (``""`` when it printed nothing).

    >>> printed("epoch 0\\nno GPU found, stopping\\n")
    '`epoch 0` / `no GPU found, stopping`'
    """
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return " / ".join(
        f"`{line if len(line) <= 160 else line[:157] + '...'}`" for line in lines[-most:]
    )


def _ended_badly(outcome: Outcome) -> str:
    """Why the run failed although no process recorded an exception (a signal, a kill...)."""
    codes = [c for c in outcome.codes if c]
    if outcome.error is not None:
        first = str(outcome.error).strip().splitlines()
        return f"the launch failed: {first[0] if first else type(outcome.error).__name__}"
    if codes:
        return f"the launcher exited with code {codes[0]}"
    return ""


#: Why the run may pass a stage without showing it, by stage.
UNSEEN = {
    "data_division": "no DataLoader was iterated (the data may come from tensors made "
                     "in the loop, or from a generator of the script's own)",
}


def passed_unseen(diagnosis: Diagnosis) -> None:
    """Say so where the run went past a stage without showing it: it did not end before it.

    Only a later stage the run showed working proves the run went past: a
    FAULT there may be where it ended (a crash at DDP(...) before any loop).
    """
    order = list(diagnosis.stages)
    shown = [i for i, v in enumerate(diagnosis.stages.values()) if v.status == OK]
    for key in order[: max(shown, default=0)]:  # (no stage shown working: none passed)
        verdict = diagnosis.stages[key]
        if verdict.status != NOT_CHECKED or not verdict.evidence.startswith("not reached: "):
            continue
        why = UNSEEN.get(key, "the run showed nothing about it")
        rest = verdict.evidence.split("; the code suggests: ", 1)
        evidence = f"not seen: the run went on to later stages, but {why}"
        if len(rest) == 2:
            evidence += "; the code suggests: " + rest[1]
        diagnosis.stages[key] = StageVerdict(NOT_CHECKED, evidence, verdict.line)


def unfinished(reading: Reading, outcome: Outcome, diagnosis: Diagnosis) -> StageVerdict | None:
    """A run that did not end well with no fault to show for it: a failure all the same."""
    if outcome.timed_out:
        if not any(v.status == OK for v in diagnosis.stages.values()):
            return None  # nothing was checked: that is a problem (see nothing_checked)
        text = why_not_run(outcome, reading)
        return StageVerdict(
            FAULT,
            f"run: {text}; raise --timeout if it only needs longer",
            _where(outcome, reading)[1],
            [f"run: {text}", "a run that does not end is not a healthy one; raise "
             "--timeout if it only needs longer"],
        )  # fmt: skip
    ended = _ended_badly(outcome)
    if ended:
        return StageVerdict(FAULT, f"run: {ended}", None, [f"run: {ended}"])
    return _ended_early(reading, outcome, diagnosis)


def _ended_early(reading: Reading, outcome: Outcome, diagnosis: Diagnosis) -> StageVerdict | None:
    """A run that ended normally before some stage could be checked: never a healthy one.

    (When no stage at all could be checked, :func:`nothing_checked` says so instead.)
    """
    order = list(diagnosis.stages)
    shown = [order.index(key) for key, v in diagnosis.stages.items() if v.status == OK]
    if not shown:
        return None
    # Only the stages after the last one the run showed: a stage before it
    # (an IterableDataset's data division, say) was passed, just not seen.
    unchecked = [
        key for key in order[max(shown) + 1:] if diagnosis.stages[key].status == NOT_CHECKED
    ]
    if not unchecked:
        return None
    ended = _returned(outcome, reading) or "the run ended"
    text = (
        f"{ended} before {title(unchecked[0])} could be checked, so "
        f"{'that stage was' if len(unchecked) == 1 else 'those stages were'} never checked "
        f"({', '.join(title(k) for k in unchecked)})"
    )
    said = printed(outcome.output)
    parts = [f"run: {text}"]
    if said:
        parts.append(f"the last lines it printed: {said}")
    parts.append(
        "a run is healthy only when it shows every stage working: make the script join "
        "the group, train on its share of the data through DDP and release the group "
        "when run as " + ("torchrun runs it" if reading.mode == TORCHRUN else "the doctor runs it")
    )
    return StageVerdict(FAULT, "; ".join(parts), None, parts)
