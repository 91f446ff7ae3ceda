"""The doctor's static read of a DDP script: what the code says, before it runs.

:func:`read` parses a learner's file with :mod:`ast` (nothing is imported or
run) and returns a :class:`Reading`: how the doctor should start the file
(the three launch styles), which stage owns each line (where ``mp.spawn``,
``init_process_group``, the ``DataLoader``, the model and
``destroy_process_group`` are, also inside classes and helper functions),
and what the code alone suggests is wrong. The run decides: a finding here
explains or locates what the run shows, it never makes a verdict on its own
(:mod:`ddp_lesson.doctor.judge`).
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

#: Collectives: every rank of the group must call each of them, in the same order.
COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_object",
        "all_gather_into_tensor",
        "all_to_all",
        "all_to_all_single",
        "barrier",
        "broadcast",
        "broadcast_object_list",
        "gather",
        "gather_object",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "scatter",
        "scatter_object_list",
    }
)

#: How the doctor starts a file (:attr:`Reading.mode`).
SCRIPT, WORKER, TORCHRUN = "script", "worker", "torchrun"

#: The calls that belong to each stage: a line that raises inside one of them
#: is that stage's (the model's forward pass is found separately).
STAGE_CALLS = {
    "spawning": {"spawn", "start_processes"},
    "process_group": {
        "init_process_group",
        "new_group",
        "get_rank",
        "get_world_size",
        "monitored_barrier",
        "TCPStore",
        "init_device_mesh",
        *COLLECTIVES,
    },
    "data_division": {"DataLoader", "DistributedSampler", "set_epoch"},
    "model_wrapping": {
        "DistributedDataParallel",
        "set_device",
        "backward",
        "step",
        "zero_grad",
    },
    "teardown": {"destroy_process_group"},
}

#: Environment variables that torchrun sets for every process it starts.
TORCHRUN_VARIABLES = frozenset({"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"})

#: Addresses that mean "listen on every network interface".
ALL_INTERFACES = frozenset({"0.0.0.0", "::"})


@dataclass
class Finding:
    """One mistake: the stage it belongs to, what shows it, and the line that owns the fix.

    ``needs`` names what a run must have done to show the mistake (e.g.
    ``"epochs"``: more than one epoch), when a short run may not have.
    """

    stage: str
    evidence: str
    line: int | None
    needs: str = ""


@dataclass
class Reading:
    """What the code of one file says.

    Attributes:
        path: the file.
        problem: set when the file cannot be diagnosed at all (a one-line reason).
        mode: how to start it: ``"script"`` (its ``__main__`` block calls
            ``mp.spawn``: run it as a whole), ``"torchrun"`` (it joins a group
            from the environment torchrun sets: run it under torchrun) or
            ``"worker"`` (it defines ``main(rank, world_size, ...)``: the
            doctor starts the processes and calls it).
        findings: mistakes the code suggests (the run confirms or not).
        warnings: what is worth knowing though no stage is at fault
            (listening on every network interface, ...).
        lines: the line that owns each stage, where one was found.
        owners: the stage each line belongs to (a call of that stage is on it).
        sources: each line's text, to quote it.
        nprocs: the number of processes ``mp.spawn`` is asked for, when the
            code gives it as a constant.
        hard_nccl: ``init_process_group`` is given the literal backend ``"nccl"``.
        asks_device_count: the code asks how many GPUs there are
            (``torch.cuda.device_count()``, ``torch.accelerator.device_count()``)
            or whether there is an accelerator (``torch.accelerator.is_available()``,
            ``current_accelerator()``).
        unstartable: set when the file cannot be run as written (a finding
            says why); the doctor then judges the code without running it.
    """

    path: Path
    problem: str = ""
    mode: str = ""
    findings: list[Finding] = field(default_factory=list)
    warnings: list[Finding] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)
    owners: dict[int, str] = field(default_factory=dict)
    sources: list[str] = field(default_factory=list, repr=False)
    nprocs: int | None = None
    hard_nccl: bool = False
    asks_device_count: bool = False
    unstartable: bool = False

    def source(self, line: int | None) -> str:
        """The text of ``line`` (stripped), or ``""``."""
        if line is None or not 0 < line <= len(self.sources):
            return ""
        return self.sources[line - 1].strip()


def _name(call: ast.Call) -> str:
    """The called name: ``f`` for ``f(...)``, ``g`` for ``x.y.g(...)``."""
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _calls(node: ast.AST, *names: str) -> list[ast.Call]:
    found = [n for n in ast.walk(node) if isinstance(n, ast.Call) and _name(n) in names]
    return sorted(found, key=lambda n: n.lineno)


def _keyword(call: ast.Call, key: str, position: int | None = None) -> ast.expr | None:
    for keyword in call.keywords:
        if keyword.arg == key:
            return keyword.value
    if position is not None and len(call.args) > position:
        return call.args[position]
    return None


def _is_main_block(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If) or not isinstance(node.test, ast.Compare):
        return False
    sides = [node.test.left, *node.test.comparators]
    return any(isinstance(s, ast.Name) and s.id == "__name__" for s in sides) and any(
        isinstance(s, ast.Constant) and s.value == "__main__" for s in sides
    )


def _top_level(tree: ast.Module, skip_main: bool = True) -> list[ast.AST]:
    """Every node that runs when the file is imported (not inside a def or a class body's defs)."""
    found: list[ast.AST] = []
    pending: list[ast.AST] = [n for n in tree.body if not (skip_main and _is_main_block(n))]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue  # runs only when called
        found.append(node)
        pending.extend(ast.iter_child_nodes(node))
    return found


def _unguarded_spawns(tree: ast.Module) -> list[ast.Call]:
    """``mp.spawn`` calls that run when the file is imported: at the top level, unguarded."""
    found = [
        n
        for n in _top_level(tree)
        if isinstance(n, ast.Call) and _name(n) in STAGE_CALLS["spawning"]
    ]
    return sorted(found, key=lambda n: n.lineno)


def _mentions_rank(node: ast.AST) -> bool:
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name) and "rank" in sub.id:
            return True
        if isinstance(sub, ast.Attribute) and "rank" in sub.attr:
            return True
        if isinstance(sub, ast.Call) and _name(sub) == "get_rank":
            return True
    return False


