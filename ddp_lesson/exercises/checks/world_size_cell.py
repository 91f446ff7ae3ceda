"""check_spawn's look at the learner's world-size cell, run again as on other machines.

02's first exercise asks for a world size that is right on any machine:
one process per GPU where there are two or more, else two CPU processes.
A CPU machine shows only the first case, so in a notebook the check runs
the assignments of the cell that set ``world_size`` again, in a copy of
the notebook's namespace, with ``torch.cuda.device_count()`` answering 0,
1, 2, 3 and 8. A cell whose value does not follow the count at all (a
number written in, a helper that remembers this machine) is not judged
here: this machine's value is, by :func:`.spawning.check_spawn`.
"""

from __future__ import annotations

import ast
import os

import torch

from ... import devices
from ...launch import torch_hooks
from ...stages import stage
from .base import Result, failed

#: The GPU counts the cell is run again with.
GPU_COUNTS = (0, 1, 2, 3, 8)


def expected_for(gpus: int) -> int:
    """The exercise's rule: one process per GPU from two GPUs up, else 2 CPU processes.

    >>> [expected_for(n) for n in GPU_COUNTS]
    [2, 2, 2, 3, 8]
    """
    return gpus if gpus >= 2 else 2


def cell_wrong(name: str) -> Result | None:
    """The failure if the notebook's world-size cell breaks the rule on another machine."""
    if os.environ.get(devices.WORLD_SIZE_ENV):
        return None  # (the learner asked the course for another world size on purpose)
    found = _world_size_cell()
    if found is None:
        return None
    cell, namespace = found
    got = {}
    for gpus in GPU_COUNTS:
        answer = torch_hooks.handed(
            torch_hooks.point(torch.cuda, "device_count"), lambda own, n=gpus: n
        )
        copy = dict(namespace)
        with answer:
            try:
                exec(compile(cell, "<the world_size cell>", "exec"), copy)  # noqa: S102
            except Exception:  # what the cell needs that a copy lacks: not judged
                return None
        got[gpus] = copy.get("world_size")
    if len({repr(v) for v in got.values()}) < 2:
        return None
    wrong = [n for n in GPU_COUNTS if got[n] != expected_for(n)]
    if not wrong:
        return None
    gpus = wrong[0]
    machines = f"{gpus} GPU" + ("" if gpus == 1 else "s")
    return failed(
        name,
        stage=stage("spawning").title,
        expected=f"the world size the exercise asks for on a machine with {machines}",
        happened=f"your world_size cell, run again as on machines with "
        f"{', '.join(map(str, GPU_COUNTS))} GPUs (torch.cuda.device_count() answering each), "
        f"gave {', '.join(repr(got[n]) for n in GPU_COUNTS)}: {got[gpus]!r} with {machines}",
        fix=f"the world_size line: what should a machine with {machines} run? Read the "
        "exercise's rule again, case by case",
    )


def _world_size_cell() -> tuple[ast.Module, dict] | None:
    """The statements of the last notebook cell that set ``world_size`` which its value
    needs (:func:`_needed`), with the notebook's namespace; None outside a notebook."""
    try:
        from IPython import get_ipython
    except ImportError:
        return None
    shell = get_ipython()
    if shell is None:
        return None
    for source in reversed(shell.user_ns.get("In", [])):
        try:
            tree = ast.parse(shell.transform_cell(source))
        except (SyntaxError, ValueError):
            continue
        kept = _needed(tree.body)
        if kept:
            return ast.Module(body=kept, type_ignores=[]), shell.user_ns
    return None


def _needed(body: list[ast.stmt]) -> list[ast.stmt]:
    """The imports, and the assignments ``world_size``'s last one reads from, in order.

    Nothing else in the cell runs again: a launch written beside the world
    size (``results = start(main, world_size, port)``) must not start
    processes five more times.

    >>> cell = ("import torch\\nn = torch.cuda.device_count()\\n"
    ...         "world_size = max(2, n)\\nout = go(world_size)")
    >>> [ast.unparse(s) for s in _needed(ast.parse(cell).body)]
    ['import torch', 'n = torch.cuda.device_count()', 'world_size = max(2, n)']
    """
    last = max((i for i, s in enumerate(body) if _sets_world_size(s)), default=None)
    if last is None:
        return []
    wanted, kept = {"world_size"}, []
    for statement in reversed(body[: last + 1]):
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            kept.append(statement)
        elif isinstance(statement, ast.Assign) and wanted & _targets(statement):
            kept.append(statement)
            wanted |= {n.id for n in ast.walk(statement.value) if isinstance(n, ast.Name)}
    return kept[::-1]


def _targets(statement: ast.Assign) -> set[str]:
    return {n.id for t in statement.targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _sets_world_size(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "world_size" for t in statement.targets
    )
