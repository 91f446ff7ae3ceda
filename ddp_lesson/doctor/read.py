"""The doctor's static read of a DDP script: what the code says, before it runs.

:func:`read` parses a learner's file with :mod:`ast` (nothing is imported or
run) and returns a :class:`Reading`: how the doctor should start the file
(the three launch styles), which stage owns each line (where ``mp.spawn``,
``init_process_group``, the ``DataLoader``, the model and
``destroy_process_group`` are, also inside classes and helper functions),
and what the code alone suggests is wrong. The run decides: a finding here
explains or locates what the run shows, it never makes a verdict on its own
(:mod:`ddp_lesson.doctor.judge`).

This module holds the :class:`Reading`, the entry point and what concerns
the file as a whole (which stage owns each line, the warnings). The rest
is read by one module per part of the code: :mod:`.read_launch` (starting
the processes), :mod:`.read_group` (the process group), :mod:`.read_data`
(dividing the data) and :mod:`.read_model` (the model), with
:mod:`.read_syntax` (finding things in the syntax tree) and
:mod:`.read_terms` (the terms shared with the probe and the judge).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

from .read_data import read_data_part
from .read_group import read_group_part
from .read_launch import called_target, joins_from_environment, read_spawn, unguarded_spawns
from .read_model import read_model_part
from .read_syntax import (
    Scope,
    called_name,
    calls_in,
    ddp_aliases,
    is_main_block,
    top_level,
    training_loops,
)
from .read_terms import (
    ALL_INTERFACES,
    COLLECTIVES,
    SCRIPT,
    STAGE_CALLS,
    TORCHRUN,
    TORCHRUN_VARIABLES,
    WORKER,
    Finding,
    Reading,
)

#: What the rest of the doctor imports from here (the shared terms, the Reading too, live in
#: :mod:`.read_terms`).
__all__ = [
    "ALL_INTERFACES",
    "COLLECTIVES",
    "SCRIPT",
    "STAGE_CALLS",
    "TORCHRUN",
    "TORCHRUN_VARIABLES",
    "WORKER",
    "Finding",
    "Reading",
    "read",
]


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
    reading = Reading(Path(path))
    tree = _parse(reading)
    if tree is None:
        return reading
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    _read_warnings(reading, tree)
    _read_owners(reading, tree)
    unguarded = unguarded_spawns(tree)
    if unguarded:
        _read_unguarded_spawn(reading, unguarded[0])
        return reading
    called = called_target(tree, functions)
    if called is not None:  # judged from the code: run, it would only wait in the parent
        reading.mode, reading.unstartable = SCRIPT, True
        reading.lines["spawning"] = called.line
        reading.findings.append(called)
        return reading
    main_blocks = [n for n in tree.body if is_main_block(n)]
    spawns = [c for block in main_blocks for c in calls_in(block, *STAGE_CALLS["spawning"])]
    if not _read_mode(reading, tree, main_blocks, spawns, functions):
        return reading
    reading.asks_device_count = _asks_device_count(tree)
    reading.gpu_branch = _asks_for_a_gpu(tree)
    reading.uncalled_test = _uncalled_test(tree)
    read_spawn(reading, spawns, functions, Scope(*main_blocks, *tree.body))
    read_group_part(reading, tree)
    read_data_part(reading, tree, functions)
    read_model_part(reading, tree, functions)
    return reading


def _parse(reading: Reading) -> ast.Module | None:
    """Parse the reading's file and keep its lines, or set ``reading.problem`` and return None."""
    path = reading.path
    example = "(e.g. python -m ddp_lesson doctor workers/stage_06.py)"
    if path.is_dir():
        reading.problem = (
            f"{path} is a directory, not a Python file: pass the path of your script "
            f"inside it {example}"
        )
        return None
    if not path.is_file():
        reading.problem = f"{path} does not exist: pass the path of your script {example}"
        return None
    try:
        source = _decode(path)
    except (OSError, ValueError) as error:
        reading.problem = (
            f"{path.name} is not Python source: {error}; pass the .py file of your script"
        )
        return None
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError as error:
        reading.problem = (
            f"{path.name} does not parse: line {error.lineno}: {error.msg} "
            f"({(error.text or '').strip()!r}); fix that line and run the doctor again"
        )
        return None
    reading.sources = source.splitlines()
    return tree


