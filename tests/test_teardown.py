"""The lesson's training worker, launched again and again: teardown must never crash.

A rank can die with SIGABRT at exit when the process group is destroyed (or
never destroyed) while a DDP model is still alive. The stage-06 worker
destroys its group in a ``finally`` while ``main`` still holds the wrapped
model, as a learner's script would; this test takes that worker straight
from notebooks/06_full_script.ipynb and launches it repeatedly, half of the
launches as fresh interpreters (the way plain ``mp.spawn`` starts ranks).
Set DDP_LESSON_TEARDOWN_RUNS for a longer soak.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from ddp_lesson import launch, reports
from ddp_lesson.sources import writefile_cells

RUNS = int(os.environ.get("DDP_LESSON_TEARDOWN_RUNS", "8"))
NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "06_full_script.ipynb"


@pytest.fixture
def lesson_worker(tmp_path, monkeypatch):
    source = writefile_cells(NOTEBOOK)["workers/stage_06.py"]
    (tmp_path / "lesson_stage_06.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))  # the ranks inherit sys.path
    import lesson_stage_06

    return lesson_stage_06


@pytest.mark.timeout(120 * RUNS + 60)  # each launch is bounded by its own 120 s
@pytest.mark.usefixtures("no_leftovers")
def test_training_worker_tears_down_cleanly_every_time(lesson_worker):
    failures = []
    for attempt in range(RUNS):
        try:
            with launch.bounded(2, timeout_s=120, warm=attempt % 2 == 0) as run:
                mp.spawn(lesson_worker.main, args=(2, run.port, 1), nprocs=2)
        except launch.LaunchError as error:
            failures.append(f"run {attempt}: {error}")
            continue
        if (attempt + 1) % 25 == 0:
            print(f"{attempt + 1} launches, {len(failures)} failed", flush=True)
        assert [r["rank"] for r in run.reports] == [0, 1]
        assert reports.max_abs_difference([r["params"] for r in run.reports]) == 0.0
    print(f"\nteardown loop: {RUNS - len(failures)} of {RUNS} launches ended cleanly")
    assert not failures, f"{len(failures)} of {RUNS} launches failed:\n" + "\n".join(failures)
