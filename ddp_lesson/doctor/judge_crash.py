"""What cut the ranks' run short: the exception that ended it, or the doctor's stop.

:func:`crashes` picks the exception that ended the run, not those it then
caused in the other ranks; :func:`crash_finding` makes it the finding of the
stage that owns its line (or a failure outside the stages); :func:`stop_reasons`
makes findings of what the doctor stopped a rank for.
"""

from __future__ import annotations

import re

from .judge_evidence import Judged, Shown, error_text, quote, ranks_text
from .read import Finding, Reading
from .record import Outcome, ProcessRecord
from .verdict import FAULT, NOT_CHECKED, StageVerdict


def crashes(outcome: Outcome) -> list[tuple[ProcessRecord, dict]]:
    """The exceptions that ended the run: the first one, and the same one in other ranks.

    A rank that fails takes the others down with it (a peer closed the
    connection, the launcher stopped them): those later errors are
    consequences, and so is an error after the doctor stopped a rank.
    """
    raised = [
        (r, r.error) for r in outcome.ranks if r.error and not r.error.get("interrupted")
    ]
    script = outcome.script
    if not raised and script is not None and script.error and script.spawns:
        if not script.error.get("interrupted") and not outcome.timed_out:
            raised = [(script, script.error)]
    if not raised:
        return []
    first = min(raised, key=lambda pair: pair[1].get("time") or 0.0)[1]
    stops = [r.stop["time"] for r in outcome.ranks if r.stop and r.stop.get("time")]
    if stops and min(stops) < (first.get("time") or 0.0):
        return []  # raised because the doctor had stopped another rank
    same = (first["type"], first["line"], first["message"])
    return [(r, e) for r, e in raised if (e["type"], e["line"], e["message"]) == same]


#: Words of torch's errors for a CUDA call on a machine without CUDA: a call the CPU
#: stand-ins (:mod:`.probe_cuda_queries`) do not answer.
NO_CUDA = (
    "Torch not compiled with CUDA enabled",
    "compiled without CUDA",
    "requires CUDA support",
    "dummy base class",
    "Cannot access accelerator device when none is available",
    "NVTX functions not installed",
    "Found no NVIDIA driver",
    "No CUDA GPUs are available",
    "without ATen_cuda",
)


def _no_stand_in(reading: Reading, error: dict) -> StageVerdict | None:
    """The run ended at a CUDA call the stand-ins do not answer: not checked, not a fault."""
    if not any(words in error["message"] for words in NO_CUDA):
        return None
    line = error["line"]
    text = reading.source(line)
    where = f"at line {line}" + (f" (`{text}`)" if text else "") if line else "at a call"
    said = (
        f"the run stopped {where}, a call that needs a GPU: this machine has none, and the "
        "doctor has no CPU stand-in for it ("
        f"{error['type']}: {error['message'].splitlines()[0]}); what comes after it was not "
        "run. On the GPUs the script was written for the line may well be right: run the "
        "doctor there, or guard the call with torch.cuda.is_available()"
    )
    return StageVerdict(NOT_CHECKED, said, line, [said])


#: What torch says in a rank whose partner stopped answering: it lost the partner, it
#: did not fail itself.
PARTNER_LOST = ("Timed out", "timed out", "Connection closed by peer", "Connection reset by peer")


