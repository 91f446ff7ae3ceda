"""The doctor's verdicts: one per stage, and the diagnosis of a file as text or JSON."""

from __future__ import annotations

import json
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from ..stages import stage as _stage
from .record import ProcessRecord

OK, FAULT, NOT_CHECKED = "OK", "FAULT", "NOT CHECKED"

#: Width of the printed diagnosis.
WIDTH = 78

#: How a diagnosis names a failure that belongs to none of the stages.
OUTSIDE = "outside the stages"


def title(key: str) -> str:
    """How a stage is named in a diagnosis: its title in the one stage table."""
    return _stage(key).title


@dataclass
class StageVerdict:
    """One stage's verdict (or the verdict on a failure that belongs to no stage).

    Attributes:
        status: ``"OK"``, ``"FAULT"`` or ``"NOT CHECKED"``.
        evidence: what the code and the run showed, in one string.
        line: the line that owns the fix (for a fault), or the stage's line.
        parts: the pieces of ``evidence``, one per finding.
    """

    status: str
    evidence: str
    line: int | None = None
    parts: list[str] = field(default_factory=list, repr=False)


@dataclass
class Diagnosis:
    """What the doctor found in one file.

    Attributes:
        path: the file diagnosed.
        stages: one :class:`StageVerdict` per stage key (see :mod:`ddp_lesson.stages`), in order.
        problem: set when the file could not be diagnosed (missing, not Python,
            does not parse, crashed before any process ran, nothing could be
            checked...): one line naming the fix.
        notes: what the reader should also know (what could not be run and
            why, warnings).
        launch: how the doctor started the file (``mp.spawn`` from the script,
            ``torchrun ...``, or ``main(rank, ...)`` in processes of its own).
        failure: a failure of the run that belongs to no stage (a rank raised
            in code of its own, the run never finished): a FAULT all the same.
        completed: every process of the run ended normally.
        ranks: what each process recorded, for a closer look.
        output: what the script and its processes printed during the run.
    """

    path: str
    stages: dict[str, StageVerdict] = field(default_factory=dict)
    problem: str = ""
    notes: list[str] = field(default_factory=list)
    launch: str = ""
    failure: StageVerdict | None = None
    completed: bool = False
    ranks: list[ProcessRecord] = field(default_factory=list)
    output: str = ""

    @property
    def faults(self) -> list[str]:
        """The stages at fault, in the order the script runs them."""
        return [key for key, stage in self.stages.items() if stage.status == FAULT]

    @property
    def ok(self) -> bool:
        """True when the file was diagnosed, no stage is at fault and nothing else failed."""
        return not self.problem and not self.faults and self.failure is None

    @property
    def exit_code(self) -> int:
        """What ``ddp-doctor`` exits with: 0 healthy, 1 a fault or a failure, 2 not diagnosed
        (the file, or the run past a line the doctor cannot run here)."""
        if self.problem or (self.failure is not None and self.failure.status == NOT_CHECKED):
            return 2
        return 0 if self.ok else 1

    def __bool__(self) -> bool:
        return self.ok

    def as_dict(self) -> dict:
        """The diagnosis as plain data (what ``--json`` prints)."""
        return {
            "path": self.path,
            "ok": self.ok,
            "problem": self.problem or None,
            "launch": self.launch or None,
            "stages": {
                key: {"status": s.status, "evidence": s.evidence, "line": s.line}
                for key, s in self.stages.items()
            },
            "failure": None
            if self.failure is None
            else {"evidence": self.failure.evidence, "line": self.failure.line},
            "notes": self.notes,
            "exit_code": self.exit_code,
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)

    def __str__(self) -> str:
        if self.problem:
            return f"doctor: {self.problem}"
        out = [f"doctor: {Path(self.path).name}"]
        if self.launch:
            out += textwrap.wrap(f"launched as: {self.launch}", WIDTH, initial_indent="  ",
                                 subsequent_indent=" " * 4)  # fmt: skip
        shown = [(title(key), stage) for key, stage in self.stages.items()]
        if self.failure is not None:
            shown.append((OUTSIDE, self.failure))
        for name, stage in shown:
            head = f"  {name:24} {stage.status}"
            if stage.status != FAULT:
                out += textwrap.wrap(
                    f"{head:38} {stage.evidence}", WIDTH, subsequent_indent=" " * 39
                )
                continue
            out.append(head + (f" at line {stage.line}" if stage.line else ""))
            for part in stage.parts or [stage.evidence]:
                out += textwrap.wrap(part, WIDTH, initial_indent=" " * 6, subsequent_indent=" " * 8)
        for note in self.notes:
            out += textwrap.wrap(f"note: {note}", WIDTH, subsequent_indent="  ")
        return "\n".join(out)

    __repr__ = __str__

    def _repr_pretty_(self, printer, cycle) -> None:  # how IPython shows it
        printer.text(str(self))
