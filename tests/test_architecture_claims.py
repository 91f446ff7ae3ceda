"""Claims of ARCHITECTURE.md about who imports what, held against the code.

Read statically (no process is started): what code that runs in a rank
takes from the launch package, which must be the list the document gives,
and that no worker a notebook writes, nor a script, imports a view or a
check.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ddp_lesson"

#: Where code that runs in a rank begins, besides the workers the notebooks
#: write: the course's rank functions (checks' probes, views' runs, the
#: bench's workers), where every process of a diagnosed run begins, and what
#: the warm server preloads into every rank forked from it.
RANK_ROOTS = [
    *sorted((PACKAGE / "exercises" / "probes").glob("[!_]*.py")),
    PACKAGE / "views" / "runs.py",
    PACKAGE / "bench" / "workers.py",
    PACKAGE / "doctor" / "start.py",
    PACKAGE / "warm.py",
]

#: Packages a worker never imports: nothing flows back up from a rank.
UPSTREAM = ("ddp_lesson.views", "ddp_lesson.exercises")


def worker_cells() -> dict[str, str]:
    """The Python files the notebooks and solutions write (``%%writefile``): name -> source."""
    import nbformat

    found = {}
    for folder in ("notebooks", "solutions"):
        for path in sorted((ROOT / folder).glob("[0-9][0-9]_*.ipynb")):
            for cell in nbformat.read(path, as_version=4).cells:
                lines = cell.source.splitlines()
                if cell.cell_type == "code" and lines and lines[0].startswith("%%writefile"):
                    name = lines[0].split()[-1]
                    if name.endswith(".py"):
                        found[f"{folder}/{path.name}:{name}"] = "\n".join(lines[1:])
    return found


def _absolute(path: Path | None, node: ast.ImportFrom) -> str:
    """The module an ``ImportFrom`` names, relative imports resolved from ``path``."""
    if not node.level or path is None:
        return node.module or ""
    package = path.relative_to(ROOT).with_suffix("").parts[:-1]
    base = package[: len(package) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def imports(source: str, path: Path | None = None) -> list[tuple[str, list[str] | None]]:
    """Every import of ``source`` (at any depth): ``(module, names)``; names None for ``import``."""
    found: list[tuple[str, list[str] | None]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            found.append((_absolute(path, node), [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names]
    return found


def module_file(dotted: str) -> Path | None:
    """The file of the course's module ``dotted``, or None when it is no module of ours."""
    base = ROOT.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if dotted.startswith("ddp_lesson") and candidate.exists():
            return candidate
    return None


def launch_names(module: str, names: list[str] | None) -> list[str]:
    """What one import takes from the launch package (``launch`` for the package itself)."""
    if module == "ddp_lesson" and names and "launch" in names:
        return ["launch"]
    if module == "ddp_lesson.launch":
        return list(names or ["launch"])
    if module.startswith("ddp_lesson.launch."):
        return [module.removeprefix("ddp_lesson.launch.")]
    return []


def rank_side_launch_imports() -> dict[str, set[str]]:
    """Each rank-side file that imports the launch package -> the names it takes from it.

    Rank-side: the workers the notebooks write, :data:`RANK_ROOTS`, and every
    module of the course they import (at any depth, not through a package's
    ``__init__`` unless they import from it); the launch's own modules are
    the launch, not its users.
    """
    found: dict[str, set[str]] = {}
    # a worker is named as the notebook names it, an exercise's by its solutions notebook
    todo: list[tuple[str, str, Path | None]] = [
        (name.split(":")[name.startswith("notebooks/")], source, None)
        for name, source in worker_cells().items()
    ]
    todo += [(str(p.relative_to(PACKAGE)), p.read_text(), p) for p in RANK_ROOTS]
    seen = set()
    while todo:
        shown, source, path = todo.pop()
        if shown in seen:
            continue
        seen.add(shown)
        for module, names in imports(source, path):
            taken = launch_names(module, names)
            if taken:
                found.setdefault(shown, set()).update(taken)
                continue
            followed = [module_file(f"{module}.{n}") for n in names or []]
            if not any(followed):
                followed = [module_file(module)]
            for file in filter(None, followed):
                todo.append((str(file.relative_to(PACKAGE)), file.read_text(), file))
    return found