class _Scope:
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


def _same(a: ast.expr | None, b: ast.expr | None, scope: _Scope) -> bool:
    if a is None or b is None:
        return False
    if ast.dump(a) == ast.dump(b):
        return True
    return ast.dump(scope.resolve(a)) == ast.dump(scope.resolve(b))


def _decode(path: Path) -> str:
    """The file's text, or ``ValueError`` saying why it is not Python source."""
    data = path.read_bytes()
    if b"\0" in data:
        raise ValueError("it holds binary data (NUL bytes)")
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError) as error:
        raise ValueError(f"it is not text a Python file can hold ({error})") from None


def read(path: str | Path) -> Reading:
    """Read the Python file at ``path`` and report what its code shows.

    Args:
        path: the learner's script or worker file.

    Returns:
        A :class:`Reading`; ``reading.problem`` is set (one line, naming the
        fix) when the file is missing, is not Python source, does not parse,
        or gives the doctor no way to start it.
    """
    path = Path(path)
    reading = Reading(path)
    example = "(e.g. python -m ddp_lesson doctor workers/stage_06.py)"
    if path.is_dir():
        reading.problem = (
            f"{path} is a directory, not a Python file: pass the path of your script "
            f"inside it {example}"
        )
        return reading
    if not path.is_file():
        reading.problem = f"{path} does not exist: pass the path of your script {example}"
        return reading
    try:
        source = _decode(path)
    except (OSError, ValueError) as error:
        reading.problem = (
            f"{path.name} is not Python source: {error}; pass the .py file of your script"
        )
        return reading
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as error:
        reading.problem = (
            f"{path.name} does not parse: line {error.lineno}: {error.msg} "
            f"({(error.text or '').strip()!r}); fix that line and run the doctor again"
        )
        return reading
    reading.sources = source.splitlines()
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    _read_warnings(reading, tree)
    _read_owners(reading, tree)
    unguarded = _unguarded_spawns(tree)
    if unguarded:
        line = unguarded[0].lineno
        reading.mode, reading.unstartable = SCRIPT, True
        reading.lines["spawning"] = line
        reading.findings.append(
            Finding(
                "spawning",
                f"mp.spawn is called at line {line}, outside `if __name__ == \"__main__\":`. "
                "Every process it starts imports this file again, reaches that line and "
                "would spawn again; Python stops it ('An attempt has been made to start a "
                "new process before the current process has finished its bootstrapping "
                "phase'). Move the lines that start the processes under "
                '`if __name__ == "__main__":`',
                line,
            )
        )
        return reading
    main_blocks = [n for n in tree.body if _is_main_block(n)]
    spawns = [c for block in main_blocks for c in _calls(block, *STAGE_CALLS["spawning"])]
    top_inits = [
        n
        for n in _top_level(tree, skip_main=False)
        if isinstance(n, ast.Call) and _name(n) == "init_process_group"
    ]
    if spawns:
        reading.mode = SCRIPT
    elif main_blocks and _joins_from_environment(tree):
        reading.mode = TORCHRUN
    elif "main" in functions:
        reading.mode = WORKER
        reading.lines["spawning"] = functions["main"].lineno  # what the processes call
    elif main_blocks or top_inits:
        reading.mode = TORCHRUN
    else:
        reading.problem = (
            f"{path.name} has no way to start: no main(rank, world_size, ...) function, no "
            "`if __name__ == \"__main__\":` block (one that calls mp.spawn, or one that "
            "torchrun can run) and no top-level init_process_group; define "
            "main(rank, world_size, ...) as the lesson does, or add the __main__ block"
        )
        return reading
    reading.asks_device_count = bool(
        _calls(tree, "device_count", "current_accelerator")
        or any("accelerator" in ast.unparse(c.func) for c in _calls(tree, "is_available"))
    )
    _read_spawn(reading, spawns, functions, _Scope(*main_blocks, *tree.body))
    _read_group(reading, tree)
    _read_data(reading, tree, functions)
    _read_model(reading, tree, functions)
    return reading


