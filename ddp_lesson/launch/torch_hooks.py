"""The one module that replaces functions of torch (and of ``multiprocessing``).

A lesson cell calls ``mp.spawn``; the course must start those ranks
itself, bounded and watched, without the learner writing anything else.
That, torchrun's loopback store, the pause after
``destroy_process_group()``, and the doctor's records of a learner's
script all need a function of torch to do something more. Every such
change is made here, in one of two ways, and nowhere else
(``tests/test_torch_hooks.py`` checks both: no other module assigns to
torch, and torch's functions are the same objects before and after every
kind of launch).

- :func:`handed` is for the process that launches, such as a notebook's
  kernel, which must find torch as it was once the launch is over. Inside
  the ``with`` block, calls of the function go to the handler, which is
  given the function as it was (``underneath``) to call on if it wants.
  Blocks nest; when the last one closes, torch's own function object is
  put back where it was found.
- :func:`wrap` is for a process the course starts for one job (a rank, a
  script run for a learner, torchrun's agent, the doctor's recorded run).
  The function becomes ``make(previous)`` for the rest of the process;
  wrapping again with the same ``make`` changes nothing.

:func:`hold` lets an observer keep what it wrapped: after it, a
:func:`handed` block in that process hands nothing over (the doctor
records a script's ``mp.spawn`` calls, including those a
``launch.bounded`` inside the script makes).

The functions the launch hands over have names here:
:data:`START_PROCESSES` (``mp.start_processes``, which ``mp.spawn``
calls), :data:`SPAWN`, :data:`DESTROY` (``destroy_process_group``) and
:data:`COMMAND_LINE` (how multiprocessing starts a fresh interpreter),
and the doctor's file layer wraps :data:`ZIPFILE_WRITER` (where
``torch.save`` opens a path); the doctor's script run wraps
:data:`LAUNCH_AGENT` (a script that runs torchrun's agent itself).
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass


@dataclass(frozen=True, eq=False)
class Point:
    """A function of torch the course may replace: ``name`` on each of ``owners()``.

    ``owners`` returns the objects (modules, classes) that hold the same
    function under that name; each is changed together, so whichever
    spelling the learner's code uses finds the change.
    """

    name: str
    owners: Callable[[], tuple[object, ...]]

    def current(self) -> object:
        return getattr(self.owners()[0], self.name)

    def set(self, value: object) -> None:
        for owner in self.owners():
            setattr(owner, self.name, value)


def _mp() -> tuple[object, ...]:
    import torch.multiprocessing as mp  # (also imports its spawn module)

    return mp, sys.modules["torch.multiprocessing.spawn"]


def _dist() -> tuple[object, ...]:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    return c10d, dist


def _serialization() -> tuple[object, ...]:
    import torch.serialization

    return (torch.serialization,)


def _launcher_api() -> tuple[object, ...]:
    import torch.distributed.launcher.api as api

    return (api,)


def _multiprocessing_spawn() -> tuple[object, ...]:
    from multiprocessing import spawn

    return (spawn,)


#: ``torch.multiprocessing.start_processes``; torch's ``mp.spawn`` calls it too.
START_PROCESSES = Point("start_processes", _mp)
#: ``torch.multiprocessing.spawn``.
SPAWN = Point("spawn", _mp)
#: ``torch.distributed.destroy_process_group``.
DESTROY = Point("destroy_process_group", _dist)
#: ``torch.serialization._open_zipfile_writer``: ``torch.save`` to a path opens
#: the file in C++, out of reach of Python's ``open`` (the doctor's file layer).
ZIPFILE_WRITER = Point("_open_zipfile_writer", _serialization)
#: ``torch.distributed.launcher.api.launch_agent``: what ``elastic_launch(...)(...)`` and
#: ``torch.distributed.run.main`` (torchrun's own entry, called from a script) call.
LAUNCH_AGENT = Point("launch_agent", _launcher_api)
#: ``multiprocessing.spawn.get_command_line``: the command a fresh interpreter starts with.
COMMAND_LINE = Point("get_command_line", _multiprocessing_spawn)


def point(owners: object | tuple[object, ...], name: str) -> Point:
    """The :class:`Point` for ``name`` on ``owners`` (an object, or a tuple of them)."""
    found = owners if isinstance(owners, tuple) else (owners,)
    key = (tuple(id(owner) for owner in found), name)
    if key not in _points:
        _points[key] = Point(name, lambda: found)
    return _points[key]


#: The points :func:`point` made, one per owners and name.
_points: dict[tuple[tuple[int, ...], str], Point] = {}


#: What each open :func:`handed` block put in, by point, innermost last.
_handlers: dict[Point, list[Callable]] = {}
#: The function each point had when its first :func:`handed` block opened.
_underneath: dict[Point, object] = {}
#: The points an observer keeps as it wrapped them (see :func:`hold`).
_held: set[Point] = set()
#: Every ``(point, make)`` this process has wrapped with, in order.
_wrapped: list[tuple[Point, Callable]] = []


@contextlib.contextmanager
def handed(where: Point, handler: Callable) -> Iterator[bool]:
    """Inside the block, calls of ``where`` go to ``handler(underneath, *args, **kwargs)``.

    ``underneath`` calls the function as it was before this block: the next
    block's handler out, or the function itself. Yields whether the
    handler was put in (not where an observer :func:`hold` s the point).
    """
    if where in _held:
        yield False
        return
    stack = _handlers.setdefault(where, [])
    if not stack:
        _underneath[where] = where.current()
        where.set(_dispatcher(where))
    stack.append(handler)
    try:
        yield True
    finally:
        stack.remove(handler)
        if not stack:
            where.set(_underneath.pop(where))
            del _handlers[where]


def _dispatcher(where: Point) -> Callable:
    base = where.current()

    def call(depth: int, *args, **kwargs):
        stack = _handlers.get(where, [])
        if depth < 0 or depth >= len(stack):
            return base(*args, **kwargs)
        return stack[depth](lambda *a, **k: call(depth - 1, *a, **k), *args, **kwargs)

    def dispatch(*args, **kwargs):
        return call(len(_handlers.get(where, [])) - 1, *args, **kwargs)

    dispatch.__name__ = where.name
    dispatch.__qualname__ = where.name
    dispatch.__doc__ = f"{where.name}, handed to the launch running in this process"
    dispatch.__wrapped__ = base
    return dispatch


def underneath(where: Point) -> Callable:
    """The function ``where`` had before any open :func:`handed` block (itself if none)."""
    return _underneath.get(where, where.current())


def wrap(where: Point, make: Callable[[Callable], Callable]) -> None:
    """Make ``where`` the function ``make(previous)`` for the rest of this process.

    For processes the course starts for one job; a launching process uses
    :func:`handed`. Wrapping twice with the same ``make`` changes nothing.
    """
    if (where, make) in _wrapped:
        return
    where.set(make(where.current()))
    _wrapped.append((where, make))


def hold(where: Point) -> None:
    """Keep ``where`` as it is in this process: later :func:`handed` blocks hand nothing over."""
    _held.add(where)


def _spelled(owner: object, name: str) -> str:
    return f"{getattr(owner, '__name__', type(owner).__name__)}.{name}"


def wrapped() -> list[str]:
    """What this process has wrapped, as ``owner.name`` strings (for messages and tests)."""
    return [_spelled(where.owners()[0], where.name) for where, _ in _wrapped]


def changes() -> list[str]:
    """Every ``owner.name`` this module has changed in this process and not put back, sorted.

    What it wrapped, and what an open :func:`handed` block hands over, under
    each owner's name (``torch.multiprocessing.spawn`` and the module
    ``torch.multiprocessing.spawn.spawn`` alike).
    """
    points = [where for where, _ in _wrapped] + list(_handlers)
    return sorted({_spelled(owner, where.name) for where in points for owner in where.owners()})
