"""What every check is made of: its :class:`Result`, and running a learner's code for real.

Every ``check_*`` function returns a :class:`Result` that a notebook shows as
a few plain lines: passed; not attempted yet; or failed, with what was
expected, what happened, and which stage and line own the fix. A check
never raises and never hangs: learner code runs inside bounded launches and
any error it raises becomes part of the message.

A fix is told in two steps, as the fault-finding checks tell theirs: first
what went wrong and where to look; the line that fixes it only after a few
tries at the same mistake, or at once with ``reveal=True``. A check builds
such a failure with ``failed(..., answer=LINE)``, and :func:`graded` decides
whether the line is shown yet (see :func:`told`).
"""

from __future__ import annotations

import ast
import functools
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ... import devices, launch
from ...doctor.read import uncalled_test_fix
from ...reports import ReportMismatch, reports_of
from . import answers

PASSED, FAILED, NOT_ATTEMPTED = "passed", "failed", "not attempted yet"

#: Seconds a check's launch may take before it counts as a hang.
CHECK_TIMEOUT_S = 45

#: Most characters of an error a check quotes.
QUOTED_CHARS = 600

#: Where a failure tells the learner to look when the ranks ran out of time (no line named).
WAITED = (
    "the ranks had not finished by the check's deadline: where could one rank wait for "
    "another that never comes (a collective or a barrier on some ranks only)?"
)

#: What a failure shows in place of its stage while finding the stage is the exercise.
HIDDEN = "not shown yet: finding it is the exercise"


@dataclass
class Result:
    """The outcome of one check.

    Attributes:
        check: the check's name, e.g. ``"check_spawn"``.
        status: ``"passed"``, ``"failed"`` or ``"not attempted yet"``.
        stage: for a failure, the title of what owns the fix: a stage's title
            (see :mod:`ddp_lesson.stages`) for everything a DDP script's
            stages own, or a title of its own for the few mistakes no stage
            owns (``"the optimiser's learning rate"``). ``None`` when no
            stage is named: the check was given something it cannot judge
            (a file that is not the exercise's), or ``stage_hidden`` is set.
        expected, happened, fix: the failure explained.
        note: for a pass, what was verified.
        stage_hidden: the failure has a stage, but naming it is the exercise
            (the fault-finding checks, before the learner has found it):
            ``stage`` is ``None`` and the message says it is not shown yet.
        held_back: the line that fixes a failure (``failed(..., answer=)``),
            never printed or compared: :func:`told` moves it into ``fix``
            once the tries allow it, and empties it.
    """

    check: str
    status: str
    stage: str | None = None
    expected: str = ""
    happened: str = ""
    fix: str = ""
    note: str = ""
    stage_hidden: bool = False
    held_back: str = field(default="", repr=False, compare=False)

    def __bool__(self) -> bool:
        return self.status == PASSED

    def __str__(self) -> str:
        if self.status == PASSED:
            return f"PASSED {self.check}: {self.note}"
        if self.status == NOT_ATTEMPTED:
            return f"NOT ATTEMPTED YET {self.check}: {self.note}"
        happened = self.happened.replace("\n", "\n            ")
        if self.stage_hidden:
            title = f"FAILED {self.check} (stage: {HIDDEN})"
        elif self.stage is None:
            title = f"FAILED {self.check}"
        else:
            title = f"FAILED {self.check} (stage: {self.stage})"
        return "\n".join(
            [
                title,
                f"  expected: {self.expected}",
                f"  happened: {happened}",
                f"  fix:      {self.fix}",
            ]
        )

    __repr__ = __str__

    def _repr_pretty_(self, printer, cycle) -> None:  # how IPython shows it
        printer.text(str(self))


def passed(check: str, note: str) -> Result:
    return Result(check, PASSED, note=note)


def not_attempted(check: str, what: str) -> Result:
    return Result(check, NOT_ATTEMPTED, note=f"replace the stub in {what} with your code")


def failed(
    check: str,
    *,
    stage: str | None,
    expected: str,
    happened: str,
    fix: str,
    answer: str = "",
) -> Result:
    """A failed Result.

    Args:
        fix: where to look and what to think about there.
        answer: the line (or lines) that fix it, when ``fix`` does not already
            say it. It is kept back until :func:`told` decides it may be
            shown (a check decorated with :func:`graded` calls it): after a few
            tries at the same mistake, or with ``reveal=True``.
    """
    result = Result(check, FAILED, stage, expected, happened, fix)
    if answer:
        result.held_back = answer
    return result


