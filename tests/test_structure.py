"""The package's shape: small modules, one door into the launch, one place that starts processes.

What ARCHITECTURE.md promises a maintainer, held against the code: every
file it names exists; no module passes 500 lines; outside ``launch/``
nothing starts a process and nothing imports from inside ``launch/`` but
the names the package exports.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ddp_lesson"
LAUNCH = PACKAGE / "launch"

#: The most lines one module of the package may have.
MODULE_LINES_MAX = 500

#: Calls that start a process (a program, an interpreter, a fork, a kernel).
STARTS = {
    ("subprocess", "Popen"), ("subprocess", "run"), ("subprocess", "call"),
    ("subprocess", "check_call"), ("subprocess", "check_output"), ("os", "system"),
    ("os", "fork"), ("os", "posix_spawn"), ("os", "execv"), ("os", "spawnv"),
    ("multiprocessing", "Process"), ("multiprocessing", "get_context"),
    ("nbclient", "NotebookClient"), ("jupyter_client", "KernelManager"),
}  # fmt: skip


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_no_module_passes_500_lines():
    long = {
        str(p.relative_to(ROOT)): n
        for p in modules()
        if (n := len(p.read_text().splitlines())) > MODULE_LINES_MAX
    }
    assert long == {}, f"split these by job (at most {MODULE_LINES_MAX} lines): {long}"


def _imported(tree: ast.Module) -> dict[str, str]:
    """Each name a module binds by import -> the module it came from (``a.b`` or ``a.b.c``)."""
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                names[(alias.asname or alias.name).split(".")[0]] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def process_starts(path: Path) -> list[str]:
    """Lines of ``path`` that call something in :data:`STARTS`, however it was imported."""
    tree = ast.parse(path.read_text())
    names = _imported(tree)
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        parts = []
        func = node.func
        while isinstance(func, ast.Attribute):
            parts.insert(0, func.attr)
            func = func.value
        if not isinstance(func, ast.Name):
            continue
        dotted = ".".join([names.get(func.id, func.id), *parts]).split(".")
        if (dotted[0], dotted[-1]) in STARTS or tuple(dotted[-2:]) in STARTS:
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_nothing_outside_launch_starts_a_process():
    found = [w for p in modules() if LAUNCH not in p.parents for w in process_starts(p)]
    assert found == [], "start processes through ddp_lesson.launch: " + ", ".join(found)


def test_the_reading_finds_a_process_start(tmp_path):
    sample = ROOT / "tests" / f"_starts_{tmp_path.name}.py"
    sample.write_text(
        "import subprocess\nimport multiprocessing as mp\nfrom nbclient import NotebookClient\n"
        "from subprocess import run\nsubprocess.Popen(['x'])\nmp.get_context('fork')\n"
        "NotebookClient(None)\nrun(['y'])\nprint('nothing started')\n"
    )
    try:
        lines = [int(w.rsplit(":", 1)[1]) for w in process_starts(sample)]
    finally:
        sample.unlink()
    assert lines == [5, 6, 7, 8]


def launch_imports(path: Path) -> list[str]:
    """What ``path`` takes from the launch package other than its exported names."""
    import ddp_lesson.launch as launch

    public = set(launch.__all__)
    package = path.relative_to(ROOT).with_suffix("").parts
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = list(package[: len(package) - node.level]) if node.level else []
            module = ".".join([*base, *(node.module or "").split(".")]).strip(".")
            if module.startswith("ddp_lesson.launch."):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {module}")
            elif module == "ddp_lesson.launch":
                inner = [a.name for a in node.names if a.name not in public]
                found += [f"{path.relative_to(ROOT)}:{node.lineno} {n}" for n in inner]
            elif module == "ddp_lesson":
                pass  # `from ddp_lesson import launch`: the package itself
        elif isinstance(node, ast.Import):
            found += [
                f"{path.relative_to(ROOT)}:{node.lineno} {a.name}"
                for a in node.names
                if a.name.startswith("ddp_lesson.launch.")
            ]
    return found


def test_outside_launch_only_its_exported_names_are_imported():
    # (warm.py is what the launch's warm server preloads: the launch's own, kept
    # outside the package only so that it runs before the package imports torch)
    outside = [p for p in modules() if LAUNCH not in p.parents and p.name != "warm.py"]
    found = [w for p in outside for w in launch_imports(p)]
    assert found == [], "import these from ddp_lesson.launch's exported names: " + ", ".join(found)


def written_by_notebooks() -> set[str]:
    """The files the lesson and exercise notebooks write (``%%writefile`` targets), as they
    name them and as the repository's root names them (they exist only once the notebook ran)."""
    import nbformat

    found = set()
    for folder in ("notebooks", "exercises"):
        for path in sorted((ROOT / folder).glob("[0-9][0-9]_*.ipynb")):
            for cell in nbformat.read(path, as_version=4).cells:
                if cell.cell_type == "code" and cell.source.startswith("%%writefile"):
                    target = cell.source.splitlines()[0].split()[-1]
                    found |= {target, f"{folder}/{target}"}
    return found


