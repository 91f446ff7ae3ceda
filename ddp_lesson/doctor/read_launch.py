"""What the code says about starting the processes: where, how, and how many.

Finds ``mp.spawn`` calls that every started process would run again (outside
``if __name__ == "__main__":``), tells whether the code takes its rank
from the environment torchrun sets, and checks what ``mp.spawn`` is
given: ``args`` against its target's parameters (rank is passed already),
``nprocs`` against the world size the processes are told.
"""

from __future__ import annotations

import ast

from .read_syntax import Scope, called_name, keyword_arg, top_level
from .read_terms import STAGE_CALLS, TORCHRUN_VARIABLES, Finding, Reading


def unguarded_spawns(tree: ast.Module) -> list[ast.Call]:
    """``mp.spawn`` calls that run when the file is imported: at the top level, unguarded."""
    found = [
        n
        for n in top_level(tree)
        if isinstance(n, ast.Call) and called_name(n) in STAGE_CALLS["spawning"]
    ]
    return sorted(found, key=lambda n: n.lineno)


def called_target(tree: ast.Module, functions: dict[str, ast.FunctionDef]) -> Finding | None:
    """``Process(target=work(rank, ...))``: the function called where it should be given.

    The call runs in the script's own process, as the line is read, and what it
    returns becomes the target. Only a function of the file's own that returns
    nothing is taken for this (one that returns a function is a factory, rightly
    called there).
    """
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and ast.unparse(node.func).endswith("Process")):
            continue
        target = keyword_arg(node, "target")
        if not (isinstance(target, ast.Call) and isinstance(target.func, ast.Name)):
            continue
        work = functions.get(target.func.id)
        if work is None or any(
            isinstance(n, ast.Return) and n.value is not None for n in ast.walk(work)
        ):
            continue
        joins = any(
            isinstance(n, ast.Call) and called_name(n) == "init_process_group"
            for n in ast.walk(work)
        )
        waits = " (it joins the group there, and waits for partners never started)" if joins else ""
        given = ", ".join(ast.unparse(a) for a in target.args)
        args = f"args=({given}{',' if len(target.args) == 1 else ''})" if given else "args=()"
        return Finding(
            "spawning",
            f"line {node.lineno} gives {ast.unparse(node.func)} target="
            f"{ast.unparse(target)}: the parentheses call {work.name} right there, in the "
            f"script's own process, before any process is started{waits}, and hand the "
            f"process what it returns, None. Give the function itself and its arguments "
            f"apart: target={work.name}, {args}",
            node.lineno,
        )
    return None


def _environment_key(node: ast.AST) -> str | None:
    """``"RANK"`` for ``os.environ["RANK"]``, ``os.environ.get("RANK")``, ``os.getenv("RANK")``."""
    if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ"):
        key = node.slice
    elif (
        isinstance(node, ast.Call)
        and node.args
        and (
            called_name(node) == "getenv"
            or (called_name(node) == "get" and ast.unparse(node.func).endswith("environ.get"))
        )
    ):
        key = node.args[0]
    else:
        return None
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None


def joins_from_environment(tree: ast.Module) -> bool:
    """True when the code takes its rank from the environment, as a torchrun script does."""
    for node in ast.walk(tree):
        if _environment_key(node) in TORCHRUN_VARIABLES:
            return True
        if isinstance(node, ast.Call) and called_name(node) == "init_process_group":
            rank = keyword_arg(node, "rank", 4)
            method = keyword_arg(node, "init_method", 1)
            if rank is None or (isinstance(method, ast.Constant) and method.value == "env://"):
                return True
    return False


def _same(a: ast.expr | None, b: ast.expr | None, scope: Scope) -> bool:
    """True when ``a`` and ``b`` are the same expression, as written or resolved in ``scope``."""
    if a is None or b is None:
        return False
    if ast.dump(a) == ast.dump(b):
        return True
    return ast.dump(scope.resolve(a)) == ast.dump(scope.resolve(b))


def read_spawn(
    reading: Reading, spawns: list[ast.Call], functions: dict[str, ast.FunctionDef], scope: Scope
) -> None:
    """Note the first ``mp.spawn`` call's line and ``nprocs``, and what is wrong in its call."""
    if not spawns:
        return
    call = spawns[0]
    reading.lines["spawning"] = call.lineno
    target = call.args[0] if call.args else keyword_arg(call, "fn")
    main = functions.get(target.id) if isinstance(target, ast.Name) else None
    params = [a.arg for a in main.args.posonlyargs + main.args.args] if main else []
    args = scope.resolve(keyword_arg(call, "args", 1), call.lineno)
    nprocs = keyword_arg(call, "nprocs", 2)
    resolved = scope.resolve(nprocs, call.lineno)
    if isinstance(resolved, ast.Constant) and isinstance(resolved.value, int):
        reading.nprocs = resolved.value
    finding = _args_finding(call, args, main, params)
    if finding is not None:
        reading.findings.append(finding)
        return  # with rank in args, every later argument is shifted: nothing more to read
    finding = _nprocs_finding(call, nprocs, _world_size_arg(args, params), scope)
    if finding is not None:
        reading.findings.append(finding)


def _args_finding(
    call: ast.Call, args: ast.expr | None, main: ast.FunctionDef | None, params: list[str]
) -> Finding | None:
    """What is wrong with the ``args`` ``mp.spawn`` passes: rank itself, or one too many."""
    if not isinstance(args, ast.Tuple):
        return None
    items = args.elts
    if any(isinstance(e, ast.Name) and e.id in ("rank", "local_rank") for e in items):
        return Finding(
            "spawning",
            f"args={ast.unparse(args)} passes rank itself; mp.spawn already gives "
            "each process its rank as main's first argument, so pass only what "
            "follows rank",
            call.lineno,
        )
    if main is not None and main.args.vararg is None and len(items) + 1 > len(params):
        return Finding(
            "spawning",
            f"{main.name}() takes {len(params)} parameters, rank first; mp.spawn "
            f"gives it the rank plus the {len(items)} in args, so args holds one too "
            "many (rank is passed already)",
            call.lineno,
        )
    return None


def _world_size_arg(args: ast.expr | None, params: list[str]) -> ast.expr | None:
    """The item of ``mp.spawn``'s ``args`` that its target receives as ``world_size``, if any."""
    if not isinstance(args, ast.Tuple) or "world_size" not in params:
        return None
    at = params.index("world_size") - 1
    return args.elts[at] if 0 <= at < len(args.elts) else None


def _nprocs_finding(
    call: ast.Call, nprocs: ast.expr | None, world: ast.expr | None, scope: Scope
) -> Finding | None:
    """What is wrong with ``mp.spawn``'s ``nprocs``: missing, not the world size, hard-coded."""
    if nprocs is None:
        return Finding(
            "spawning",
            "mp.spawn has no nprocs, so it starts 1 process; pass nprocs=world_size",
            call.lineno,
        )
    if world is not None and not _same(nprocs, world, scope):
        return Finding(
            "spawning",
            f"nprocs={ast.unparse(nprocs)} is not the world size main is told "
            f"({ast.unparse(world)}), so the group waits for processes that never "
            "start; pass nprocs=world_size",
            call.lineno,
        )
    if world is None and isinstance(nprocs, ast.Constant):
        return Finding(
            "spawning",
            f"nprocs={nprocs.value!r} is hard-coded; tie it to the world size (nprocs=world_size)",
            call.lineno,
        )
    return None
