"""What a learner reads when a launch goes wrong: one short message naming the cause and the fix.

A failing rank's traceback runs through torch's internals and the
multiprocessing machinery; the message keeps the rank, the error, the line
of the learner's file that raised it, and a hint where the cause is a
known mistake. The full traceback stays on the exception
(``.rank_traceback``) for whoever wants it.
"""

from __future__ import annotations

import re
import signal
from pathlib import Path


class LaunchError(RuntimeError):
    """A rank of a supervised launch failed; the message says which and why.

    Attributes:
        rank: the rank that failed first, or ``None`` if not known.
        rank_traceback: the failing rank's full traceback text, if it raised.
        output: everything the ranks printed during the launch (head and tail).
    """

    def __init__(
        self, message: str, rank: int | None = None, rank_traceback: str = "", output: str = ""
    ):
        super().__init__(message)
        self.rank = rank
        self.rank_traceback = rank_traceback
        self.output = output

    def brief(self) -> str:
        r"""The error and the worker line, without what changes from run to run.

        Which rank fails first, file paths and port numbers differ between two
        runs of the same faulty worker; the error and the line that raised it
        do not, so a notebook can print this and still compare equal.

        >>> error = LaunchError(
        ...     "rank 1 raised RuntimeError: Connection closed by peer [127.0.0.1]:4123"
        ...     "\n  at w.py, line 3, in main: all_reduce(t)\nAny other ranks were stopped."
        ... )
        >>> print(error.brief())
        RuntimeError: Connection closed by peer [127.0.0.1]
        at w.py, line 3, in main: all_reduce(t)
        """
        first, *rest = str(self).splitlines()
        first = first.split(" raised ", 1)[-1]
        first = re.sub(r"\[/\S+\] ", "", re.sub(r"\]:\d+", "]", first))
        where = [line.strip() for line in rest if line.strip().startswith("at ")]
        return "\n".join([first[:150]] + where[:1])


class LaunchTimeout(LaunchError):
    """A supervised launch ran past its deadline and its ranks were stopped."""


class LaunchInterrupted(KeyboardInterrupt):
    """A supervised launch was interrupted (the stop button); its ranks were stopped.

    It is a ``KeyboardInterrupt``, so code that catches one still does; a
    notebook shows it as its one-line message.
    """


def _show_short(shell, etype, evalue, tb, tb_offset=None) -> list[str]:
    """Show a launch's error in a notebook as its message alone.

    The message already names the rank, the error and the worker's line;
    the frames of the course's own code would only bury it.
    """
    lines = [f"\x1b[31m{etype.__name__}\x1b[0m: {evalue}"]
    shell._showtraceback(etype, evalue, lines)
    return lines


def show_short_errors() -> None:
    """In an IPython kernel, show launch errors as their message, not a traceback.

    Called by a launch when it starts, so only a session that launches
    something gets it; importing the course changes nothing in IPython.
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or not hasattr(shell, "set_custom_exc"):
        return
    if (LaunchError, LaunchInterrupted) != getattr(shell, "custom_exceptions", ()):
        shell.set_custom_exc((LaunchError, LaunchInterrupted), _show_short)


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')

#: Where a ``SyntaxError`` lies, as a traceback shows it below the frames (no function).
_SYNTAX_AT = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)$')
_SYNTAX_ERRORS = ("SyntaxError", "IndentationError", "TabError")

#: Frames from these places are the machinery, not the learner's code.
_MACHINERY = (
    "site-packages",
    "dist-packages",
    "/lib/python",
    "<frozen",
    str(Path(__file__).resolve().parents[1]) + "/",  # the course's own package
)


def is_machinery(file: str) -> bool:
    """True for a file of torch, the standard library or the course, or for code with no file
    (``<string>``: the code a process was started with): not the learner's code."""
    return file.startswith("<") or any(s in file for s in _MACHINERY)


def frame_text(file: str, line: int, func: str, code: str | None = None) -> str:
    """A frame as the launch's messages name it: ``workers/w.py, line 3, in main: f()``.

    Args:
        file: the frame's file.
        line: its line number.
        func: its function's name (empty for the place of a syntax error).
        code: the line's text; read from ``file`` when not given.
    """
    import linecache

    if code is None:
        code = linecache.getline(file, line).strip()
    name = Path(file)
    shown = f"{name.parent.name}/{name.name}" if name.parent.name else name.name
    text = f"{shown}, line {line}" + (f", in {func}" if func else "")
    return text + (f": {code}" if code else "")


