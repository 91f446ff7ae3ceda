"""Finding things in a file's syntax tree: the helpers every ``read_*`` module uses.

The name a call calls, the calls of some names under a node, a call's
argument by keyword or position, the ``if __name__ == "__main__":`` block,
the code that runs when the file is imported, simple assignments followed
to their value (:class:`Scope`), the loops that train, and the names the
DDP wrapper goes by. Nothing is imported or run: only :mod:`ast` is used.
"""

from __future__ import annotations

import ast


def called_name(call: ast.Call) -> str:
    """The called name: ``f`` for ``f(...)``, ``g`` for ``x.y.g(...)``."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def calls_in(node: ast.AST, *names: str) -> list[ast.Call]:
    found = [n for n in ast.walk(node) if isinstance(n, ast.Call) and called_name(n) in names]
    return sorted(found, key=lambda n: n.lineno)


def keyword_arg(call: ast.Call, key: str, position: int | None = None) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == key:
            return keyword.value
    if position is not None and len(call.args) > position:
        return call.args[position]
    return None


def is_main_block(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    sides = [node.test.left, *node.test.comparators]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and any(
        isinstance(s, ast.Constant) and s.value == "__main__" for s in sides
    )


def top_level(tree: ast.Module, skip_main: bool = True) -> list[ast.AST]:
    """Every node that runs when the file is imported (not inside a def or a class body's defs)."""
    found: list[ast.AST] = []
    pending: list[ast.AST] = [n for n in tree.body if not (skip_main and is_main_block(n))]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue  # runs only when called
        found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found


class Scope:
    """Simple assignments (``name = expr``) in one body, to follow a name to its value."""

    def __init__(self, *bodies: ast.AST):
        self.values: dict[str, list[tuple[int, ast.expr]]] = {}
        for body in bodies:
            for node in ast.walk(body):
                if isinstance(node, ast.Assign):
                    for target in node.targets:
                        if isinstance(target, ast.Name):
                            self.values.setdefault(target.id, []).append((node.lineno, node.value))

    def resolve(self, expr: ast.expr | None, before: int | None = None) -> ast.expr | None:
        """Follow ``expr`` through name assignments (at most a few hops)."""
        for _ in range(5):
            if not isinstance(expr, ast.Name) or expr.id not in self.values:
                return expr
            options = [v for line, v in self.values[expr.id] if before is None or line <= before]
            if not options:
                return expr
            expr = options[-1]
        return expr

    def line_of(self, name: str, before: int | None = None) -> int | None:
        lines = [line for line, _ in self.values.get(name, []) if before is None or line <= before]
        return lines[-1] if lines else None


def training_loops(tree: ast.AST) -> list[tuple[ast.FunctionDef | None, ast.For]]:
    """(function, loop) for every for loop whose body trains (calls ``.backward()``).

    A loop whose body calls a method or function of the file that trains
    (``for x, y in loader: self._run_batch(x, y)``) trains too.
    """
    owners = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    trains = {o.name for o in owners if calls_in(o, "backward")}
    for _ in range(3):  # callers of callers
        trains |= {o.name for o in owners if calls_in(o, *trains)}
    found = []
    for owner in owners:
        for loop in ast.walk(owner):
            if isinstance(loop, ast.For) and calls_in(loop, "backward", *trains):
                inner = [n for n in ast.walk(loop) if isinstance(n, ast.For) and n is not loop]
                if not any(calls_in(n, "backward", *trains) for n in inner):
                    found.append((owner, loop))
    return found


def ddp_aliases(tree: ast.Module) -> list[str]:
    aliases = ["DDP", "DistributedDataParallel"]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "DistributedDataParallel" and alias.asname:
                    aliases.append(alias.asname)
    return aliases