def _environment_key(node: ast.AST) -> str | None:
    """``"RANK"`` for ``os.environ["RANK"]``, ``os.environ.get("RANK")``, ``os.getenv("RANK")``."""
    if isinstance(node, ast.Subscript) and ast.unparse(node.value).endswith("environ"):
        key = node.slice
    elif isinstance(node, ast.Call) and node.args and (
        _name(node) == "getenv"
        or (_name(node) == "get" and ast.unparse(node.func).endswith("environ.get"))
    ):
        key = node.args[0]
    else:
        return None
    return key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None


def _joins_from_environment(tree: ast.Module) -> bool:
    """True when the code takes its rank from the environment, as a torchrun script does."""
    for node in ast.walk(tree):
        if _environment_key(node) in TORCHRUN_VARIABLES:
            return True
        if isinstance(node, ast.Call) and _name(node) == "init_process_group":
            rank = _keyword(node, "rank", 4)
            method = _keyword(node, "init_method", 1)
            if rank is None or (isinstance(method, ast.Constant) and method.value == "env://"):
                return True
    return False


def _read_warnings(reading: Reading, tree: ast.Module) -> None:
    """What is worth a warning though it is no stage's fault: listening on every interface."""
    seen: set[int] = set()
    for node in ast.walk(tree):
        address = None
        if isinstance(node, ast.Constant) and node.value in ALL_INTERFACES:
            address = node.value
        elif isinstance(node, ast.Call) and _name(node) == "bind" and node.args:
            target = node.args[0]
            first = target.elts[0] if isinstance(target, ast.Tuple) and target.elts else None
            if isinstance(first, ast.Constant) and first.value == "":
                address = ""
        if address is None or node.lineno in seen:
            continue
        seen.add(node.lineno)
        said = f"{address!r}" + (" (an empty host)" if address == "" else "")
        reading.warnings.append(
            Finding(
                "",
                f"line {node.lineno} uses the address {said}, which listens on every network "
                "interface, so other machines can reach this process; the doctor ran it on "
                "127.0.0.1 only. Use 127.0.0.1 (or localhost) unless other machines must "
                "connect",
                node.lineno,
            )
        )