def hidden_stage(check: str, *, expected: str, happened: str, fix: str) -> Result:
    """A failure whose stage the learner is still to find: no stage shown."""
    return Result(check, FAILED, None, expected, happened, fix, stage_hidden=True)


def kept_back(check: str, left: int, what: str = "the line itself") -> str:
    """What a fix says while ``what`` is kept back for ``left`` more tries."""
    tries = "try" if left == 1 else "tries"
    return f"({what}: {check}(..., reveal=True), or after {left} more {tries} at this)"


def told(result: Result, target: str, reveal: bool) -> Result:
    """Show or keep back the line a failure's fix was built with (``failed(..., answer=)``).

    Wrong tries are counted per check, per thing checked (``target``: the
    learner's file or function) and per mistake (the line that fixes it):
    the line is shown from the :data:`answers.REVEAL_AFTER`-th try at the
    same mistake, or at once with ``reveal``. A pass starts every count of
    that check and target afresh.
    """
    prefix = f"{result.check}:{target}:"
    if result.status == PASSED:
        answers.forget_starting(prefix)
        return result
    answer, result.held_back = result.held_back, ""
    if not answer:
        return result
    tries = answers.tried(prefix + answer)
    if reveal or tries >= answers.REVEAL_AFTER:
        result.fix = f"{result.fix}; the fix: {answer}"
    else:
        result.fix = f"{result.fix} {kept_back(result.check, answers.REVEAL_AFTER - tries)}"
    return result


def _target(value: object) -> str:
    """What a check checks, as its tries are counted: a file's path, a function's name."""
    if isinstance(value, (str, Path)):
        return str(Path(value).resolve())
    name = getattr(value, "__qualname__", None)
    if name is not None:
        return f"{getattr(value, '__module__', '')}.{name}"
    return repr(value)[:80]


def missing_file(check: str, path: str | Path) -> Result:
    return Result(
        check,
        NOT_ATTEMPTED,
        note=f"{path} does not exist yet: run the %%writefile cell above first",
    )


def is_stub(value: object) -> bool:
    """True for the ``...`` an exercise's stub leaves in place of an answer."""
    return value is Ellipsis


def quote(error: BaseException) -> str:
    """An error as a check quotes it: its message with the learner's line, at most a few lines.

    A launch's message names the rank, the error and ``at FILE, line N``;
    all of that is kept, the rank's full traceback is not.
    """
    text = str(error).replace(launch.errors.TRACEBACK_KEPT, "").strip() or type(error).__name__
    if not isinstance(error, launch.LaunchError) and type(error).__name__ not in text:
        text = f"{type(error).__name__}: {text}"
    lines = [line for line in text.splitlines() if line.strip()][:4]
    text = "\n".join(lines)
    return text if len(text) <= QUOTED_CHARS else text[: QUOTED_CHARS - 3] + "..."


def run_probe(probe: Callable[..., None], world_size: int, *args: object) -> list:
    """Run ``probe`` on ``world_size`` ranks; its reports, read as the type it declares.

    Each report is the ``TypedDict`` the probe declares with ``reports.sends``,
    or :class:`~ddp_lesson.reports.ReportMismatch` is raised; a failed launch
    raises as :func:`ddp_lesson.launch.run_ranks` does.
    """
    reported = launch.run_ranks(probe, world_size, *args, timeout_s=CHECK_TIMEOUT_S)
    return reports_of(probe, reported)


def launch_probe(
    world_size: int, probe: Callable[..., None], *args: object
) -> tuple[list | None, BaseException | None]:
    """:func:`run_probe`, returning ``(reports, None)``, or ``(None, error)`` on a failed launch."""
    try:
        return run_probe(probe, world_size, *args), None
    except ReportMismatch:
        raise  # the course's own probe and its type disagree: not the learner's error
    except (launch.LaunchError, ValueError, TypeError) as error:
        return None, error


def worker_path(path: str | Path) -> str | None:
    """The absolute path of the learner's file, or ``None`` if there is no such file."""
    resolved = Path(path).resolve()
    return str(resolved) if resolved.is_file() else None


