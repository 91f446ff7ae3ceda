"""Reading a learner's written answers: a stage named in words, a line of a file, a prediction.

The fault-finding checks ask for a stage and the line that owns the fix;
the prediction checks ask for a number or a list. This module turns what
a learner typed into something a check can compare, and keeps count of
wrong tries so that a check says *what* is wrong first and shows the
answer only after a few tries, or when asked with ``reveal=True``.

>>> stage_named("Splitting the data"), stage_named("spawning"), stage_named("the loss")
('data_division', 'spawning', None)
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from ...stages import STAGES

#: Wrong tries after which a check shows the right answer (or the line that fixes it).
REVEAL_AFTER = 3

#: Words a learner may use for each stage, besides its key and title.
STAGE_WORDS = {
    "spawning": ("spawn", "spawning", "starting processes", "starting the processes",
                 "starting", "mp.spawn"),
    "process_group": ("process group", "connecting processes", "connecting the processes",
                      "connecting", "init_process_group", "group", "ddp_setup"),
    "data_division": ("data division", "splitting the data", "data", "sampler",
                      "distributedsampler", "splitting", "dividing the data"),
    "model_wrapping": ("model wrapping", "synchronising the model", "synchronizing the model",
                       "wrapping", "ddp", "wrapper", "synchronising", "synchronizing",
                       "model", "the model", "gradients"),
    "teardown": ("teardown", "tear down", "destroy_process_group", "cleanup"),
}  # fmt: skip

#: Wrong tries per check, target and mistake in this kernel: the fix is kept back
#: for the first tries (see :func:`tried`). Module-level because a learner's tries
#: span cells, and the kernel is the one thing those cells share.
_tries: Counter = Counter()


def stage_named(text: object) -> str | None:
    """The key of the stage ``text`` names (its key, its title or a usual word), else ``None``."""
    said = _words(str(text))
    for s in STAGES:
        names = {_words(name) for name in (s.key, s.title, *STAGE_WORDS[s.key])}
        if said in names:
            return s.key
    return None


def _words(text: str) -> str:
    """A stage's name as compared: lower case, underscores as spaces, single spaces.

    Both sides are made alike, so that ``ddp_setup`` and ``ddp setup`` name
    the same stage as the word in :data:`STAGE_WORDS` does.

    >>> _words("  Destroy_Process_Group "), stage_named("init_process_group")
    ('destroy process group', 'process_group')
    """
    return " ".join(text.lower().replace("_", " ").split())


def normal(text: str) -> str:
    """A line as compared: no comment, no spaces, one kind of quote.

    >>> normal("x = f('a#b')  # note")
    'x=f("a#b")'
    """
    quote = None
    for i, char in enumerate(text):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#":
            text = text[:i]
            break
    return "".join(text.split()).replace("'", '"')


def line_of(path: str | Path, text: str) -> int:
    """The number of the one line of ``path`` that reads ``text`` (spaces and comments aside).

    Raises:
        LookupError: no line, or more than one, reads like that.
    """
    lines = Path(path).read_text().splitlines()
    found = [n for n, line in enumerate(lines, 1) if normal(line) == normal(text)]
    if len(found) != 1:
        raise LookupError(f"{path}: {len(found)} lines read {text!r}, expected exactly one")
    return found[0]


def statement_span(path: str | Path, line: int) -> range:
    """The lines of the statement that line ``line`` of ``path`` belongs to."""
    spans = [
        range(node.lineno, (node.end_lineno or node.lineno) + 1)
        for node in ast.walk(ast.parse(Path(path).read_text()))
        if isinstance(node, ast.stmt)
        and not hasattr(node, "body")  # a simple statement, not an if/for/def
        and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]
    return min(spans, key=len, default=range(line, line + 1))


def line_named(path: str | Path, answer: object) -> tuple[int | None, str]:
    """Which line of ``path`` the learner means: ``(number, "")`` or ``(None, why not)``.

    ``answer`` is a line number, or text from the line: the whole line or a
    piece of it that appears on no other line (spaces, quotes and comments
    do not matter).
    """
    lines = Path(path).read_text().splitlines()
    if isinstance(answer, bool):
        return None, f"{answer!r} is not a line: give its number or its text"
    if isinstance(answer, int):
        if 1 <= answer <= len(lines):
            return answer, ""
        return None, f"{Path(path).name} has lines 1 to {len(lines)}, not {answer}"
    said = normal(str(answer))
    if not said:
        return None, "the answer is empty: give the line's number or its text"
    found = [n for n, line in enumerate(lines, 1) if said in normal(line)]
    if not found:
        return None, f"no line of {Path(path).name} reads {str(answer).strip()!r}"
    if len(found) > 1:
        return None, (
            f"{str(answer).strip()!r} is on lines {found}: give the whole line, or its number"
        )
    return found[0], ""


def numbered(path: str | Path) -> str:
    """The file with its line numbers, as a fault-finding exercise shows it."""
    lines = Path(path).read_text().splitlines()
    width = len(str(len(lines)))
    return "\n".join(f"{n:>{width}}  {line}" for n, line in enumerate(lines, 1))


def tried(key: str) -> int:
    """Count one more wrong try at the question ``key``; return how many so far."""
    _tries[key] += 1
    return _tries[key]


def forget_starting(prefix: str) -> None:
    """Start counting afresh for every question whose key starts with ``prefix``."""
    for key in [k for k in _tries if k.startswith(prefix)]:
        del _tries[key]


def forget(key: str | None = None) -> None:
    """Start counting tries afresh (for one question, or for all)."""
    if key is None:
        _tries.clear()
    else:
        _tries.pop(key, None)
