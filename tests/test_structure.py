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
    assert found == [], "import these from ddp_lesson.launch's exported names: " + ", ".join(
        found
    )


def written_by_notebooks() -> set[str]:
    """The files the lesson notebooks write (``%%writefile`` targets), as they name them."""
    import nbformat

    found = set()
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type == "code" and cell.source.startswith("%%writefile"):
                found.add(cell.source.splitlines()[0].split()[-1])
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
