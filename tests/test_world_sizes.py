"""The stage notebooks at world sizes 1 and 3: every cell runs without an unexpected error.

Their outputs are not compared (they differ by design: a world of 3 splits
the data three ways); text that depends on the world size is printed by
the notebooks from the run. Slow (every stage notebook twice), so it is
not part of ``make test``: CI runs it (``pytest -m world_sizes``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STAGES = sorted(str(p) for p in (ROOT / "notebooks").glob("0[2-7]_*.ipynb"))


@pytest.mark.world_sizes
@pytest.mark.parametrize("world_size", ["1", "3"])
def test_stage_notebooks_run_at_another_world_size(world_size):
    env = {**os.environ, "DDP_LESSON_WORLD_SIZE": world_size}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--nbval-lax",
         "-o", "addopts=", *STAGES],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:]