def test_architecture_names_only_files_that_exist():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"`([\w./-]+\.(?:py|md|txt|toml|ipynb|cfg|yml))`", text))
    assert len(named) > 20
    written = written_by_notebooks()
    missing = []
    for name in sorted(named):
        places = [ROOT / name, PACKAGE / name]  # (a path inside the package may start there)
        template = "NN" in name or "<" in name  # a recipe's pattern, such as NN_name.ipynb
        if not template and name not in written and not any(p.exists() for p in places):
            missing.append(name)
    assert missing == [], f"ARCHITECTURE.md names files that do not exist: {missing}"


#: The most lines one function may have (from ``def`` to its last line).
FUNCTION_LINES_MAX = 60

#: Functions allowed past FUNCTION_LINES_MAX, each with its reason (none today).
LONG_FUNCTIONS: dict[str, str] = {}


def test_no_function_passes_60_lines():
    long = {}
    for path in modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                name = f"{path.relative_to(ROOT)}:{node.name}"
                if lines > FUNCTION_LINES_MAX and name not in LONG_FUNCTIONS:
                    long[name] = lines
    assert long == {}, f"split these into named steps (at most {FUNCTION_LINES_MAX}): {long}"


#: Calls whose result is state that can change (a container, a lock, per-thread data).
MUTABLE_CALLS = {
    "dict", "list", "set", "Counter", "defaultdict", "OrderedDict", "deque", "local", "Lock",
    "RLock", "Event", "WeakKeyDictionary", "WeakValueDictionary",
}  # fmt: skip

#: Modules run inside a lesson's ranks that gather what the rank saw for its report.
RANK_MEASURES = PACKAGE / "measures"


def module_state(path: Path) -> list[tuple[str, int]]:
    """The module-level variables of ``path`` that hold changing state: ``(name, line)``.

    A name assigned a mutable container, lock or per-thread object at the top
    level, or rebound through ``global`` in a function; constants (UPPER_CASE)
    and ``__all__`` are not state.
    """
    tree = ast.parse(path.read_text())
    rebound = {name for node in ast.walk(tree) if isinstance(node, ast.Global)
               for name in node.names}  # fmt: skip
    found = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        for target, each in _pairs(targets, value):
            name = getattr(target, "id", "")
            if not name or name.isupper() or name == "__all__":
                continue
            if _mutable(each) or name in rebound:
                found.append((name, node.lineno))
    return found


def _pairs(targets: list[ast.expr], value: ast.expr) -> list[tuple[ast.expr, ast.expr]]:
    """Each name an assignment binds with the value it gets (``a, b = [], {}`` pairs them)."""
    pairs = []
    for target in targets:
        if isinstance(target, ast.Tuple | ast.List):
            values = value.elts if isinstance(value, ast.Tuple | ast.List) else None
            if values is not None and len(values) == len(target.elts):
                pairs += list(zip(target.elts, values, strict=True))
            else:  # unpacked from one object: each name gets a part of it
                pairs += [(each, value) for each in target.elts]
        else:
            pairs.append((target, value))
    return pairs


def _mutable(value: ast.expr) -> bool:
    """Whether ``value`` makes state that can change: a container, a lock, per-thread data."""
    func = value.func if isinstance(value, ast.Call) else None
    called = getattr(func, "id", None) or getattr(func, "attr", None)
    containers = (ast.List, ast.Dict, ast.Set, ast.ListComp, ast.DictComp, ast.SetComp)
    return isinstance(value, containers) or called in MUTABLE_CALLS


def reason_above(lines: list[str], line: int) -> bool:
    """Whether a comment sits above ``line`` (1-based) or above the assignments just before it."""
    index = line - 2
    while index >= 0 and re.match(r"^[A-Za-z_]\w*(\s*:[^=]+)?\s*=", lines[index]):
        index -= 1  # a group of state that one comment explains
    return index >= 0 and lines[index].startswith("#")


def state_section() -> str:
    """The text of ARCHITECTURE.md's "State a module keeps" section, up to the next heading."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    return text.split("\n## State a module keeps\n", 1)[1].split("\n## ", 1)[0]


def test_the_state_reading_finds_names_bound_together(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("a, b = [], 0\n(c, d) = {}, set()\ne = f = []\nLIMIT = []\ng, h = x\n")
    assert [name for name, _ in module_state(sample)] == ["a", "c", "d", "e", "f"]


def test_module_state_says_why_and_is_listed():
    """Each variable a module keeps across calls has a comment saying why, and is listed."""
    listed = state_section()
    silent, unlisted = [], []
    for path in modules():
        if RANK_MEASURES in path.parents:
            continue  # (ARCHITECTURE.md says why for the whole folder)
        lines = path.read_text().splitlines()
        for name, line in module_state(path):
            where = f"{path.relative_to(ROOT)}:{line} {name}"
            if not reason_above(lines, line):
                silent.append(where)
            if f"`{name}`" not in listed:
                unlisted.append(where)
    assert silent == [], f"say why each keeps state, in a comment above it: {silent}"
    assert unlisted == [], f"list these in ARCHITECTURE.md's 'State' section: {unlisted}"
