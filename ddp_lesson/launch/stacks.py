"""Where a rank is, and where it left: the line a launch names for a rank it stopped or lost.

Two records, each a small file in the launch's ``stacks`` folder:

* ``stack-N.txt``: rank N's Python stack, which the rank writes when it
  gets :data:`STACK_SIGNAL` (Python's ``faulthandler``, which answers also
  while the rank spins in Python or waits in torch's C++). The launch asks
  for it before it stops a rank still running: at its deadline, or when
  another rank failed (:func:`take`).
* ``left-N.txt``: where rank N's function ended without an error, as far
  as Python knows it: the line that called ``sys.exit``, or the line its
  function returned from (:func:`run_noting_exit`). A rank that ends with
  ``os._exit`` or a signal leaves no record.

What the launch reads from them is text in the form of
:func:`.errors.worker_frame`: ``workers/w.py, line 12, in main: loss.backward()``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import os
import re
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from . import errors, processes

#: The signal on which a rank writes its Python stack.
STACK_SIGNAL = errors.STACK_SIGNAL

#: Seconds the launch waits for the stacks it asked for (the rank answers at once
#: unless the machine is busy).
STACK_WAIT_S = 5.0

#: Seconds between two looks at the stacks asked for.
POLL_S = 0.02

#: The file the stack is written to, kept open for the rank's life (faulthandler writes to it).
_stack_file = None


# -- in the rank ------------------------------------------------------------------------------
def dump_on_signal(folder: str, index: int) -> None:
    """In a rank: write this process's Python stack to ``folder`` on :data:`STACK_SIGNAL`.

    The file exists from now on, so the launch signals only a rank that can answer.
    The signal is ignored first: ``faulthandler`` puts back the handler it found
    when Python ends, so a rank asked for its stack while it exits (its
    function ended, another rank failed at that moment) goes on exiting as it
    would have, instead of being killed by the signal's default action.
    """
    global _stack_file
    if not folder:
        return
    signal.signal(STACK_SIGNAL, signal.SIG_IGN)
    _stack_file = open(Path(folder) / f"stack-{index}.txt", "w")  # noqa: SIM115 (for life)
    faulthandler.register(STACK_SIGNAL, file=_stack_file, all_threads=True, chain=False)


def run_noting_exit(folder: str, index: int, target: Callable, args: tuple) -> None:
    """Call ``target(index, *args)``; note where it ended if it called ``sys.exit`` or returned.

    The frame of ``target`` is kept from its start (a profile hook that
    removes itself at the first call), so its last line is known once it
    returned.
    """
    if not folder:
        target(index, *args)
        return
    frames = []
    previous = sys.getprofile()  # (none, unless something else profiles this rank)

    def first_call(frame, event, arg):
        if event == "call":
            sys.setprofile(previous)
            if frame.f_code is getattr(target, "__code__", None):
                frames.append(frame)

    sys.setprofile(first_call)
    try:
        target(index, *args)
    except SystemExit as leaving:
        sys.setprofile(previous)
        tb = leaving.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        if tb is not None:
            code = getattr(leaving, "code", None)
            how = f"sys.exit({code!r})" if code is not None else "sys.exit()"
            _note(folder, index, how, tb.tb_frame.f_code, tb.tb_lineno)
        raise
    finally:
        if sys.getprofile() is first_call:  # (the function never ran Python code)
            sys.setprofile(previous)
    if frames:
        frame = frames.pop()
        _note(folder, index, "return", frame.f_code, frame.f_lineno)
        frame.clear()


def _note(folder: str, index: int, how: str, code, line: int) -> None:
    with contextlib.suppress(OSError):
        (Path(folder) / f"left-{index}.txt").write_text(
            f"{how}\n{code.co_filename}\n{line}\n{code.co_name}\n"
        )


# -- in the launch ----------------------------------------------------------------------------
def take(ranks: dict[int, int], folder: Path, have: dict[int, str]) -> dict[int, str]:
    """Ask every rank in ``ranks`` (``{rank: pid}``) still running for its stack; where each is.

    Only ranks that can answer (their stack file exists) and whose stack is not
    in ``have`` are asked. Returns ``{rank: "file, line N, in f: code"}`` for
    those that answered within :data:`STACK_WAIT_S`.
    """
    asked = {}
    for rank, pid in sorted(ranks.items()):
        path = folder / f"stack-{rank}.txt"
        if rank in have or not path.exists() or not processes.alive(pid):
            continue
        try:
            os.kill(pid, STACK_SIGNAL)
        except OSError:  # gone already
            continue
        asked[rank] = path
    found: dict[int, str] = {}
    latest: dict[int, str] = {}
    deadline = time.monotonic() + STACK_WAIT_S
    while asked and time.monotonic() < deadline:
        time.sleep(POLL_S)
        for rank, path in list(asked.items()):
            ended = not processes.alive(ranks[rank])  # (then no more of its stack will come)
            with contextlib.suppress(OSError):
                latest[rank] = path.read_text()
            if ended or whole(latest.get(rank, "")):
                found[rank] = where(latest.get(rank, ""))
                del asked[rank]
    for rank in asked:  # never whole in time (a rank not started by ranks.entry): what it wrote
        found[rank] = where(latest.get(rank, ""))
    return {rank: text for rank, text in found.items() if text}


def whole(dump: str) -> bool:
    """True once a dump holds the rank's main thread down to its start (``ranks.entry``).

    ``faulthandler`` writes a frame at a time, innermost first, so a dump
    read while the rank still writes it (a busy machine can pause the rank
    mid-dump) lacks its outer frames; the learner's line is above the entry.

    >>> whole('Current thread 0x1 (most recent call first):\\n  File "/x/w.py", line 3 in main\\n')
    False
    >>> whole('  File "/x/w.py", line 3 in main\\n  File "/x/launch/ranks.py", line 9 in entry\\n')
    True
    """
    return bool(_ENTRY.search(dump))


#: The frame at the bottom of a rank's main thread: where :mod:`.ranks` called the function.
_ENTRY = re.compile(r'ranks\.py", line \d+ in entry')

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+) in (?P<func>.+)$', re.M)


def where(dump: str) -> str:
    """The learner's innermost line in the main thread of a ``faulthandler`` dump.

    >>> dump = ('Current thread 0x1 (most recent call first):\\n'
    ...         '  File "/x/site-packages/torch/_tensor.py", line 5 in backward\\n'
    ...         '  File "/x/w.py", line 3 in main\\n'
    ...         '  File "/x/ddp_lesson/launch/ranks.py", line 9 in entry\\n')
    >>> where(dump)
    'x/w.py, line 3, in main'
    """
    threads = [block for block in re.split(r"\n\s*\n", dump) if _FRAME.search(block)]
    main = [t for t in threads if _ENTRY.search(t)]
    for block in main[:1] or threads[-1:]:
        for text in block.splitlines():
            match = _FRAME.match(text)
            if match and not errors.is_machinery(match["file"]):
                return errors.frame_text(match["file"], int(match["line"]), match["func"])
    return ""


def exits(folder: Path) -> dict[int, str]:
    """Where each rank whose function ended without an error left, in words, by rank."""
    found = {}
    for path in folder.glob("left-*.txt"):
        try:
            how, file, line, func = path.read_text().splitlines()[:4]
            rank = int(path.stem.split("-", 1)[1])
        except (OSError, ValueError):
            continue
        at = errors.frame_text(file, int(line), func)
        if how == "return":
            found[rank] = f"its function returned at {at}"
        else:
            found[rank] = f"it called {how} at {at}"
    return found