def _ddp_aliases(tree: ast.Module) -> list[str]:
    aliases = ["DDP", "DistributedDataParallel"]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name == "DistributedDataParallel" and alias.asname:
                    aliases.append(alias.asname)
    return aliases


def _wrapped_names(tree: ast.Module) -> set[str]:
    """What the DDP wrapper is assigned to: ``model``, ``self.model``..."""
    aliases = _ddp_aliases(tree)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if _name(node.value) in aliases:
                names.update(ast.unparse(t) for t in node.targets)
    return names


def _read_owners(reading: Reading, tree: ast.Module) -> None:
    """Which stage each line belongs to: the innermost stage call on it, wherever it is."""
    stage_of = {name: key for key, names in STAGE_CALLS.items() for name in names}
    for alias in _ddp_aliases(tree):
        stage_of[alias] = "model_wrapping"
    wrapped = _wrapped_names(tree)
    spans: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            key = stage_of.get(_name(node))
            if key is None and ast.unparse(node.func) in wrapped:
                key = "model_wrapping"  # a forward pass through the DDP wrapper
            if key is not None:
                spans.append((node.lineno, node.end_lineno or node.lineno, key))
    for _, loop in _training_loops(tree):  # fetching a batch splits the data
        spans.append((loop.lineno, loop.lineno, "data_division"))
    for start, end, key in sorted(spans, key=lambda s: s[0] - s[1]):  # widest first
        for line in range(start, end + 1):
            reading.owners[line] = key


def _read_spawn(reading: Reading, spawns: list[ast.Call], functions, scope: _Scope) -> None:
    if not spawns:
        return
    call = spawns[0]
    reading.lines["spawning"] = call.lineno
    target = call.args[0] if call.args else _keyword(call, "fn")
    main = functions.get(target.id) if isinstance(target, ast.Name) else None
    params = [a.arg for a in main.args.posonlyargs + main.args.args] if main else []
    args = scope.resolve(_keyword(call, "args", 1), call.lineno)
    items = args.elts if isinstance(args, ast.Tuple) else None
    nprocs = _keyword(call, "nprocs", 2)
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


def _read_group(reading: Reading, tree: ast.Module) -> None:
    inits = _calls(tree, "init_process_group")
    if inits:
        reading.lines["process_group"] = inits[0].lineno
        backend = _keyword(inits[0], "backend", 0)
        reading.hard_nccl = isinstance(backend, ast.Constant) and backend.value == "nccl"
    destroys = _calls(tree, "destroy_process_group")
    if destroys:
        reading.lines["teardown"] = destroys[0].lineno
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
        inside = [c for s in node.body for c in _calls(s, *COLLECTIVES)]
        other = [c for s in node.orelse for c in _calls(s, *COLLECTIVES)]
        extra = sorted(map(_name, inside)) != sorted(map(_name, other))
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


def _loop_source(loop: ast.For) -> ast.expr:
    """What a for loop iterates, seen through enumerate(...), tqdm(...) and friends."""
    it = loop.iter
    wrappers = ("enumerate", "tqdm", "zip", "iter")
    while isinstance(it, ast.Call) and _name(it) in wrappers and it.args:
        it = it.args[0]
    return it