def _elsewhere(
    reading: Reading, crashed, ranks: list[ProcessRecord]
) -> tuple[StageVerdict, str | None] | None:
    """The rank that was elsewhere when its partners lost it: spinning, or gone from main.

    A rank waiting in a DDP step raises when a partner never comes; the
    fault is where that partner was (the line its stack showed when it was
    stopped), or that it had left already, not the step the waiting rank was in.
    Returns the verdict and the stage it belongs to where the line's owner is
    none (a rank that left its training loop early: the model's synchronising).
    """
    rank, error = crashed[0]
    if rank.script or not any(words in error["message"] for words in PARTNER_LOST):
        return None
    waiting = {r.rank for r, _ in crashed}
    others = [r for r in ranks if r.rank not in waiting and not r.error and not r.stop]
    # a rank found at the line that started the processes had left its function already
    started = reading.lines.get("spawning")
    outside = [r for r in others if started is not None and r.stopped_at == started]
    spinning = [
        r for r in others
        if r.stopped_at and r.stopped_at != error["line"] and not r.returned and r not in outside
    ]  # fmt: skip
    gone = [r for r in others if r.returned or r in outside]
    lost = f"{ranks_text(sorted(waiting))} gave up waiting for it{quote(reading, error['line'])}"
    if spinning:
        other = spinning[0]
        line = other.stopped_at
        evidence = (
            f"rank {other.rank} was still running at line {line} (`{reading.source(line)}`) "
            f"when {lost} (it raised {error['type']}): it never reached the step its "
            f"partners waited in; find out why rank {other.rank} stays at line {line}"
        )
    elif gone and _only_some_called(error, [r for r, _ in crashed], gone):
        caller = error.get("caller")
        line = caller or error["line"]  # a helper's call is reached where it is called
        others = ranks_text(sorted(r.rank for r in gone))
        called = f" (called from line {caller})" if caller else ""
        evidence = (
            f"{ranks_text(sorted(waiting))} waited in vain{quote(reading, error['line'])}"
            f"{called} (it raised "
            f"{error['type']}): a call there needs every rank (a collective, or a forward through "
            "DDP, which broadcasts the model's buffers from rank 0 when they are kept in "
            f"step), and {others} never made a call at that line: it finished its work and "
            "returned. "
            f"Find the condition that lets only {ranks_text(sorted(waiting))} reach line "
            f"{line} (evaluate with model.module on one rank, or run the call on every rank)"
        )
        verdict = StageVerdict(FAULT, f"run: {evidence}", line, [f"run: {evidence}"])
        return verdict, reading.owners.get(error["line"])  # (the call's stage, not the caller's)
    elif gone:
        line = _left_at(reading, gone[0])  # (else no stage owns where a rank chose to leave)
        evidence = _gone_early(reading, gone[0], crashed[0][0], error, lost)
        if line is not None:  # steps DDP cannot average: the model's synchronising
            return StageVerdict(FAULT, f"run: {evidence}", line), "model_wrapping"
    else:
        return None
    return StageVerdict(FAULT, f"run: {evidence}", line, [f"run: {evidence}"]), None


def _left_at(reading: Reading, rank: ProcessRecord) -> int | None:
    """The line where ``rank`` left its training loop (a ``break`` or a ``return`` it ran
    after its last step), if its path since that step shows one."""
    for line in rank.path:
        if _statement(reading, line) in ("break", "return") or _statement(
            reading, line
        ).startswith("return "):
            return line
    return None


def _statement(reading: Reading, line: int) -> str:
    """The code of ``line``, without its comment."""
    return reading.source(line).split("#")[0].strip()


#: What the failure of a rank left waiting by one with fewer steps asks for.
STEPS_APART = (
    "every rank must make the same number of training steps; find what differs between them"
)


def _gone_early(reading: Reading, other, waiter, error: dict, lost: str) -> str:
    """What a rank that returned while ``waiter`` still trained shows: its steps, if counted."""
    released = (other.destroyed or {}).get("line")
    left = f", after destroy_process_group at line {released}," if released else ""
    exit_line = _left_at(reading, other)
    if other.trail and len(waiter.trail) >= len(other.trail) and exit_line is not None:
        return (
            f"rank {other.rank} left its training loop at line {exit_line} "
            f"(`{_statement(reading, exit_line)}`) after its optimizer step "
            f"{len(other.trail)} (in the doctor's run, which takes a few batches of each "
            f"epoch) and returned from its function{left.rstrip(',')}; rank {waiter.rank} "
            f"went on and gave up waiting for it{quote(reading, error['line'])} (it raised "
            f"{error['type']}): every rank must make the same number of training steps, so a "
            "stop decided on one rank must be decided on all (all_reduce the decision, e.g. "
            "a flag tensor, before leaving the loop)"
        )
    if other.trail and len(waiter.trail) >= len(other.trail):
        return (
            f"rank {other.rank} had made {len(other.trail)} optimizer step(s) (in the doctor's "
            "run, which takes a few batches of each epoch) and returned from its "
            f"function{left.rstrip(',')}; rank {waiter.rank} went on past its step "
            f"{len(other.trail)} and gave up waiting for it{quote(reading, error['line'])} "
            f"(it raised {error['type']}): {STEPS_APART} (the batches each rank's data gives, "
            "an epoch count, an early stop or a break decided on one rank)"
        )
    return (
        f"rank {other.rank} had already returned from its function{left} when {lost} "
        f"(it raised {error['type']}): every rank must make the same training steps; "
        f"find the condition that lets rank {other.rank} leave early"
    )


def _only_some_called(
    error: dict, waiting: list[ProcessRecord], gone: list[ProcessRecord]
) -> bool:
    """True when the waiting ranks waited in a call (a collective, a forward through DDP)
    at a line where the ranks that left never called anything.

    Then the waiting ranks made a call the others had no reason to make (rank 0
    evaluating through DDP alone), not the same steps with someone leaving early.
    """
    line = error.get("line")
    return (
        line is not None
        and all(line in r.call_lines for r in waiting)
        and all(r.returned and line not in r.call_lines for r in gone)
    )


