"""What :func:`.script.check_ddp_script` reads in a learner's script before running it.

The syntax tree, the calls of a function by its name, the ``mp.spawn`` call
in the ``__main__`` block, and a line's text as a failure quotes it.
"""

from __future__ import annotations

import ast

from ...stages import stage
from .base import Result, failed

SPAWNING = stage("spawning").title


def calls_of(tree: ast.AST, name: str) -> list[ast.Call]:
    """Calls of a function called ``name`` (``name(...)`` or ``x.name(...)``), in line order."""
    found = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (getattr(node.func, "id", None) == name or getattr(node.func, "attr", None) == name)
    ]
    return sorted(found, key=lambda node: node.lineno)


def main_block_of(tree: ast.Module) -> ast.If | None:
    """The top-level ``if`` whose test names ``__main__``, or None when there is none."""
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return node
    return None


def line_at(lines: list[str], number: int | None) -> str:
    """``line N: text`` of line ``number`` of ``lines``, or "" when there is no such line."""
    if not number or not 1 <= number <= len(lines):
        return ""
    return f"line {number}: {lines[number - 1].strip()}"


def first_call_at(tree: ast.Module, lines: list[str], *names: str) -> str:
    """``line N: text`` of the first call of any of ``names``, or "" when there is none."""
    calls = sorted((c for name in names for c in calls_of(tree, name)), key=lambda c: c.lineno)
    return line_at(lines, calls[0].lineno) if calls else ""


def parsed(check: str, source: str, lines: list[str]) -> ast.Module | Result:
    """Parse the script, or return the failure that names the line Python cannot read."""
    try:
        return ast.parse(source)
    except SyntaxError as error:
        return failed(
            check,
            stage=SPAWNING,
            expected="a file Python can run",
            happened=f"SyntaxError: {error.msg}",
            fix=line_at(lines, error.lineno) or "the line the error names",
        )


def main_spawn_line(check: str, tree: ast.Module, lines: list[str]) -> int | Result:
    """Find the line of the ``mp.spawn`` call in the ``__main__`` block, or fail without one."""
    main_block = main_block_of(tree)
    spawns = [c for c in calls_of(tree, "spawn") + calls_of(tree, "start_processes")]
    inside = [c for c in spawns if main_block and c in list(ast.walk(main_block))]
    if not inside:
        where = line_at(lines, spawns[0].lineno) if spawns else "no mp.spawn call"
        return failed(
            check,
            stage=SPAWNING,
            expected="python file.py to start the processes itself: mp.spawn in `if __name__ == "
            '"__main__":`',
            happened=where
            + (
                " (outside the __main__ block: every process it starts would import "
                "the file and spawn again)"
                if spawns
                else ""
            ),
            fix='an `if __name__ == "__main__":` block that calls mp.spawn(main, ...)',
        )
    return inside[0].lineno