def worker_frame(trace: str) -> str:
    """The innermost traceback frame outside torch, the standard library and the course.

    A ``SyntaxError`` is placed where it lies, in the file Python could not
    compile (a helper the worker imports), not at the line that imported it.

    >>> trace = 'Traceback...\\n  File "/x/workers/w.py", line 3, in main\\n    f()\\nE: boom'
    >>> worker_frame(trace)
    'workers/w.py, line 3, in main: f()'
    >>> worker_frame(trace.replace('E: boom', '  File "/x/h.py", line 2\\n    f(\\nSyntaxError: x'))
    'x/h.py, line 2: f('
    """
    lines = trace.splitlines()
    found = ""
    syntax_error = last_error_line(trace).startswith(_SYNTAX_ERRORS)
    for i, text in enumerate(lines):
        match = _FRAME.match(text)
        code = lines[i + 1].strip() if i + 1 < len(lines) else ""
        if match and not is_machinery(match["file"]):
            found = frame_text(match["file"], int(match["line"]), match["func"], code) + (
                "" if code else ": "
            )
        syntax = _SYNTAX_AT.match(text)
        if syntax and syntax_error:
            found = frame_text(syntax["file"], int(syntax["line"]), "", code)
    return found


def last_error_line(trace: str) -> str:
    """The last ``SomeError: message`` line of ``trace``.

    A message that starts on the lines below its ``SomeError:`` (as
    multiprocessing's own do) is joined up to the end of its first sentence.
    """
    lines = [line for line in trace.strip().splitlines() if line.strip()]
    for at in range(len(lines) - 1, -1, -1):
        text = lines[at]
        if not text.startswith(" ") and ("Error" in text or "Exception" in text or ":" in text):
            if not text.rstrip().endswith(":"):
                return text.strip()
            words = []
            for more in lines[at + 1 :]:
                if not more.startswith(" "):
                    break
                words.append(more.strip())
                if more.rstrip().endswith("."):
                    break
            return " ".join([text.strip(), *words])
    return lines[-1].strip() if lines else "an unknown error"


def _hint(error: str, names: tuple[str, ...] = ()) -> str:
    """A sentence on the likely mistake behind a rank's error, if it is a known one.

    Args:
        error: the rank's ``SomeError: message`` line.
        names: the functions the ranks were started with (``main``).
    """
    called = any(f"{name}() takes" in error or f"{name}() missing" in error for name in names)
    if error.startswith("TypeError") and called:
        return (
            "mp.spawn passes each process its rank as the first argument by itself; "
            "args=(...) must hold only the arguments that come after rank in main's "
            "signature."
        )
    if "clients joined" in error or "waiting for clients" in error:
        return (
            "not every rank reached init_process_group: start world_size processes "
            "(nprocs=world_size) and make every rank call it."
        )
    if "bootstrapping phase" in error:
        return (
            "Each new process imports the file that called mp.spawn, and that file called "
            "mp.spawn again. Put the code that starts the processes under "
            '`if __name__ == "__main__":`, as scripts/ddp_spawn.py does.'
        )
    return ""


def early_exits(
    ended: dict[int, int], reported: set[int], left: dict[int, str] | None = None
) -> list[str]:
    """Phrases for ranks that ended cleanly (code 0) without sending a report.

    Args:
        ended: exit code per rank, for the ranks that have ended.
        reported: the ranks whose report arrived.
        left: where each rank's function ended, where Python knows it
            (:func:`.stacks.exits`).

    >>> early_exits({0: 1, 1: 0}, reported=set())
    ['rank 1 exited with code 0 before it reported']
    >>> early_exits({1: 0}, set(), {1: "it called sys.exit(0) at w.py, line 4, in main"})[0]
    'rank 1 exited with code 0 before it reported (it called sys.exit(0) at w.py, line 4, in main)'

    """
    left = left or {}
    return [
        f"rank {rank} exited with code 0 before it reported"
        + (f" ({left[rank]})" if rank in left else "")
        for rank, code in sorted(ended.items())
        if code == 0 and rank not in reported
    ]


def still_running(stacks: dict[int, str], leaving_out: int | None = None) -> str:
    """A sentence naming where each rank still running was when it was stopped ('' for none).

    >>> print(still_running({0: "w.py, line 7, in f", 1: "w.py, line 9, in g"}))
    When they were stopped, rank 0 was at w.py, line 7, in f; rank 1 was at w.py, line 9, in g
    """
    named = [f"rank {r} was at {at}" for r, at in sorted(stacks.items()) if r != leaving_out]
    if not named:
        return ""
    return f"When {'they were' if len(named) > 1 else 'it was'} stopped, {'; '.join(named)}"


#: Where a launch's error keeps the failing rank's traceback (a check quoting it leaves it out).
TRACEBACK_KEPT = " The rank's full traceback is in the exception's .rank_traceback."