def listed_launch_imports() -> dict[str, set[str]]:
    """What ARCHITECTURE.md's "One direction" says rank-side code takes from the launch.

    Its list items read ``- `FILE` (`NAME`, `NAME`): why``; one item may name
    several files, each followed by its own names.
    """
    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text.split("## One direction", 1)[1].split("\n## ", 1)[0]
    listed: dict[str, set[str]] = {}
    for item in re.findall(r"^- (.*(?:\n  .*)*)", section, flags=re.M):
        pairs = re.findall(r"`([\w/]+\.(?:py|ipynb))` \(([^)]*)\)", item.replace("\n  ", " "))
        for file, names in pairs:
            listed.setdefault(file, set()).update(re.findall(r"`(\w+)`", names))
    return listed


def test_the_rank_sides_imports_of_the_launch_are_the_ones_listed():
    found = rank_side_launch_imports()
    assert "doctor/probe.py" in found  # (the reading follows imports beyond its roots)
    assert found == listed_launch_imports(), (
        "ARCHITECTURE.md ('One direction') lists other rank-side imports of the launch "
        f"than the code has: {found}"
    )


def test_no_worker_or_script_imports_a_view_or_a_check():
    sources = dict(worker_cells())
    sources.update({f"scripts/{p.name}": p.read_text() for p in (ROOT / "scripts").glob("*.py")})
    assert any("stage_06" in name for name in sources) and len(sources) > 30
    back_up = []
    for name, source in sorted(sources.items()):
        for module, names in imports(source):
            dotted = [module] + [f"{module}.{n}" for n in names or []]
            if any(d == u or d.startswith(u + ".") for d in dotted for u in UPSTREAM):
                back_up.append(f"{name}: {module} {names or ''}")
    assert back_up == [], f"a worker imports what draws or checks its reports: {back_up}"


def _enclosing(path: Path, line: int) -> str:
    """The name of the innermost function of ``path`` around ``line``."""
    names = [
        (node.lineno, node.name)
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.lineno <= line <= node.end_lineno
    ]
    return max(names)[1] if names else "<module>"


def test_inside_the_launch_only_programs_and_warm_up_start_a_process():
    from test_structure import LAUNCH, process_starts

    starts = set()
    for path in sorted(LAUNCH.glob("*.py")):
        for where in process_starts(path):
            starts.add((path.name, _enclosing(path, int(where.rsplit(":", 1)[1]))))
    # ranks start through torch's start_processes (launch/rank_starter.py), the
    # warm server through multiprocessing's forkserver: neither is a start of ours
    assert {name for name, _ in starts} == {"programs.py", "warm_server.py"}, starts
    assert {f for name, f in starts if name == "warm_server.py"} == {"warm_up"}, starts


def test_every_test_the_document_names_exists():
    text = (ROOT / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"(tests/[\w/]+\.py)::(\w+)", text))
    assert len(named) > 20
    missing = []
    for file, name in sorted(named):
        tree = ast.parse((ROOT / file).read_text()) if (ROOT / file).exists() else ast.Module([])
        functions = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
        if name not in functions:
            missing.append(f"{file}::{name}")
    assert missing == [], f"ARCHITECTURE.md names tests that do not exist: {missing}"


def checks_described() -> tuple[list[str], set[str]]:
    """What ARCHITECTURE.md's "What each check compares" names: entries, and every check named.

    Each entry opens ``- **`check_name`** (`checks/module.py`...): what it
    compares``; any other ``check_`` name in backticks counts as named too.
    """
    text = (ROOT / "ARCHITECTURE.md").read_text()
    section = text.split("## What each check compares", 1)[1].split("\n## ", 1)[0]
    entries = re.findall(r"^- \*\*`(check_\w+)`\*\*", section, flags=re.M)
    return entries, set(re.findall(r"`(check_\w+)`", section))


def test_every_check_says_what_it_compares():
    from ddp_lesson.exercises import checks

    existing = {name for name in dir(checks) if name.startswith("check_")}
    entries, named = checks_described()
    assert len(existing) > 20  # (the package's own list of checks was read)
    repeated = sorted({name for name in entries if entries.count(name) > 1})
    assert repeated == [], f"ARCHITECTURE.md describes these checks twice: {repeated}"
    missing, gone = sorted(existing - set(entries)), sorted(named - existing)
    assert missing == [], f"ARCHITECTURE.md ('What each check compares') omits: {missing}"
    assert gone == [], f"ARCHITECTURE.md ('What each check compares') names gone checks: {gone}"
