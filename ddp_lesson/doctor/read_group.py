"""What the code says about the process group: joining it, its collectives, releasing it.

Where ``init_process_group`` is called (and whether its backend is the
literal ``"nccl"``), whether ``destroy_process_group`` is ever called, and
collectives that only some ranks call (inside an ``if`` on the rank).
"""

from __future__ import annotations

import ast

from .read_syntax import called_name, calls_in, keyword_arg
from .read_terms import COLLECTIVES, Finding, Reading


def _mentions_rank(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and "rank" in sub.id:
            return True
        if isinstance(sub, ast.Attribute) and "rank" in sub.attr:
            return True
        if isinstance(sub, ast.Call) and called_name(sub) == "get_rank":
            return True
    return False


def read_group_part(reading: Reading, tree: ast.Module) -> None:
    inits = calls_in(tree, "init_process_group")
    if inits:
        reading.lines["process_group"] = inits[0].lineno
        backend = keyword_arg(inits[0], "backend", 0)
        reading.hard_nccl = isinstance(backend, ast.Constant) and backend.value == "nccl"
    destroys = calls_in(tree, "destroy_process_group")
    if destroys:
        reading.lines["teardown"] = destroys[0].lineno
        reading.release_on_error = _only_on_error(tree, destroys)
    elif inits:
        reading.lines["teardown"] = inits[0].lineno
        reading.findings.append(
            Finding(
                "teardown",
                "the group created by init_process_group is never released: nothing calls "
                "destroy_process_group(); call it when training ends (in a finally)",
                inits[0].lineno,
            )
        )
    for node in ast.walk(tree):
        if not isinstance(node, ast.If) or not _mentions_rank(node.test):
            continue
        inside = [c for s in node.body for c in calls_in(s, *COLLECTIVES)]
        other = [c for s in node.orelse for c in calls_in(s, *COLLECTIVES)]
        extra = sorted(map(called_name, inside)) != sorted(map(called_name, other))
        if extra and (inside or other):
            call = (inside or other)[0]
            reading.findings.append(
                Finding(
                    "process_group",
                    f"{ast.unparse(call.func)}() runs only when `{ast.unparse(node.test)}` "
                    f"{'holds' if inside else 'does not hold'}: every rank must call each "
                    "collective, so the ranks that do call it wait for the others until "
                    "the timeout; call it on every rank",
                    call.lineno,
                )
            )


def _handlers(tree: ast.Module) -> list[ast.ExceptHandler]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.ExceptHandler)]


def _inside(node: ast.AST, blocks: list[ast.AST]) -> bool:
    """True when ``node`` lies within the lines of one of ``blocks``."""
    return any(b.lineno <= node.lineno <= (b.end_lineno or b.lineno) for b in blocks)


def _only_on_error(tree: ast.Module, destroys: list[ast.Call]) -> int | None:
    """The line of the one place the group is released from, when it runs only after an
    error: every destroy_process_group() call sits in an ``except`` block, or in a
    function that is called from ``except`` blocks alone. ``None`` otherwise."""
    handlers = _handlers(tree)
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    found = None
    for call in destroys:
        if _inside(call, handlers):
            found = found or call.lineno
            continue
        owner = min(
            (f for f in functions if _inside(call, [f])),
            key=lambda f: (f.end_lineno or f.lineno) - f.lineno,
            default=None,
        )
        callers = [c for c in calls_in(tree, owner.name)] if owner is not None else []
        if not callers or not all(_inside(c, handlers) for c in callers):
            return None
        found = found or callers[0].lineno
    return found