def _read_unguarded_spawn(reading: Reading, call: ast.Call) -> None:
    """Mark the file unstartable for ``call`` (``mp.spawn``...) outside the main guard."""
    line, name = call.lineno, ast.unparse(call.func)
    reading.mode, reading.unstartable = SCRIPT, True
    reading.lines["spawning"] = line
    reading.findings.append(
        Finding(
            "spawning",
            f'{name} is called at line {line}, outside `if __name__ == "__main__":`. '
            "Every process it starts imports this file again, reaches that line and "
            "would spawn again; Python stops it ('An attempt has been made to start a "
            "new process before the current process has finished its bootstrapping "
            "phase'). Move the lines that start the processes under "
            '`if __name__ == "__main__":`',
            line,
        )
    )


def _read_mode(
    reading: Reading,
    tree: ast.Module,
    main_blocks: list[ast.stmt],
    spawns: list[ast.Call],
    functions: dict[str, ast.FunctionDef],
) -> bool:
    """Set how the doctor starts the file; False, with ``reading.problem`` set, if it cannot."""
    top_inits = [
        n
        for n in top_level(tree, skip_main=False)
        if isinstance(n, ast.Call) and called_name(n) == "init_process_group"
    ]
    if spawns or main_blocks or top_inits or _top_level_starts(tree):
        # run as Python first: how it starts its processes, if it does, is what it
        # does then; one that needs torchrun's variables instead is run under torchrun
        reading.mode = SCRIPT
        reading.reads_torchrun = joins_from_environment(tree)
    elif "main" in functions and len(functions["main"].args.args) >= 2:
        reading.mode = WORKER  # main(rank, world_size, ...), as the course's workers
        reading.lines["spawning"] = functions["main"].lineno  # what the processes call
    elif _top_level_calls_own(tree):
        reading.mode = SCRIPT  # what the call does, run, says how the processes start
        reading.reads_torchrun = joins_from_environment(tree)
    elif "main" in functions:
        reading.mode = WORKER
        reading.lines["spawning"] = functions["main"].lineno
    else:
        reading.problem = (
            f"{reading.path.name} has no way to start: no main(rank, world_size, ...) function, no "
            '`if __name__ == "__main__":` block (one that starts the processes, or one '
            "that torchrun can run) and no top-level code that starts processes or joins a "
            "group; define main(rank, world_size, ...) as the course's workers do, or add "
            "the __main__ block"
        )
        return False
    return True


def _asks_device_count(tree: ast.Module) -> bool:
    """True when the code asks how many GPUs there are, which is current, or whether there
    is an accelerator (questions the stand-ins answer only where the doctor gives them GPUs)."""
    return bool(
        calls_in(tree, "device_count", "current_accelerator", "current_device")
        or any("accelerator" in ast.unparse(c.func) for c in calls_in(tree, "is_available"))
    )


def _asks_for_a_gpu(tree: ast.Module) -> bool:
    """True when the code asks whether there is a GPU (``torch.cuda.is_available()``)."""
    return any("cuda" in ast.unparse(c.func) for c in calls_in(tree, "is_available"))


def uncalled_test_fix(path: Path, error: str = "") -> str:
    """The fix for a file that names a test of torch's in a condition without calling it
    (``if torch.cuda.is_available:``), in words; "" when it has none (or does not parse),
    or when ``error`` (what the run raised, if given) is not about a GPU or its backend."""
    if error and not re.search(r"(?i)cuda|nccl|gpu|device", error):
        return ""
    try:
        source = path.read_text(errors="replace")
        line = _uncalled_test(ast.parse(source))
    except (OSError, SyntaxError, ValueError):
        return ""
    if line is None:
        return ""
    return (
        f"line {line} (`{source.splitlines()[line - 1].strip()}`) names a test without calling "
        "it: a function is always true, so that branch runs on every machine; a test gives "
        "its answer only when called"
    )


