"""An elastic torchrun job (``--nnodes=1:2``) whose second node joins, then is lost.

18_stopping_and_resizing's worker runs under ``launch.torchrun_resizing``:
the world grows from one node to two and shrinks back, every epoch is
finished once (each round resumes from the checkpoint), the first node's
torchrun restarts its worker once for the join and once for the loss,
nothing listens beyond 127.0.0.1 and nothing is left running.
"""

from __future__ import annotations

import sys

import pytest

from ddp_lesson import launch, sources

pytestmark = pytest.mark.usefixtures("no_leftovers")

NOTEBOOK = sources.NOTEBOOKS / "18_stopping_and_resizing.ipynb"


@pytest.fixture
def job(tmp_path, monkeypatch):
    """18's elastic worker, written where its cell writes it, in a scratch folder."""
    folder = tmp_path / "workers"
    folder.mkdir()
    path = folder / "elastic_job.py"
    path.write_text(sources.writefile_cells(NOTEBOOK)["workers/elastic_job.py"])
    monkeypatch.chdir(tmp_path)
    yield path
    for name in [m for m in sys.modules if m.split(".")[0] == "workers"]:
        del sys.modules[name]


def epochs_said(run) -> list[tuple[int, int]]:
    """(epoch, world size) for each line the job's rank 0 printed."""
    said = [line.split() for line in run.printed.splitlines() if line.startswith("epoch ")]
    # by epoch: each node's output is kept apart, and rank 0 may run on either node
    return sorted((int(words[1].rstrip(":")), int(words[-1])) for words in said)


def test_a_node_joins_and_is_lost_while_the_job_resumes(job, tmp_path, listening):
    run = launch.torchrun_resizing(
        str(job), "--epochs", "12", "--checkpoint", str(tmp_path / "elastic.pt"),
        join_after=2, leave_after=5,
    )  # fmt: skip
    said = epochs_said(run)
    assert [epoch for epoch, _ in said] == list(range(12)), run.printed
    sizes = [size for _, size in said]
    changes = [n for i, n in enumerate(sizes) if i == 0 or n != sizes[i - 1]]
    assert changes == [1, 2, 1], run.printed
    assert sizes[:2] == [1, 1], said  # the second node waited for two epochs
    # a join and a loss: two restarts (a busy machine can make torchrun repeat one)
    assert run.restarts[0] >= 2, run.log("restart")
    assert run.log("new nodes") and run.log("FAILED"), run.log("restart")
    assert run.reports == [{"rank": 0, "world_size": 1}], run.reports
    assert listening and listening <= {"127.0.0.1"}, listening


def test_a_node_that_stays_ends_with_the_job(job, tmp_path):
    run = launch.torchrun_resizing(
        str(job), "--epochs", "5", "--checkpoint", str(tmp_path / "elastic.pt"), join_after=1
    )
    sizes = [size for _, size in epochs_said(run)]
    assert sizes[0] == 1 and sizes[-1] == 2, run.printed
    assert sorted(r["rank"] for r in run.reports) == [0, 1], run.reports


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"join_after": 0}, "join_after"),
        ({"join_after": 3, "leave_after": 3}, "leave_after"),
        ({"leave_after": 4, "max_restarts": 0}, "max_restarts"),
        ({"nproc_per_node": 0}, "nproc_per_node"),
        ({"timeout_s": -1}, "timeout_s"),
    ],
)
def test_bad_input_is_refused_before_anything_starts(job, kwargs, words):
    with pytest.raises(ValueError, match=words):
        launch.torchrun_resizing(str(job), **kwargs)


def test_a_job_that_ends_before_the_join_leaves_the_second_node_out(job, tmp_path):
    run = launch.torchrun_resizing(
        str(job), "--epochs", "2", "--checkpoint", str(tmp_path / "elastic.pt"), join_after=5
    )
    assert [size for _, size in epochs_said(run)] == [1, 1], run.printed
    assert run.restarts[0] == 0
