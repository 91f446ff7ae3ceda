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


def _environment_key(node: ast.AST) -> str | None:
    """``"RANK"`` for ``os.environ["RANK"]``, ``os.environ.get("RANK")``, ``os.getenv("RANK")``."""
    if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ"):
        key = node.slice
    elif isinstance(node, ast.Call) and node.args and (
        called_name(node) == "getenv"
        or (called_name(node) == "get" and ast.unparse(node.func).endswith("environ.get"))
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
    if a is None or b is None:
        return False
    if ast.dump(a) == ast.dump(b):
        return True
    return ast.dump(scope.resolve(a)) == ast.dump(scope.resolve(b))


def read_spawn(reading: Reading, spawns: list[ast.Call], functions, scope: Scope) -> None:
    if not spawns:
        return
    call = spawns[0]
    reading.lines["spawning"] = call.lineno
    target = call.args[0] if call.args else keyword_arg(call, "fn")
    main = functions.get(target.id) if isinstance(target, ast.Name) else None
    params = [a.arg for a in main.args.posonlyargs + main.args.args] if main else []
    args = scope.resolve(keyword_arg(call, "args", 1), call.lineno)
    items = args.elts if isinstance(args, ast.Tuple) else None
    nprocs = keyword_arg(call, "nprocs", 2)
    resolved = scope.resolve(nprocs, call.lineno)
    if isinstance(resolved, ast.Constant) and isinstance(resolved.value, int):
        reading.nprocs = resolved.value
    before = len(reading.findings)
    if items is not None:
        if any(isinstance(e, ast.Name) and e.id in ("rank", "local_rank") for e in items):
            reading.findings.append(
                Finding(
                    "spawning",
                    f"args={ast.unparse(args)} passes rank itself; mp.spawn already gives "
                    "each process its rank as main's first argument, so pass only what "
                    "follows rank",
                    call.lineno,
                )
            )
        elif main is not None and main.args.vararg is None and len(items) + 1 > len(params):
            reading.findings.append(
                Finding(
                    "spawning",
                    f"{main.name}() takes {len(params)} parameters, rank first; mp.spawn "
                    f"gives it the rank plus the {len(items)} in args, so args holds one too "
                    "many (rank is passed already)",
                    call.lineno,
                )
            )
    if len(reading.findings) > before:
        return  # with rank in args, every later argument is shifted: nothing more to read
    world = None
    if items is not None and "world_size" in params:
        at = params.index("world_size") - 1
        world = items[at] if 0 <= at < len(items) else None
    if nprocs is None:
        reading.findings.append(
            Finding(
                "spawning",
                "mp.spawn has no nprocs, so it starts 1 process; pass nprocs=world_size",
                call.lineno,
            )
        )
    elif world is not None and not _same(nprocs, world, scope):
        reading.findings.append(
            Finding(
                "spawning",
                f"nprocs={ast.unparse(nprocs)} is not the world size main is told "
                f"({ast.unparse(world)}), so the group waits for processes that never "
                "start; pass nprocs=world_size",
                call.lineno,
            )
        )
    elif world is None and isinstance(nprocs, ast.Constant):
        reading.findings.append(
            Finding(
                "spawning",
                f"nprocs={nprocs.value!r} is hard-coded; tie it to the world size "
                "(nprocs=world_size)",
                call.lineno,
            )
        )
