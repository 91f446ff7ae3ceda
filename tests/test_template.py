"""``scripts/ddp_template.py``: the end of the core path, a learner's own script's template.

06_full_script writes it with ``%%writefile`` and explains it with a
checklist; this keeps the notebook, the committed file and the checklist
in step, keeps the conversion small, and runs the file under ``torchrun``
as a learner would.
"""

from __future__ import annotations

import ast
import difflib
import json
import sys
from pathlib import Path

import pytest

from ddp_lesson import launch, sources

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "scripts" / "ddp_template.py"
START = ROOT / "scripts" / "single_device.py"
NOTEBOOK = ROOT / "notebooks" / "06_full_script.ipynb"
#: "About 40": how many lines of the template may differ from single_device.py.
MAX_CHANGED = 40


def changed_lines() -> list[str]:
    """The template's lines that single_device.py does not have, blank and docstring aside."""
    text = TEMPLATE.read_text()
    docstring = ast.get_docstring(ast.parse(text), clean=False) or ""
    ends = len(docstring.splitlines()) + 1  # the docstring's lines at the top
    added = []
    for group in difflib.SequenceMatcher(
        None, START.read_text().splitlines(), text.splitlines(), autojunk=False
    ).get_opcodes():
        tag, _, _, j1, j2 = group
        if tag in ("replace", "insert"):
            added += [
                line for n, line in enumerate(text.splitlines()[j1:j2], j1 + 1)
                if n > ends and line.strip()
            ]
    return added


def checklist() -> str:
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    (cell,) = [c for c in cells if c.get("id") == "06-checklist"]
    return "".join(cell["source"])


def test_06_writes_exactly_the_committed_template():
    written = sources.writefile_cells(NOTEBOOK)["workers/ddp_template.py"]
    assert written.rstrip("\n") == TEMPLATE.read_text().rstrip("\n"), (
        "06_full_script's %%writefile workers/ddp_template.py and scripts/ddp_template.py "
        "differ: change both"
    )


def test_the_conversion_is_a_small_diff_of_the_single_device_script():
    added = changed_lines()
    assert 0 < len(added) <= MAX_CHANGED, (
        f"ddp_template.py changes {len(added)} lines of single_device.py (at most "
        f"{MAX_CHANGED}): keep the template to what DDP needs"
    )


def test_the_checklist_names_every_changed_line():
    table = checklist()
    missing = [
        line.strip() for line in changed_lines()
        if line.split("  #")[0].strip() not in table
    ]
    assert not missing, f"06's checklist does not name these lines of ddp_template.py: {missing}"


def test_changed_lines_are_found(tmp_path, monkeypatch):
    """The diff above is the real one: a line added to the template shows up."""
    copy = tmp_path / "t.py"
    copy.write_text(TEMPLATE.read_text().replace("import time\n", "import time\nimport json\n"))
    monkeypatch.setattr(sys.modules[__name__], "TEMPLATE", copy)
    assert "import json" in changed_lines()


@pytest.mark.usefixtures("no_leftovers")
def test_the_template_trains_under_torchrun_and_rank_0_alone_logs_the_mean():
    run = launch.torchrun(TEMPLATE, "--epochs", "2", nproc_per_node=2, timeout_s=240)
    lines = run.printed.splitlines()
    assert [line[:13] for line in lines] == ["epoch 0: mean", "epoch 1: mean", "test accuracy"], (
        f"one line per epoch and one accuracy, from rank 0 alone: {lines}"
    )
    first, second = (float(line.rsplit(" ", 1)[1]) for line in lines[:2])
    assert second < first, f"the mean loss did not fall: {lines}"
