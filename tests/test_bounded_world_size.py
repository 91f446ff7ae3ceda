"""``launch.bounded(world_size)`` decides how many ranks start: a start of another number fails.

The lesson's line is ``mp.spawn(..., nprocs=world_size)`` inside
``launch.bounded(world_size, ...)``. When the two numbers differ, too few
ranks wait for partners that never come (until the deadline) and too many
cannot join a group of ``world_size``; the launch refuses such a start at
once, names both numbers and the fix, and starts no rank.
"""

from __future__ import annotations

import time

import pytest
import torch.multiprocessing as mp
from launch_workers import healthy

from ddp_lesson import launch

pytestmark = pytest.mark.usefixtures("no_leftovers")

#: The deadline of a launch that would hang without the check: the test fails long before it.
DEADLINE_S = 60

#: Seconds a refused start may take (no rank starts; a busy machine still answers in this).
REFUSED_S = 20

STARTERS = {"mp.spawn": mp.spawn, "launch.start": launch.start}


@pytest.mark.parametrize("start", STARTERS.values(), ids=STARTERS.keys())
@pytest.mark.parametrize("nprocs", [1, 3])
def test_a_start_of_another_number_of_ranks_than_world_size_fails_at_once(nprocs, start):
    began = time.monotonic()
    with pytest.raises(launch.LaunchError) as raised:
        with launch.bounded(2, timeout_s=DEADLINE_S) as run:
            start(healthy.main, args=(2, run.port), nprocs=nprocs)
    took = time.monotonic() - began
    message = str(raised.value)
    assert not isinstance(raised.value, launch.LaunchTimeout), message
    assert f"nprocs={nprocs}) inside launch.bounded(world_size=2)" in message, message
    assert "pass the same number to both" in message, message
    assert run.started == 0 and run.reports == [], (run.started, run.reports)
    assert took < REFUSED_S, f"took {took:.1f} s: the start was not refused before the ranks ran"


def test_the_same_number_in_both_places_still_runs_and_a_programs_launch_is_not_checked():
    with launch.bounded(1, timeout_s=DEADLINE_S) as run:  # as 02, 05 and 12 launch one rank
        mp.spawn(healthy.main, args=(1, run.port), nprocs=1)
    assert [r["rank"] for r in run.reports] == [0]
    # a launch made for whole programs has no world size to hold a start to
    with launch.Supervisor(None, DEADLINE_S) as programs:
        programs.start_ranks(healthy.main, (2, programs.port), 2)
    assert sorted(r["rank"] for r in programs.reports) == [0, 1]