def multiple_choice(
    check: str, right: str, stage: str, note: str, fix: str, question: str
) -> Callable[[object], Result]:
    """A ``check_*`` function for a multiple-choice answer (a letter; case and spaces ignored).

    Args:
        check: the check's name. right: the right letter. stage: who owns the fix.
        note: said on a pass. fix: said on a wrong answer. question: what is asked,
            for the function's docstring.
    """

    def answer_check(answer: object, *, reveal: bool = False) -> Result:
        if is_stub(answer):
            return not_attempted(check, "the answer line")
        if letter_of(answer) == right:
            answers.forget(check)
            return passed(check, note)
        tries = answers.tried(check)
        if reveal or tries >= answers.REVEAL_AFTER:
            return failed(check, stage=stage, expected=right, happened=repr(answer), fix=fix)
        left = answers.REVEAL_AFTER - tries
        return failed(
            check,
            stage=stage,
            expected="another letter",
            happened=repr(answer),
            fix=f"{fix} {kept_back(check, left, 'the right letter')}",
        )

    answer_check.__name__ = answer_check.__qualname__ = check
    answer_check.__doc__ = (
        f"Check the multiple-choice answer on {question}.\n\nA wrong letter is told where to "
        "look; the right one is shown after a few tries, or with ``reveal=True``."
    )
    return answer_check


def letter_of(answer: object) -> str:
    """The letter a multiple-choice answer gives, as written on a quiz sheet, in lower case.

    Spaces and case do not matter, nor the marks a letter is often written
    with: ``(b)``, ``b)``, ``b.``, ``[b]``. Anything else is returned as it
    was typed (stripped, lower case), and matches no letter.

    >>> [letter_of(a) for a in ("(b)", "b)", " B ", "b.", "[c]", "ab", "(b")]
    ['b', 'b', 'b', 'b', 'c', 'ab', 'b']
    """
    said = str(answer).strip().lower()
    found = re.fullmatch(r"[(\[]?\s*([a-z])\s*[)\].:]?", said)
    return found[1] if found else said


def untouched(source: str, stubbed: str) -> bool:
    r"""True when every function ``stubbed`` names is still only ``raise NotImplementedError``.

    Such a file can only raise ``NotImplementedError`` in its ranks (what a
    launch of it would find, a few seconds later), so a check says "not
    attempted" at once. One function written, or a name bound again later
    in the file, and the file is launched as usual.

    >>> stub = "def wrap(model):\n    'Doc.'\n    raise NotImplementedError('your code here')\n"
    >>> untouched(stub, "wrap()"), untouched(stub + "wrap = len\n", "wrap()")
    (True, False)
    >>> untouched(stub + "def main():\n    return 1\n", "wrap() and main()")
    False
    >>> untouched("def wrap(:", "wrap()")  # a syntax error is for the launch to report
    False
    """
    names = re.findall(r"(\w+)\(\)", stubbed)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    last: dict[str, ast.stmt] = {}
    for node in tree.body:  # the binding each name has when the file has run
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            last[node.name] = node
        else:
            for bound in ast.walk(node):  # (an if, a try, a with: whatever it binds)
                if isinstance(bound, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    last[bound.name] = bound
                elif isinstance(bound, ast.Name) and isinstance(bound.ctx, ast.Store):
                    last[bound.id] = node
                elif isinstance(bound, ast.alias):
                    last[(bound.asname or bound.name).split(".")[0]] = node
    return bool(names) and all(_only_raises(last.get(name)) for name in names)


def _only_raises(node: ast.stmt | None) -> bool:
    """True for a function whose body, its docstring aside, is one ``raise NotImplementedError``."""
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.decorator_list:
        return False
    body = node.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]  # the docstring
    if len(body) != 1 or not isinstance(body[0], ast.Raise) or body[0].exc is None:
        return False
    raised = body[0].exc.func if isinstance(body[0].exc, ast.Call) else body[0].exc
    return isinstance(raised, ast.Name) and raised.id == "NotImplementedError"


def launch_file(check: str, path: str | Path, probe: Callable, stubbed: str, *args: object):
    """Launch ``probe`` around the learner's file; a Result if there is nothing to check yet.

    Returns ``(reports, error, None)`` after a launch, or ``(None, None, result)``
    when the file is missing or its functions are still stubs.
    """
    worker = worker_path(path)
    if worker is None:
        return None, None, missing_file(check, path)
    if untouched(Path(worker).read_text(errors="replace"), stubbed):
        return None, None, not_attempted(check, stubbed)  # nothing of the learner's to run yet
    got, error = launch_probe(devices.plan().world_size, probe, worker, *args)
    if error is not None and "NotImplementedError" in str(error):
        return None, None, not_attempted(check, stubbed)
    return got, error, None


class EndCheck(Exception):
    """Raised inside a check by a helper that has found its outcome; carries the Result."""

    def __init__(self, result: Result) -> None:
        super().__init__(str(result))
        self.result = result


