"""A rank stuck or gone is named with its line: where it was when stopped, where it left.

A launch asks every rank still running for its Python stack before it stops
it (at its deadline, or when another rank failed), and a rank whose
function ended without an error notes the line it left from (``sys.exit``,
a ``return``). The messages name the rank, its file and its line.
"""

from __future__ import annotations

import importlib
import re
import sys
import textwrap

import pytest
import torch.multiprocessing as mp

from ddp_lesson import launch

pytestmark = pytest.mark.usefixtures("no_leftovers")

WORKER = '''
import os
import sys
from datetime import timedelta

import torch
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_lesson.reports import send_report


def main(rank, world_size, port, how, group_timeout_s):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    init_process_group(
        "gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=group_timeout_s)
    )
    model = DDP(torch.nn.Linear(4, 1))
    if rank == 1 and how == "spins":
        while True: pass  # line 20
    if rank == 1 and how == "exits":
        sys.exit(0)  # line 22
    if rank == 1 and how == "returns":
        return  # line 24
    loss = model(torch.ones(2, 4)).sum()
    loss.backward()  # line 26
    send_report(rank)
    destroy_process_group()
'''

#: How the launch names rank 1 spinning on line 20.
SPINNING = r"rank 1 was at \S*stuck_worker.py, line 20, in main: while True"


@pytest.fixture
def stuck(tmp_path, monkeypatch):
    """The worker above as a module the ranks import."""
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "stuck_worker.py").write_text(textwrap.dedent(WORKER).lstrip())
    sys.modules.pop("stuck_worker", None)
    yield importlib.import_module("stuck_worker")
    sys.modules.pop("stuck_worker", None)


def launched(worker, how, *, group_timeout_s, timeout_s, error=launch.LaunchError) -> str:
    with pytest.raises(error) as raised:
        with launch.bounded(2, timeout_s=timeout_s) as run:
            mp.spawn(worker.main, args=(2, run.port, how, group_timeout_s), nprocs=2)
    return str(raised.value)


def test_at_the_deadline_every_rank_still_running_is_named_with_its_line(stuck):
    # rank 1 spins in Python, rank 0 waits for it in C++ (DDP's backward)
    message = launched(stuck, "spins", group_timeout_s=300, timeout_s=20,
                       error=launch.LaunchTimeout)  # fmt: skip
    assert "did not finish within 20 s" in message
    assert re.search(SPINNING, message), message
    assert re.search(r"rank 0 was at \S*stuck_worker.py, line 26, in main: loss.backward", message)


def test_a_spinning_rank_is_named_when_its_partner_times_out_first(stuck):
    # the issue's case: rank 0's collective times out before the launch's deadline
    message = launched(stuck, "spins", group_timeout_s=3, timeout_s=120)
    assert message.startswith("rank 0 raised RuntimeError")
    assert "line 26, in main: loss.backward()" in message
    assert re.search(SPINNING, message), message


def test_a_rank_that_calls_sys_exit_early_is_named_with_that_line(stuck):
    message = launched(stuck, "exits", group_timeout_s=60, timeout_s=120)
    assert (
        "rank 1 exited with code 0 before it reported (it called sys.exit(0) at "
        in message
    )
    assert "stuck_worker.py, line 22, in main: sys.exit(0)" in message


def test_a_rank_that_returns_early_is_named_with_that_line(stuck):
    message = launched(stuck, "returns", group_timeout_s=60, timeout_s=120)
    assert "rank 1 exited with code 0 before it reported (its function returned at " in message
    assert "stuck_worker.py, line 24, in main: return" in message