def _known(said: str) -> str:
    """What a known error of torch's means for the script, after a colon; else ""."""
    if "inconsistent" in said and " params" in said:  # DDP's check of the models it wraps
        return (
            ": DDP counts the parameters that require a gradient, and the ranks' models "
            "differ there (a part frozen with requires_grad_(False), added or left out on "
            "some ranks only); build and freeze the model the same way on every rank, "
            "before DDP(...)"
        )
    if "Expected to have finished reduction" in said:  # DDP waited for a gradient that never came
        return (
            ": in the backward before, some parameter DDP wraps got no gradient on that rank "
            "(its forward did not use it, or it was frozen with requires_grad_(False) after "
            "DDP(...)), so DDP's reduction never finished; every rank must train the same "
            "parameters through the same forward (freeze before DDP(...), the same way on "
            "every rank; find_unused_parameters=True only for parts every rank leaves out "
            "alike)"
        )
    return ""


def crash_finding(
    reading: Reading,
    crashed,
    unused: list[str],
    ranks: list[ProcessRecord] = (),
    script: ProcessRecord | None = None,
) -> Judged:
    """The crash as a stage's finding (``shown``), or as a failure outside the stages."""
    if not crashed:
        return Judged()
    error = crashed[0][1]
    who = sorted(r.rank for r, _ in crashed)
    process = "the script" if crashed[0][0].script else ranks_text(who)
    if error.get("call"):
        start = next((s for s in (script.spawns if script else []) if s.get("given")), None)
        if start is None:
            return Judged((Shown(Finding("spawning", error["message"], None)),))
        kind = start["given"]
        said = (
            f"{error['message']}: {start['by']} (line {start['line']}) was given args as a "
            f"{kind}, not a tuple, and unpacks what it is given, so each of the {kind}'s "
            f"{start['nargs']} item(s){' (its keys)' if kind == 'dict' else ''} became an "
            "argument of its own; parentheses alone make no tuple: write args=(value,), "
            "with the comma"
        )
        return Judged((Shown(Finding("spawning", said, start["line"])),))
    found = _elsewhere(reading, crashed, list(ranks))
    if found is not None:
        elsewhere, otherwise = found
        stage = (reading.owners.get(elsewhere.line) if elsewhere.line else None) or otherwise
        if stage is None:
            return Judged(failure=elsewhere)  # no stage is to blame for where the other was
        said = elsewhere.evidence.removeprefix("run: ")
        return Judged((Shown(Finding(stage, said, elsewhere.line), exact=True),))
    gap = _no_stand_in(reading, error)
    if gap is not None:
        return Judged(failure=gap)
    line = error["line"]
    stage = error.get("stage") or reading.owners.get(line)
    if stage == "model_wrapping" and unused:
        return Judged()  # the unused parameters explain it (see judge_model)
    said = error_text(error)
    evidence = f"{process} raised {said}{quote(reading, line)}{_known(said)}"
    if stage is None:
        return Judged(failure=StageVerdict(
            FAULT,
            f"run: {evidence}, in code that belongs to none of the five stages; the run "
            "ended there",
            line,
            [
                f"run: {evidence}",
                "the code that raised belongs to none of the five stages, and the run ended "
                "there",
            ],
        ))
    return Judged((Shown(Finding(stage, evidence, line), exact=True),))


def stop_reasons(outcome: Outcome) -> list[Shown]:
    """What the doctor stopped a rank, or the script's own process, for (it knew the run
    could not go on)."""
    shown = []
    script = [outcome.script] if outcome.script is not None else []
    alike: dict[tuple, list[int]] = {}  # ranks stopped for the same reason: said once
    for r in outcome.ranks + script:
        if r.stop:
            stop = r.stop
            finding = Finding(stop["stage"], stop["evidence"], stop["line"])
            if stop["stage"] == "spawning" and not r.script and script and script[0].spawns:
                started = script[0].spawns[0]  # where the processes are made and start
                finding.line = started.get("made") or started["line"]
            said = re.match(r"rank (\d+) (.*)", finding.evidence, re.S)
            if said and not r.script:
                same = alike.setdefault((finding.stage, finding.line, said[2]), [])
                same.append(int(said[1]))
                if len(same) > 1:
                    continue
            shown.append(Shown(finding, exact=r.script))
    for (_, line, rest), ranks in alike.items():
        for s in shown if len(ranks) > 1 else ():
            if s.finding.line == line and s.finding.evidence.endswith(rest):
                s.finding.evidence = f"{ranks_text(sorted(ranks))} {rest}"
    return shown