def _training_loops(tree: ast.AST) -> list[tuple[ast.FunctionDef | None, ast.For]]:
    """(function, loop) for every for loop whose body trains (calls ``.backward()``).

    A loop whose body calls a method or function of the file that trains
    (``for x, y in loader: self._run_batch(x, y)``) trains too.
    """
    owners = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    trains = {o.name for o in owners if _calls(o, "backward")}
    for _ in range(3):  # callers of callers
        trains |= {o.name for o in owners if _calls(o, *trains)}
    found = []
    for owner in owners:
        for loop in ast.walk(owner):
            if isinstance(loop, ast.For) and _calls(loop, "backward", *trains):
                inner = [n for n in ast.walk(loop) if isinstance(n, ast.For) and n is not loop]
                if not any(_calls(n, "backward", *trains) for n in inner):
                    found.append((owner, loop))
    return found


def _loader_call(expr: ast.expr, owner: ast.AST, tree: ast.AST, functions) -> ast.Call | None:
    """The ``DataLoader(...)`` call behind a loop's iterable, when the code shows it."""
    value = _Scope(owner).resolve(expr)
    if isinstance(value, ast.Attribute):  # self.train_loader and the like
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and any(
                ast.dump(t) == ast.dump(value) for t in node.targets
            ):
                value = node.value
    if isinstance(value, ast.Call) and _name(value) == "DataLoader":
        return value
    if isinstance(value, ast.Call) and _name(value) in functions:
        loaders = _calls(functions[_name(value)], "DataLoader")
        return loaders[-1] if loaders else None
    return None


def _shuffles(sampler: ast.expr | None) -> bool:
    """False when the code builds the sampler with ``shuffle=False`` (its order never changes)."""
    if not isinstance(sampler, ast.Call):
        return True
    shuffle = _keyword(sampler, "shuffle")
    return not (isinstance(shuffle, ast.Constant) and shuffle.value is False)


def _read_data(reading: Reading, tree: ast.Module, functions) -> None:
    loaders = _calls(tree, "DataLoader")
    if loaders:
        reading.lines["data_division"] = loaders[0].lineno
    for owner, loop in _training_loops(tree):
        loader = _loader_call(_loop_source(loop), owner, tree, functions)
        if loader is None:
            continue
        reading.lines["data_division"] = loader.lineno
        sampler = _keyword(loader, "sampler")
        scope = _Scope(owner)
        sampler = scope.resolve(sampler, loader.lineno)
        if sampler is None or (isinstance(sampler, ast.Constant) and sampler.value is None):
            reading.findings.append(
                Finding(
                    "data_division",
                    "the training DataLoader has no sampler=, so every process iterates "
                    "the whole data set; add sampler=DistributedSampler(train_dataset)",
                    loader.lineno,
                )
            )
            return
        distributed = isinstance(sampler, ast.Call) and _name(sampler) == "DistributedSampler"
        epochs = [
            n
            for n in ast.walk(owner)
            if isinstance(n, ast.For) and n is not loop and loop in list(ast.walk(n))
        ]
        if distributed and _shuffles(sampler) and epochs and not _calls(tree, "set_epoch"):
            reading.findings.append(
                Finding(
                    "data_division",
                    "the epoch loop never calls set_epoch, so DistributedSampler shuffles "
                    "with the same seed every epoch and every epoch repeats one order; call "
                    "train_loader.sampler.set_epoch(epoch) at the top of the loop",
                    epochs[-1].lineno,
                    needs="epochs",
                )
            )
        return


