"""The stage notebooks at world sizes 1 and 3: every cell runs, and every count reads right.

Their outputs are not compared with the saved ones (they differ by design:
a world of 3 splits the data three ways); text that depends on the world
size is printed by the notebooks from the run, and is searched here for a
count whose noun disagrees with its number ("1 ranks"). Slow (every stage
notebook twice), so it is not part of ``make test``: CI runs it
(``pytest -m world_sizes``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_counts import miscounted

ROOT = Path(__file__).resolve().parent.parent
STAGES = sorted((ROOT / "notebooks").glob("0[2-7]_*.ipynb"))


def printed(notebook: Path) -> str:
    """Every text output of an executed notebook."""
    texts = []
    for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]:
        for output in cell.get("outputs", []):
            texts.append("".join(output.get("text", "")))
            data = output.get("data", {})
            texts.append("".join(data.get("text/plain", "")) + "".join(data.get("text/html", "")))
    return "\n".join(texts)


@pytest.mark.world_sizes
@pytest.mark.parametrize("world_size", ["1", "3"])
def test_stage_notebooks_run_at_another_world_size(world_size, tmp_path):
    env = {**os.environ, "DDP_LESSON_WORLD_SIZE": world_size}
    for notebook in STAGES:
        done = subprocess.run(
            [sys.executable, "-m", "jupyter", "nbconvert", "--to", "notebook", "--execute",
             "--ExecutePreprocessor.timeout=600", "--output-dir", str(tmp_path), str(notebook)],
            cwd=notebook.parent, env=env, capture_output=True, text=True, timeout=1800,
        )  # fmt: skip
        assert done.returncode == 0, f"{notebook.name}: {done.stderr[-4000:]}"
        wrong = miscounted(printed(tmp_path / notebook.name))
        assert not wrong, f"{notebook.name} at world size {world_size} prints {wrong}"
