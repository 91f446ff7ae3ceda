"""Shared helpers for the tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def writefile_cells(notebook: Path) -> dict[str, str]:
    """Map each ``%%writefile`` target in ``notebook`` to the source it writes."""
    cells = json.loads(notebook.read_text())["cells"]
    found = {}
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and source.startswith("%%writefile"):
            first, _, body = source.partition("\n")
            found[first.split()[1]] = body + "\n"
    return found


@pytest.fixture
def no_leftovers():
    """Fail the test if it leaves any process running."""
    from ddp_lesson import launch

    yield
    left = launch.child_processes()
    assert not left, f"processes left running: {[p.pid for p in left]}"
