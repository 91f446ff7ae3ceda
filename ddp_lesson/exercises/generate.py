"""Generate ``exercises/`` from ``solutions/``: one source for both.

Solution code sits between ``### BEGIN SOLUTION`` and ``### END SOLUTION``
lines (nbgrader's convention). In the exercise notebook each such block
becomes a stub: simple assignments keep their names with ``...`` as the
value, anything else becomes ``raise NotImplementedError``. The checks
report both kinds of stub as "not attempted yet".

Run ``python -m ddp_lesson.exercises`` (``make exercises``) to regenerate,
``--check`` to only compare (CI does). A learner's edited exercise notebook
is never overwritten: the generator recognises its own output by a hash of
the cell sources stored in the notebook's metadata, and skips any file whose
sources have changed since.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
from pathlib import Path

import nbformat

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
STUB_COMMENT = "# YOUR CODE HERE"
_ASSIGNMENT = re.compile(r"^([A-Za-z_]\w*)\s*=(?!=)")


def _stub(block: list[str], indent: str) -> list[str]:
    """The stub lines that replace one solution block."""
    names = []
    for line in block:
        if not line.strip():
            continue
        match = _ASSIGNMENT.match(line[len(indent) :]) if line.startswith(indent) else None
        if match is None or line[len(indent) :].startswith((" ", "\t")):
            return [
                f"{indent}{STUB_COMMENT}",
                f'{indent}raise NotImplementedError("your code here")',
            ]
        if match[1] not in names:
            names.append(match[1])
    return [f"{indent}{name} = ...  {STUB_COMMENT}" for name in names]


def strip_solutions(source: str, where: str = "a cell") -> str:
    """Replace every solution block in ``source`` by a stub.

    Args:
        source: a code cell's text.
        where: names the cell in error messages.

    >>> print(strip_solutions("x = 1\\n### BEGIN SOLUTION\\ny = 2\\n### END SOLUTION"))
    x = 1
    y = ...  # YOUR CODE HERE
    >>> body = "    ### BEGIN SOLUTION\\n    return 1\\n    ### END SOLUTION"
    >>> print(strip_solutions("def f():\\n" + body))
    def f():
        # YOUR CODE HERE
        raise NotImplementedError("your code here")
    """
    lines = source.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.strip() == BEGIN:
            indent = line[: len(line) - len(line.lstrip())]
            try:
                end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == END)
            except StopIteration:
                raise ValueError(f"{where}: {BEGIN} on line {i + 1} has no {END}") from None
            out.extend(_stub(lines[i + 1 : end], indent))
            i = end + 1
            continue
        if line.strip() == END:
            raise ValueError(f"{where}: {END} on line {i + 1} has no {BEGIN} before it")
        out.append(line)
        i += 1
    return "\n".join(out)


def sources_hash(notebook: dict) -> str:
    """A hash of a notebook's cell sources: what a learner writes, not outputs."""
    text = json.dumps(["".join(c["source"]) for c in notebook["cells"]])
    return hashlib.sha256(text.encode()).hexdigest()


def render(solution: Path) -> str:
    """The exercise notebook generated from ``solution``, as file text."""
    notebook = nbformat.read(solution, as_version=4)
    exercise = copy.deepcopy(notebook)
    # Only what the solution's author wrote carries over: running the solution
    # notebook (outputs, language_info, timings) must not change the exercise.
    exercise.metadata = nbformat.NotebookNode(
        {"kernelspec": notebook.metadata.get("kernelspec", {})}
    )
    for index, cell in enumerate(exercise.cells):
        tags = cell.metadata.get("tags")
        cell.metadata = nbformat.NotebookNode({"tags": tags} if tags else {})
        if cell.cell_type == "code":
            cell.source = strip_solutions(cell.source, f"{solution.name}, cell {index}")
            cell.outputs = []
            cell.execution_count = None
    origin = f"solutions/{solution.name}"
    exercise.cells.insert(
        0,
        nbformat.v4.new_markdown_cell(
            f"*Generated from `{origin}` by `make exercises`: edit the solution, not this "
            "file. Your answers here are safe: the generator never overwrites a notebook "
            "you have changed.*"
        ),
    )
    exercise.cells[0]["id"] = "generated-note"
    exercise.metadata["ddp_lesson"] = {"generated_from": origin}
    exercise.metadata["ddp_lesson"]["sources_sha256"] = sources_hash(exercise)
    return nbformat.writes(exercise) + "\n"


def _learner_edited(path: Path) -> bool:
    notebook = json.loads(path.read_text())
    recorded = notebook.get("metadata", {}).get("ddp_lesson", {}).get("sources_sha256")
    return recorded != sources_hash(notebook)


def generate(root: Path, check: bool = False) -> int:
    """Write (or with ``check``, compare) every exercise; return the number of problems."""
    problems = 0
    solutions = sorted((root / "solutions").glob("[0-9][0-9]_*.ipynb"))
    if not solutions:
        print(f"no solution notebooks found in {root / 'solutions'}")
        return 1
    for solution in solutions:
        target = root / "exercises" / solution.name
        text = render(solution)
        if check:
            if not target.exists() or target.read_text() != text:
                print(f"{target} is out of date: run `make exercises` and commit the result")
                problems += 1
            continue
        if target.exists() and target.read_text() == text:
            continue
        if target.exists() and _learner_edited(target):
            print(
                f"{target} has your edits, so it was left as it is. To get the new version, "
                "rename or move your copy and run `make exercises` again."
            )
            problems += 1
            continue
        target.parent.mkdir(exist_ok=True)
        target.write_text(text)
        print(f"wrote {target}")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 on drift")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2])
    args = parser.parse_args(argv)
    return 1 if generate(args.root, check=args.check) else 0