#: The signal on which a rank writes its stack (:mod:`.stacks`), and the signals a launch
#: sends its own ranks (a rank they ended was ended because another rank failed first).
STACK_SIGNAL = signal.SIGUSR2
LAUNCH_SIGNALS = (signal.SIGTERM, STACK_SIGNAL)

#: What a rank's error says when a partner vanished in the middle of a collective.
PEER_LOST = re.compile(r"(?i)peer|connection|closed|reset|timed out|timeout")


def first_cause(
    index: int, error: str, ended: dict[int, int], raised_by: dict[int, str]
) -> tuple[int, int, str] | None:
    """The rank that failed first, when torch named ``index`` only because its partner vanished.

    torch names the first failed rank in its list when it looks. When rank 1
    raises or is killed and rank 0's collective fails an instant later, both
    can have ended by then, and rank 0 comes first. So when the named rank's
    error (``error``) says that a partner was lost, another rank that failed
    in its own way is the cause: one that raised something else, or one a
    signal ended that the launch does not send (:data:`LAUNCH_SIGNALS`).

    Args:
        index: the rank torch named.
        error: its error line.
        ended: exit code per rank.
        raised_by: the traceback of each rank that raised.

    Returns:
        ``(rank, exit_code, traceback)`` (the traceback empty for a signal), or
        ``None`` when the named rank is the cause as far as can be told.

    >>> first_cause(0, "RuntimeError: Connection closed by peer", {0: 1, 1: -9}, {})
    (1, -9, '')
    >>> first_cause(0, "RuntimeError: Connection closed by peer", {0: 1, 1: -15}, {}) is None
    True
    >>> first_cause(0, "ValueError: bad shape", {0: 1, 1: -9}, {}) is None
    True
    """
    if not PEER_LOST.search(error):
        return None
    for rank, code in sorted(ended.items()):
        trace = raised_by.get(rank, "")
        if rank == index or not code:
            continue
        if trace and not PEER_LOST.search(last_error_line(trace)):
            return rank, code, trace
        if not trace and code < 0 and -code not in LAUNCH_SIGNALS:
            return rank, code, ""
    return None


def signal_name(exit_code: int) -> str | None:
    """The name of the signal that ended a process, from its (negative) exit code."""
    if exit_code >= 0:
        return None
    try:
        return signal.Signals(-exit_code).name
    except ValueError:
        return f"signal {-exit_code}"


def raised(index: int, trace: str, early: list[str], names: tuple[str, ...] = ()) -> str:
    """The message for a rank whose function raised (``trace``: its traceback text).

    Args:
        index: the rank.
        trace: its traceback.
        early: ranks that ended before reporting (see :func:`early_exits`).
        names: the functions the ranks were started with.
    """
    if "WorkerNotFound: " in trace:  # the rank's own message says it all
        return trace.rsplit("WorkerNotFound: ", 1)[-1].strip()
    where = worker_frame(trace)
    error = last_error_line(trace)
    message = f"rank {index} raised {error}"
    if where:
        message += f"\n  at {where}"
    if early and PEER_LOST.search(error):
        message += (
            f"\nThe likely cause: {'; '.join(early)}, so the others lost a partner in the "
            "middle of their collectives. Every rank must run to the end of its function "
            "(no early return, sys.exit or os._exit)."
        )
    hint = _hint(error, names)
    if hint:
        message += f"\n{hint}"
    return message + "\nAny other ranks were stopped." + TRACEBACK_KEPT


def exited(index: int, exit_code: int, signal_name: str | None, output: str) -> str:
    """The message for a rank that died without raising (a signal, or a non-zero exit)."""
    how = f"was killed by {signal_name}" if signal_name else f"exited with code {exit_code}"
    error = last_error_line(output) if output.strip() else ""
    before_main = "spawn_main" in output and "_wrap" not in output
    # (a rank forked from the warm server imports the main file from
    # multiprocessing's forkserver, not from spawn_main)
    if "bootstrapping phase" in output and "_wrap" not in output:
        return f"rank {index} {how} before it could run its function: {error}\n" + _hint(
            "bootstrapping phase"
        )
    if before_main and error:
        return (
            f"rank {index} {how} while importing the worker module, before it "
            f"could run its function: {error}\nFix the worker file (re-run its %%writefile "
            "cell), then re-run the cell that imports and launches it."
        )
    message = f"rank {index} {how} without raising a Python error in its function"
    if error:
        message += f"; its last words: {error}"
    return message + (
        ". Any other ranks were stopped. A rank that exits early (sys.exit, os._exit), is "
        "killed, or crashes in native code leaves the others waiting for it."
    )


def interrupted(stopped: int) -> str:
    """The message for a launch interrupted by the learner (the stop button)."""
    return f"launch interrupted: its {stopped} process(es) were stopped"


