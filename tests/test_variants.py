"""A notebook's variants of a stage's worker are made from that worker, never copied by hand.

A lesson that runs a stage's script with a few lines changed (07's correct
run and its mistakes) writes the stage's worker with
``sources.write_worker`` and each changed file with ``sources.variant``,
which prints the change. So the script a learner sees changed is the one
its stage's notebook teaches, and a change to that script reaches every
variant. These tests replay each notebook's chain of variants in a
temporary folder, check what each step changed and what the notebook
printed, and look for a ``%%writefile`` cell that repeats a stage's worker.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from ddp_lesson import sources

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = [
    path
    for folder in ("notebooks", "solutions", "exercises")
    for path in sorted((ROOT / folder).glob("[0-9][0-9]_*.ipynb"))
]
#: A ``%%writefile`` cell that shares this many consecutive lines with a
#: stage's worker is a copy of it (the longest run any other worker shares
#: with one is 12 lines).
COPY_LINES = 20
STAGE_WORKER = re.compile(r"workers/stage_(\d\d)\.py")
#: How a notebook starts a worker: imports it, names its module, or hands
#: its file to the doctor, python or torchrun.
LAUNCHES = re.compile(
    r"^\s*import workers\.(\w+)|[\"']workers\.(\w+)[\"']|diagnose\(\s*[\"']workers/(\w+)\.py"
    r"|(?:python|torchrun)\b[^\n]*\bworkers/(\w+)\.py",
    re.M,
)


def stage_workers() -> dict[str, str]:
    """Each stage's worker file name and its source, as the stage's notebook writes it."""
    found = {}
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        target = f"workers/stage_{path.name[:2]}.py"
        if target in sources.writefile_cells(path):
            found[target] = sources.worker_source(path.name[:2])
    return found


STAGES = stage_workers()


@dataclass
class Step:
    """One cell's writing of one worker file.

    ``kind`` is ``"writefile"`` (``text`` is the cell's), ``"stage"``
    (``sources.write_worker(stage, target)``) or ``"variant"``
    (``sources.variant(source, target, change)``).
    """

    kind: str
    target: str
    cell: dict
    text: str = ""
    stage: str = ""
    source: str = ""
    change: str = ""


def code_cells(path: Path) -> list[dict]:
    return [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]


def steps(path: Path) -> list[Step]:
    """Every worker file the notebook writes, in the order its cells do."""
    found = []
    for cell in code_cells(path):
        code = "".join(cell["source"])
        if code.startswith("%%writefile"):
            first, _, body = code.partition("\n")
            found.append(Step("writefile", first.split()[-1], cell, text=body + "\n"))
            continue
        if "sources.variant(" not in code and "sources.write_worker(" not in code:
            continue
        for node in ast.walk(ast.parse(code)):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "sources"
                and node.func.attr in ("variant", "write_worker")
            ):
                continue
            values = [a.value for a in node.args if isinstance(a, ast.Constant)]
            assert len(values) == len(node.args) == (3 if node.func.attr == "variant" else 2), (
                f"{path.name}: give sources.{node.func.attr} its files and change as "
                f"plain strings, so that they can be checked: {ast.unparse(node)[:80]}"
            )
            if node.func.attr == "variant":
                source, target, change = values
                found.append(Step("variant", target, cell, source=source, change=change))
            else:
                stage, target = values
                found.append(Step("stage", target, cell, stage=stage))
    return found


def launched(path: Path) -> list[str]:
    """The worker files (``workers/NAME.py``) the notebook starts."""
    names = set()
    for cell in code_cells(path):
        code = "".join(cell["source"])
        if not code.startswith("%%writefile"):
            names |= {next(n for n in m if n) for m in LAUNCHES.findall(code)}
    return sorted(f"workers/{name}.py" for name in names)


def root(chain: list[Step], target: str) -> list[Step]:
    """The steps that make ``target``: the first one writes a file, each next one varies it."""
    made = {}
    for step in chain:
        made[step.target] = step  # a file written again: its last writing counts
    if target not in made:
        return []
    path = [made[target]]
    while path[0].kind == "variant" and path[0].source in made and len(path) < 50:
        path.insert(0, made[path[0].source])
    return path


def shared_run(text: str, other: str) -> tuple[int, int]:
    """The longest run of consecutive lines ``text`` shares with ``other``: (length, first line)."""
    ours = [line.rstrip() for line in text.splitlines()]
    theirs = [line.rstrip() for line in other.splitlines()]
    match = difflib.SequenceMatcher(None, ours, theirs, autojunk=False).find_longest_match(
        0, len(ours), 0, len(theirs)
    )
    return match.size, match.a + 1


def copies(text: str) -> list[str]:
    """The stage workers of which ``text`` repeats COPY_LINES lines or more, and where."""
    found = []
    for name, stage_text in STAGES.items():
        size, first = shared_run(text, stage_text)
        if size >= COPY_LINES:
            found.append(f"lines {first}-{first + size - 1} repeat {size} lines of {name}")
    return found


def own_stage_worker(path: Path) -> str:
    """The stage worker that notebook ``NN_*`` would write as its own: ``workers/stage_NN.py``."""
    return f"workers/stage_{path.name[:2]}.py"


def hand_copies(path: Path) -> list[str]:
    """The notebook's ``%%writefile`` cells that repeat a stage's worker."""
    return [
        f"{path.name}: %%writefile {step.target}: {found}; write it with "
        "sources.write_worker and sources.variant instead"
        for step in steps(path)
        if step.kind == "writefile" and step.target != own_stage_worker(path)
        for found in copies(step.text)
    ]


def launched_copies(path: Path) -> list[str]:
    """The launched workers that copy a stage's worker without coming from it by ``variant``."""
    chain = steps(path)
    problems = []
    for target in launched(path):
        made = root(chain, target)
        if not made or made[0].kind == "stage" or made[0].target == own_stage_worker(path):
            continue  # written elsewhere, or made from a stage's worker as it is
        start = made[0].text
        for found in copies(start):
            problems.append(
                f"{path.name}: {target} starts from {made[0].target}, whose %%writefile "
                f"cell is a copy ({found}): make it with sources.variant from the stage's "
                "worker, written by sources.write_worker"
            )
    return problems


def declared(change: str, source: list[str]) -> tuple[Counter, Counter]:
    """The lines ``change`` takes out of ``source`` and puts in (a ``-...`` line: the rest)."""
    out, put = Counter(), Counter()
    group: list[str] = []
    for raw in change.strip("\n").splitlines():
        if raw == "-..." and group:
            at = next(
                i for i in range(len(source))
                if source[i : i + len(group)] == [line.rstrip() for line in group]
            )  # fmt: skip
            out.update(source[at + len(group) :])
            group = []
        elif raw[:1] in ("-", " "):
            group.append(raw[1:])
            if raw[:1] == "-":
                out[raw[1:].rstrip()] += 1
        else:
            group = []
            if raw[:1] == "+":
                put[raw[1:].rstrip()] += 1
    return out, put


def printed(cell: dict) -> str:
    return "".join("".join(o["text"]) for o in cell["outputs"] if o.get("name") == "stdout")


def replay(path: Path, folder: Path) -> list[str]:
    """Write the notebook's workers in ``folder`` as its cells do; return what differs."""
    (folder / "workers").mkdir()
    problems = []
    chain = steps(path)
    diffs: dict[int, list[str]] = {}  # each cell's diffs, by the cell's id()
    for step in chain:
        target = folder / step.target
        if step.kind == "writefile":
            target.write_text(step.text)
        elif step.kind == "stage":
            assert sources.write_worker(step.stage, target) == target
            assert target.read_text() == sources.worker_source(step.stage)
        else:
            before = (folder / step.source).read_text()
            diff = sources.variant(folder / step.source, target, step.change)
            diffs.setdefault(id(step.cell), []).append(diff)
            old = [line.rstrip() for line in before.splitlines()]
            out, put = declared(step.change, old)
            expected = Counter(old) - out + put
            got = Counter(line.rstrip() for line in target.read_text().splitlines())
            if got != expected:
                problems.append(
                    f"{path.name}: {step.target} is not {step.source} with the declared "
                    f"lines changed: more {dict(got - expected)}, fewer {dict(expected - got)}"
                )
    for step in chain:
        if step.kind == "variant" and id(step.cell) in diffs:
            shown, wanted = printed(step.cell), "\n".join(diffs.pop(id(step.cell))) + "\n"
            if shown != wanted:
                problems.append(
                    f"{path.name}: the saved output of the cell that writes {step.target} is "
                    f"not the diff it prints now: re-run the notebook\n{shown}\n!=\n{wanted}"
                )
    return problems


VARIED = [p for p in NOTEBOOKS if any(s.kind == "variant" for s in steps(p))]
MISTAKES = ROOT / "notebooks" / "07_mistakes.ipynb"


@pytest.mark.parametrize("path", VARIED, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_variant_chain_gives_its_start_plus_the_declared_changes(path, tmp_path):
    problems = replay(path, tmp_path)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_a_launched_copy_of_a_stage_worker_is_made_from_it(path):
    problems = launched_copies(path)
    assert not problems, "\n".join(problems)


def test_07_makes_its_correct_run_and_mistakes_from_stage_06s_worker(path=MISTAKES):
    chain = steps(path)
    mistakes = [t for t in launched(path) if t.startswith("workers/mistake_")]
    assert "workers/mistake_none.py" in mistakes and len(mistakes) >= 8, mistakes
    for target in mistakes:
        made = root(chain, target)
        assert made and made[0].kind == "stage" and made[0].stage == "06", (
            f"{target} starts from {made[0].kind if made else 'nothing'} "
            f"{made[0].target if made else ''}, not from sources.write_worker('06', ...)"
        )
        assert all(step.kind == "variant" for step in made[1:]), target


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_no_writefile_cell_repeats_a_stage_worker(path):
    problems = hand_copies(path)
    assert not problems, "\n".join(problems)


def test_a_hand_copy_is_found(tmp_path):
    copy = sources.worker_source("06").replace("stage_06", "mistake_none")
    notebook = {
        "cells": [
            {"cell_type": "code", "source": f"%%writefile workers/copy.py\n{copy}",
             "outputs": [], "metadata": {}},
            {"cell_type": "code", "source": "import workers.copy as worker\n",
             "outputs": [], "metadata": {}},
        ]
    }  # fmt: skip
    path = tmp_path / "99_copy.ipynb"
    path.write_text(json.dumps(notebook))
    assert launched(path) == ["workers/copy.py"]
    assert "repeat" in "".join(hand_copies(path))
    assert "workers/stage_06.py" in "".join(launched_copies(path))