def _constant_device(expr: ast.expr | None) -> str | None:
    """``"cuda:0"`` for a device that is a constant GPU (0, "cuda:1", torch.device("cuda", 0))."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, int) and not isinstance(
        expr.value, bool
    ):
        return f"cuda:{expr.value}"
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        if expr.value.startswith("cuda:"):
            return expr.value
    if isinstance(expr, ast.Call) and _name(expr) == "device_for" and expr.args:
        return _constant_device(expr.args[0])  # the course's helper: device_for(0)
    if isinstance(expr, ast.Call) and _name(expr) == "device" and expr.args:
        parts = [a.value for a in expr.args if isinstance(a, ast.Constant)]
        if len(parts) == len(expr.args):
            text = ":".join(str(p) for p in parts)
            return text if text.startswith("cuda:") else None
    return None


def _read_model(reading: Reading, tree: ast.Module, functions) -> None:
    wrappers = _calls(tree, *_ddp_aliases(tree))
    optimizers = [
        c
        for c in ast.walk(tree)
        if isinstance(c, ast.Call)
        and c.args
        and isinstance(c.args[0], ast.Call)
        and _name(c.args[0]) == "parameters"
        and isinstance(c.args[0].func, ast.Attribute)
        and isinstance(c.args[0].func.value, ast.Name)
    ]
    model_line = None
    fixed = False
    for owner in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        scope = _Scope(owner)
        calls = [n for n in ast.walk(owner) if isinstance(n, ast.Call)]
        for node in sorted(calls, key=lambda n: n.lineno):
            if _name(node) in ("to", "cuda") and node.args and not fixed:
                given = node.args[0]
                device = _constant_device(scope.resolve(given, node.lineno))
                if device:
                    fixed = True
                    chosen = isinstance(given, ast.Name) and scope.line_of(given.id, node.lineno)
                    reading.findings.append(
                        Finding(
                            "model_wrapping",
                            f"{ast.unparse(node)} puts this on {device} in every process"
                            + (f" ({given.id} is chosen at line {chosen})" if chosen else "")
                            + ": the device must follow the rank (model.to(rank), or "
                            "torch.device('cuda', rank))",
                            chosen or node.lineno,
                        )
                    )
        for opt in optimizers:
            if any(opt is n for n in ast.walk(owner)):
                model = opt.args[0].func.value.id
                model_line = scope.line_of(model, opt.lineno) or opt.lineno
    if model_line is not None:
        reading.lines["model_wrapping"] = model_line
    if wrappers:
        reading.lines["model_wrapping"] = wrappers[0].lineno
        _read_forward(reading, tree, wrappers)
    elif model_line is not None or optimizers:
        by_hand = [c for c in _calls(tree, "all_reduce") if "grad" in ast.unparse(c)]
        reading.findings.append(
            Finding(
                "model_wrapping",
                f"the model is not wrapped in DistributedDataParallel and the code averages "
                f"gradients itself (all_reduce at line {by_hand[0].lineno}); by hand, every "
                "rank must also start from the same weights (broadcast rank 0's parameters "
                "first) and average every gradient; DDP(model) does both"
                if by_hand
                else "nothing wraps the model in DistributedDataParallel, so each process "
                "trains its own copy and gradients are never averaged; after moving it to "
                "its device, wrap it: model = DDP(model, ...)",
                model_line,
            )
        )


def _read_forward(reading: Reading, tree: ast.Module, wrappers: list[ast.Call]) -> None:
    """Find forward passes that call the raw module instead of its DDP wrapper."""
    for owner in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)):
        for node in ast.walk(owner):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            if node.value not in wrappers or not node.value.args:
                continue
            raw = node.value.args[0]
            target = node.targets[0]
            if not (isinstance(raw, ast.Name) and isinstance(target, ast.Name)):
                continue
            if raw.id == target.id:
                continue
            for _, loop in _training_loops(owner):
                for call in ast.walk(loop):
                    is_raw = isinstance(call, ast.Call) and (
                        (isinstance(call.func, ast.Name) and call.func.id == raw.id)
                        or ast.unparse(call.func) == f"{target.id}.module"
                    )
                    if is_raw:
                        reading.findings.append(
                            Finding(
                                "model_wrapping",
                                f"the forward pass calls the unwrapped module "
                                f"{ast.unparse(call.func)}(...), not the wrapper "
                                f"{target.id}(...); DDP only averages gradients of forward "
                                f"passes that go through it",
                                call.lineno,
                            )
                        )
                        return