def not_found(index: int, target, error: BaseException) -> str:
    """The message for a rank that could not import the function it was asked to run.

    Args:
        index: the rank.
        target: what it was asked to run (``module`` and ``name``).
        error: what importing the module, or finding the function in it, raised.
    """
    cause = f"{type(error).__name__}: {error}"
    if isinstance(error, AttributeError) and target.name in str(error):
        return f"rank {index} found no {target.name} in {target.module}: {cause}"
    return (
        f"rank {index} failed while importing the worker module {target.module}, before it "
        f"could run its function: {cause}\nFix the worker file (re-run its %%writefile "
        "cell), then re-run the cell that imports and launches it."
    )


def defined_in_notebook(name: str) -> str:
    """The message for a function typed into a notebook cell and handed to ``mp.spawn``."""
    return (
        f"{name} is defined in this notebook, and a new process cannot import a function "
        "defined in a notebook cell: each rank receives the function by module and name "
        "and imports it. Write the function to a file (a %%writefile cell), import that "
        "module, and pass module.main to mp.spawn."
    )


def unguarded_start(path: str, line: int) -> str:
    """The message for a script that starts ranks from top-level code outside its main guard."""
    return (
        f"{path}, line {line} starts processes from the file's top level. Each new process "
        "imports that file again, reaches the same line and would start processes of its "
        "own; Python stops it with: An attempt has been made to start a new process before "
        "the current process has finished its bootstrapping phase. Put the code that starts "
        'the processes under `if __name__ == "__main__":`, as scripts/ddp_spawn.py does.'
    )


def other_world_size(nprocs: int, world_size: int) -> str:
    """The message for a start of ``nprocs`` ranks inside a block made for ``world_size``.

    Args:
        nprocs: how many ranks the start asked for.
        world_size: how many the block was made for.

    >>> print(other_world_size(3, 2))  # doctest: +ELLIPSIS
    mp.spawn(..., nprocs=3) inside launch.bounded(world_size=2): ... (nprocs=world_size).
    """
    if nprocs < world_size:
        what = f"only {nprocs} of its {world_size} ranks would start and wait for the rest"
    else:
        what = f"{nprocs} ranks would start for a group of {world_size}"
    return (
        f"mp.spawn(..., nprocs={nprocs}) inside launch.bounded(world_size={world_size}): "
        f"{what}, so no rank was started. The block's world_size and nprocs say how many "
        "ranks run: pass the same number to both (nprocs=world_size)."
    )


def left_early(early: list[str]) -> str:
    """The message for a launch stopped because a rank ended before the others and unreported."""
    return (
        f"{'; '.join(early)}, while the other ranks still needed it, so they were stopped. "
        "Every rank must run to the end of its function and report (no early return, "
        "sys.exit or os._exit)."
    )


def timeout(
    timeout_s: float,
    started: int,
    world_size: int | None,
    reported: list[int],
    early: list[str],
    stacks: dict[int, str] | None = None,
) -> str:
    """The message for a launch stopped at its deadline.

    Args:
        timeout_s: the deadline.
        started: processes the launch started.
        world_size: ranks it was to start (``None`` for whole programs).
        reported: ranks whose report arrived.
        early: ranks that ended before reporting (see :func:`early_exits`).
        stacks: where each rank still running was (see :func:`.stacks.take`).
    """
    if world_size is None:
        return (
            f"it did not finish within {timeout_s:g} s, so it was stopped with the "
            f"{started} process(es) it had started"
        )
    message = (
        f"the launch did not finish within {timeout_s:g} s, so its "
        f"{started} process(es) were stopped. world_size was {world_size}; "
        f"ranks that reported back: {reported or 'none'}. "
    )
    where = still_running(stacks or {})
    return message + _what_hung(started, world_size, early) + (
        f"\n{where}" if where else ""
    )


def _what_hung(started: int, world_size: int, early: list[str]) -> str:
    """The likely reason a launch of ``world_size`` ranks ran past its deadline."""
    if early:
        said = "; ".join(early)
        return (
            f"{said[:1].upper() + said[1:]}, and the others waited for it: every rank must "
            "run to the end of its function (no early return, sys.exit or os._exit)."
        )
    if 0 < started < world_size:
        return (
            f"Only {started} process(es) were started for a world of "
            f"{world_size}, so the group waited for ranks that never came: pass "
            "nprocs=world_size to mp.spawn."
        )
    return (
        "Ranks hang when one of them waits in a collective (init_process_group, "
        "all_reduce, a DDP backward) that another rank never reaches, or when the ranks "
        "were not told where to meet (MASTER_PORT must be run.port). Check that every "
        "rank runs the same collectives and that nprocs=world_size."
    )
