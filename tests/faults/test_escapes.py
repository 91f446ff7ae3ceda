"""Nothing a rank starts outlives its launch, however deep, on every way the course starts ranks.

Each test's ranks start a child, which starts a grandchild in a session of
its own and sleeps; the grandchild sleeps too. The rank itself returns at
once, so its family is orphaned while the launch still runs. When the
launch ends, no process carrying the test's token may exist anywhere on the
machine, and none may remain below the test's process.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import psutil
import pytest
import torch.multiprocessing as mp
from launch_workers import hostile
from waiting import wait_until

from ddp_lesson import doctor, launch

pytestmark = pytest.mark.usefixtures("no_leftovers")

TESTS = str(Path(__file__).resolve().parent.parent)


@pytest.fixture
def token():
    """A word no other process on the machine has on its command line."""
    word = f"ddp-lesson-escape-{uuid.uuid4().hex}"
    yield word
    for proc in family(word):  # whatever a failing test left, gone before the next one
        proc.kill()


def family(word: str) -> list[psutil.Process]:
    """Every process on the machine whose command line carries ``word``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if word in (proc.info["cmdline"] or []) and proc.info["status"] != "zombie":
                found.append(proc)
        except psutil.Error:
            continue
    return found


def gone(word: str) -> None:
    left = family(word)
    assert not left, f"outlived their launch: {[(p.pid, p.cmdline()) for p in left]}"
    assert not launch.child_processes()


def started(word: str, count: int, timeout_s: float = 120) -> None:
    """Wait until ``count`` processes carry ``word`` (the families have started)."""
    wait_until(lambda: len(family(word)) >= count, timeout_s, f"{count} processes to start")


@pytest.mark.parametrize("warm", [True, False], ids=["forked", "fresh"])
def test_mp_spawn_in_a_notebook_cell(token, warm):
    with launch.bounded(2, timeout_s=60, warm=warm) as run:
        mp.spawn(hostile.main, args=(2, run.port, token), nprocs=2)
        started(token, 4)
    assert [r["rank"] for r in run.reports] == [0, 1]
    gone(token)


def test_the_course_helpers_warm_start(token):
    reports = launch.run_ranks(hostile.main, 2, token, timeout_s=60)
    assert len(reports) == 2
    gone(token)


def test_a_whole_script(token, tmp_path):
    script = tmp_path / "family.py"
    script.write_text(hostile.SCRIPT.format(tests=TESTS))
    launch.run_script(script, token, timeout_s=60)
    gone(token)


def test_torchrun(token, tmp_path):
    script = tmp_path / "family.py"
    script.write_text(hostile.TORCHRUN.format(tests=TESTS))
    launch.torchrun(script, token, nproc_per_node=2, timeout_s=90)
    gone(token)


def test_the_doctor(token, tmp_path):
    script = tmp_path / "family.py"
    script.write_text(hostile.SCRIPT.format(tests=TESTS))
    doctor.diagnose(script, 2, args=(token,), timeout_s=30)
    gone(token)


def test_a_launch_stopped_at_its_deadline(token):
    # the families still run when the deadline stops everything
    with pytest.raises(launch.LaunchTimeout):
        with launch.bounded(2, timeout_s=3) as run:
            mp.spawn(hostile.main, args=(2, run.port, token), nprocs=2)
            while not run.timed_out:
                time.sleep(0.1)
    gone(token)
