"""What the judge notes a run showed, and the phrases its verdicts share.

:class:`Shown` is one thing the run showed about a stage: a
:class:`~.read_terms.Finding`, and whether its line is the one a rank
raised at. The helpers say ranks, a quoted line of the code and an
exception the same way in every verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from .read import Finding, Reading
from .verdict import StageVerdict


@dataclass
class Shown:
    """What the run showed about one stage: a finding, and whether its line is exact."""

    finding: Finding
    exact: bool = False  # the line a rank raised at: it beats the code's guess


@dataclass(frozen=True)
class Judged:
    """What one judge found: what the run showed wrong, and the stages it showed working.

    Attributes:
        shown: the faults the run showed, each a :class:`Shown`.
        fine: ``(stage, text)`` per stage the run showed working.
        failure: a failure outside the stages (a crash no stage owns).
        disproved: the stages whose code findings the run showed to be wrong
            (e.g. "no sampler= ... every process iterates the whole data set"
            for data each rank split off by hand).
    """

    shown: tuple[Shown, ...] = ()
    fine: tuple[tuple[str, str], ...] = ()
    failure: StageVerdict | None = None
    disproved: tuple[str, ...] = ()

    @classmethod
    def of(cls, shown=(), fine=None, failure: StageVerdict | None = None) -> Judged:
        """A verdict from the list and dict a judge gathered while it looked."""
        return cls(tuple(shown), tuple((fine or {}).items()), failure)


def note_shown(shown: list[Shown], stage: str, text: str, line: int | None = None,
         exact: bool = False) -> None:
    """Note what the run showed about ``stage``."""
    shown.append(Shown(Finding(stage, text, line), exact))


def ranks_text(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def quote(reading: Reading, line: int | None) -> str:
    text = reading.source(line)
    return f" (line {line}: `{text}`)" if text else (f" at line {line}" if line else "")


def error_text(error: dict) -> str:
    return f"{error['type']}: {error['message']}" if error["message"] else error["type"]