def _uncalled_test(tree: ast.Module) -> int | None:
    """The first line naming a test of torch's (``torch.cuda.is_available``...) in a
    condition without calling it: the function object itself, always true."""
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    tests = [n.test for n in ast.walk(tree) if isinstance(n, ast.If | ast.IfExp | ast.While)]
    tests += [v for n in ast.walk(tree) if isinstance(n, ast.BoolOp) for v in n.values]
    found = [
        n.lineno for test in tests for n in ast.walk(test)
        if isinstance(n, ast.Attribute) and n.attr.startswith("is_") and id(n) not in called
        and ast.unparse(n).startswith("torch.")
    ]  # fmt: skip
    return min(found, default=None)


#: Calls that start processes without torch's launchers, found at the top level of a file.
PROCESS_STARTERS = frozenset({"Process", "Pool", "elastic_launch"})


def _top_level_starts(tree: ast.Module) -> bool:
    """True when code outside any function starts processes (``Process(...).start()``...)."""
    return any(
        isinstance(n, ast.Call) and called_name(n) in PROCESS_STARTERS for n in top_level(tree)
    )


def _top_level_calls_own(tree: ast.Module) -> bool:
    """True when code that runs at import calls a name the file binds itself (a function
    it defines, or a name it assigns, such as a decorated function)."""
    own = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    own |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
            if isinstance(t, ast.Name)}  # fmt: skip
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in own
        for n in top_level(tree)
    )


def _every_interface(value: object) -> str | None:
    """The address of every interface that ``value`` is, alone or as a ``tcp://`` URL's host.

    >>> [_every_interface(v) for v in ("0.0.0.0", "tcp://0.0.0.0:", "tcp://[::]:29500")]
    ['0.0.0.0', '0.0.0.0', '::']
    >>> [_every_interface(v) for v in ("tcp://127.0.0.1:29500", "env://", 0)]
    [None, None, None]
    """
    if not isinstance(value, str):
        return None
    host = value
    if value.startswith("tcp://"):
        host = value[len("tcp://") :].split("/", 1)[0]
        host = host[1 : host.find("]")] if host.startswith("[") else host.split(":", 1)[0]
    return host if host in ALL_INTERFACES else None


def _read_warnings(reading: Reading, tree: ast.Module) -> None:
    """What is worth a warning though it is no stage's fault: listening on every interface."""
    seen: set[int] = set()
    for node in ast.walk(tree):
        address, where = None, ""
        if isinstance(node, ast.Constant) and _every_interface(node.value) is not None:
            address = _every_interface(node.value)
            where = " (an init_method's tcp:// host)" if address != node.value else ""
        elif isinstance(node, ast.Call) and called_name(node) == "bind" and node.args:
            target = node.args[0]
            first = target.elts[0] if isinstance(target, ast.Tuple) and target.elts else None
            if isinstance(first, ast.Constant) and first.value == "":
                address = ""
        if address is None or node.lineno in seen:
            continue
        seen.add(node.lineno)
        said = f"{address!r}" + (" (an empty host)" if address == "" else where)
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


def _wrapped_names(tree: ast.Module) -> set[str]:
    """What the DDP wrapper is assigned to: ``model``, ``self.model``..."""
    aliases = ddp_aliases(tree)
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            if called_name(node.value) in aliases:
                names.update(ast.unparse(t) for t in node.targets)
    return names


def _read_owners(reading: Reading, tree: ast.Module) -> None:
    """Which stage each line belongs to: the innermost stage call on it, wherever it is."""
    stage_of = {name: key for key, names in STAGE_CALLS.items() for name in names}
    for alias in ddp_aliases(tree):
        stage_of[alias] = "model_wrapping"
    wrapped = _wrapped_names(tree)
    spans: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            key = stage_of.get(called_name(node))
            if key is None and ast.unparse(node.func) in wrapped:
                key = "model_wrapping"  # a forward pass through the DDP wrapper
            if key is not None:
                spans.append((node.lineno, node.end_lineno or node.lineno, key))
    for _, loop in training_loops(tree):  # fetching a batch splits the data
        spans.append((loop.lineno, loop.lineno, "data_division"))
    for start, end, key in sorted(spans, key=lambda s: s[0] - s[1]):  # widest first
        for line in range(start, end + 1):
            reading.owners[line] = key
