"""What cut the ranks' run short: the exception that ended it, or the doctor's stop.

:func:`_crashes` picks the exception that ended the run, not those it then
caused in the other ranks; :func:`_crash` makes it the finding of the
stage that owns its line (or a failure outside the stages); :func:`_stops`
makes findings of what the doctor stopped a rank for.
"""

from __future__ import annotations

from .judge_evidence import Shown, _add, _quote, _ranks_text, _said
from .read import Finding, Reading
from .record import ProcessRecord
from .run import Outcome
from .verdict import FAULT, StageVerdict


def _crashes(outcome: Outcome) -> list[tuple[ProcessRecord, dict]]:
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


def _crash(reading: Reading, crashed, unused: list[str], shown) -> StageVerdict | None:
    """The crash as a stage's finding, or as a failure outside the stages (returned)."""
    if not crashed:
        return None
    error = crashed[0][1]
    who = sorted(r.rank for r, _ in crashed)
    process = "the script" if crashed[0][0].script else _ranks_text(who)
    if error.get("call"):
        _add(shown, "spawning", error["message"])
        return None
    line = error["line"]
    stage = error.get("stage") or reading.owners.get(line)
    if stage == "model_wrapping" and unused:
        return None  # the unused parameters explain it (see _judge_model)
    said = _said(error)
    evidence = f"{process} raised {said}{_quote(reading, line)}"
    if stage is None:
        return StageVerdict(
            FAULT,
            f"run: {evidence}, in code that belongs to none of the five stages; the run "
            "ended there",
            line,
            [f"run: {evidence}", "the code that raised belongs to none of the five stages, "
             "and the run ended there"],
        )  # fmt: skip
    _add(shown, stage, evidence, line, exact=True)
    return None


def _stops(outcome: Outcome) -> list[Shown]:
    """What the doctor stopped a rank for (it knew the run could not go on)."""
    shown = []
    for r in outcome.ranks:
        if r.stop:
            stop = r.stop
            finding = Finding(stop["stage"], stop["evidence"], stop["line"])
            if stop["stage"] == "spawning" and outcome.script and outcome.script.spawns:
                finding.line = outcome.script.spawns[0]["line"]  # where the processes start
            shown.append(Shown(finding))
    return shown