def graded(function: Callable[..., Result]) -> Callable[..., Result]:
    """Make a ``check_*`` function return the Result of an :class:`EndCheck` its helpers raise.

    The Result is then :func:`told`: a fix built with an ``answer`` shows
    its line only after a few tries, or when the check is called with
    ``reveal=True`` (a keyword the function declares). Tries are counted
    per thing checked, the function's first argument.
    """
    signature = inspect.signature(function)

    @functools.wraps(function)
    def run(*args, **kwargs) -> Result:
        try:
            result = function(*args, **kwargs)
        except EndCheck as ended:
            result = ended.result
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:  # the call itself was wrong: it raised above already
            return result
        bound.apply_defaults()
        given = list(bound.arguments.values())
        reveal = bool(bound.arguments.get("reveal", False))
        return told(result, _target(given[0] if given else None), reveal)

    return run


def launch_checked(
    check: str,
    path: str | Path,
    probe: Callable,
    stubbed: str,
    *args: object,
    stage: str,
    expected: str,
    fix: str = "the line the error names",
    hang: tuple[str, ...] | None = None,
    explain: Callable[[BaseException], Result | None] | None = None,
) -> list:
    """Launch ``probe`` around the learner's file and return the ranks' reports.

    Used inside a :func:`graded`: when there is nothing to
    judge it raises :class:`EndCheck` with the Result that ends the check:
    the file is missing, its functions are still stubs, or the launch raised.
    For an error, ``hang`` (expected, happened, fix) explains a launch that
    ran out of time, and ``explain(error)`` may name another specific failure;
    any other error fails the check at ``stage`` with ``expected``, the error
    quoted, and ``fix``. ``hang`` may hold a fourth item: the answer its fix
    keeps back (see :func:`failed`).
    """
    got, error, early = launch_file(check, path, probe, stubbed, *args)
    if early is not None:
        raise EndCheck(early)
    if error is None:
        return got
    if isinstance(error, launch.LaunchTimeout):
        if hang is None:  # a deadline names no line: say where to look instead
            hang = (expected, quote(error), WAITED)
        expected, happened, hint, *answer = hang
        raise EndCheck(
            failed(
                check,
                stage=stage,
                expected=expected,
                happened=happened,
                fix=hint,
                answer="".join(answer),
            )
        )
    specific = explain(error) if explain is not None else None
    if specific is None:  # (a failed Result is falsy: compare with None)
        specific = stranded(check, error, stage=stage, expected=expected)
    if specific is None:
        fix = uncalled_test_fix(Path(path), str(error)) or fix  # (the error is its doing)
        specific = failed(check, stage=stage, expected=expected, happened=quote(error), fix=fix)
    raise EndCheck(specific)


#: What gloo says when a rank waited in a collective that its partners never joined
#: (its own timeout, shorter than a check's deadline), or that they left.
NEVER_CAME = re.compile(
    r"Timed out waiting \d+ ?ms for (recv|send)|Application timeout caused pair closure"
)
LEFT = re.compile(r"Connection (closed|reset) by peer")


#: How a collective comes to be reached by some ranks only, as a stranded rank's fix says it.
UNPAIRED = (
    "A collective inside `if rank == 0:`, or a rank that returns early or runs fewer steps, "
    "leaves the others waiting"
)


def stranded(check: str, error: BaseException, *, stage: str, expected: str) -> Result | None:
    """The failure for a rank stranded in a collective that another rank did not call, or None.

    gloo ends such a wait itself: with a timeout when the partner never
    comes, or with a closed connection when the partner, busy elsewhere,
    finished or failed and left the group. Either way a collective was
    reached by some ranks only: the one the error names, or, with no line
    named, one of the answer's that the other rank waited in meanwhile.
    """
    text = str(error)
    if NEVER_CAME.search(text):
        why = (
            "a rank waited in a collective until gloo's own time limit ran out: no other rank "
            "called the same collective at that point"
        )
    elif LEFT.search(text):
        why = (
            "a rank was in a collective when another rank, which had not called it there, "
            "left the group (it had finished, or failed) and closed the connection"
        )
    else:
        return None
    named = re.search(r"line \d+, in (\w+): (.+)", text)
    if named:
        where = (
            f"{named[1]}, the collective the error names ({named[2].strip()}): does every rank "
            "reach it?"
        )
    else:
        where = (
            "the error names no line of yours: the rank was in a collective outside your code "
            "(the check's own, or DDP's all-reduce in a backward) while another rank was "
            "elsewhere; which of your collectives do only some ranks reach?"
        )
    fix = f"{where} {UNPAIRED}"
    return failed(check, stage=stage, expected=expected, happened=f"{quote(error)}\n{why}", fix=fix)
