"""Hostile or odd learner code gets a clear message, in bounded time, with nothing left running.

A rank that leaves before it reports, a worker that spawns when imported,
an interrupted launch, a rank that floods its output, absurd entries in a
view: each test feeds one in, checks the message names the cause and the
fix, and that the launch ended quickly.
"""

from __future__ import annotations

import html
import os
import signal
import sys
import textwrap
import threading
import time

import pytest
import torch.multiprocessing as mp
from launch_workers import faulty

from ddp_lesson import launch, views
from ddp_lesson.exercises import checks

pytestmark = pytest.mark.usefixtures("no_leftovers")

#: Seconds any of these may take: they must never wait out a group's timeout
#: (``ddp_setup``'s 30 s). Anything quicker did not wait it out, however busy the
#: machine, so the bound is the timeout itself and not a guess at this machine's speed.
QUICK_S = 30


@pytest.fixture
def learner_file(tmp_path):
    """Write a learner's worker file from text (dedented); return its path."""

    def write(text: str, name: str = "learner.py"):
        path = tmp_path / name
        path.write_text(textwrap.dedent(text))
        return path

    return write


LEAVES_EARLY = """
    import os
    from datetime import timedelta

    import torch
    from torch.distributed import destroy_process_group, init_process_group
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler


    def leave(rank):
        if rank == 1:
            os._exit(0)  # the learner's early exit


    def ddp_setup(rank, world_size, port):
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        leave(rank)
        init_process_group("gloo", rank=rank, world_size=world_size,
                           timeout=timedelta(seconds=30))


    def cleanup():
        destroy_process_group()


    def make_loader(dataset):
        import torch.distributed as dist

        leave(dist.get_rank())
        return DataLoader(dataset, batch_size=4, sampler=DistributedSampler(dataset))


    def epoch_orders(train_loader, epochs):
        orders = []
        for epoch in range(epochs):
            train_loader.sampler.set_epoch(epoch)
            orders.append([int(i) for (batch,) in train_loader for i in batch])
        return orders


    def wrap(model, rank, device):
        leave(rank)
        return DDP(model.to(device))
"""


@pytest.mark.parametrize("check", ["check_process_group", "check_sampler", "check_wrap"])
def test_a_rank_that_leaves_early_is_named_by_every_check(learner_file, check):
    path = learner_file(LEAVES_EARLY)
    started = time.monotonic()
    result = getattr(checks, check)(path)
    took = time.monotonic() - started
    assert not result
    assert "rank 1" in result.happened and "before it reported" in result.happened, result
    assert took < QUICK_S, f"took {took:.1f} s"


def test_a_lesson_launch_says_which_rank_left_and_how():
    with pytest.raises(launch.LaunchError) as raised:
        with launch.bounded(2, timeout_s=60) as run:
            mp.spawn(faulty.leaves_quietly, args=(2, run.port), nprocs=2)
    message = str(raised.value)
    assert "rank 1 exited with code 0 before it reported" in message, message


def test_a_helper_launch_stops_as_soon_as_a_rank_is_gone_unreported():
    started = time.monotonic()
    with pytest.raises(launch.LaunchError, match="rank 1 ended without sending its report|"
                       "rank 1 exited with code 0 before it reported"):
        launch.run_ranks(faulty.leaves_quietly, 2, timeout_s=60)
    assert time.monotonic() - started < QUICK_S


def test_a_worker_that_spawns_when_imported_is_told_about_the_main_guard(learner_file):
    path = learner_file(
        """
        import torch.multiprocessing as mp


        def main(rank, world_size, port):
            pass


        mp.spawn(main, args=(2, 0), nprocs=2)  # at the top level
        """,
        name="spawns_at_import.py",
    )
    sys.path.insert(0, str(path.parent))
    try:
        module = type(sys)("spawns_at_import")  # only its name and main cross over
        module.__file__ = str(path)

        def main(rank, world_size, port):  # stands in for the module's main
            pass

        main.__module__, main.__qualname__ = "spawns_at_import", "main"
        with pytest.raises(launch.LaunchError) as raised:
            with launch.bounded(2, timeout_s=60) as run:
                mp.spawn(main, args=(2, run.port), nprocs=2)
    finally:
        sys.path.remove(str(path.parent))
    message = str(raised.value)
    assert "called mp.spawn" in message and 'if __name__ == "__main__":' in message, message


def test_an_interrupted_launch_is_one_line_and_still_a_keyboard_interrupt():
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(2.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt) as raised:
            with launch.bounded(2, timeout_s=60) as run:
                mp.spawn(faulty.never_arrives, args=(2, run.port), nprocs=2)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    assert isinstance(raised.value, launch.LaunchInterrupted)
    assert str(raised.value) == "launch interrupted: its 2 process(es) were stopped"


def test_a_flooding_rank_is_quoted_briefly_by_a_check(learner_file):
    path = learner_file(
        """
        import os


        def ddp_setup(rank, world_size, port):
            for _ in range(200_000):  # about 20 MB
                os.write(1, b"x" * 100 + b"\\n")
            raise RuntimeError("the learner's setup failed")


        def cleanup():
            pass
        """
    )
    result = checks.check_process_group(path)
    assert not result
    assert "the learner's setup failed" in result.happened
    assert len(str(result)) < 2000


@pytest.mark.parametrize(
    ("control", "value", "words"),
    [
        ("size", "9" * 100_000, "data-set size must be a whole number, got '9999"),
        ("epoch", "99999999999999999999999", "epoch must be 1000000 or less"),
        ("seed", "99999999999999999999999", "seed must be 4294967295 or less"),
        ("seed", "1" * 40, "seed must be a whole number, got '1111"),
        ("seed", str(2**40), "seed must be 4294967295 or less"),
        ("epoch", str(10**7), "epoch must be 1000000 or less"),
    ],
)
def test_absurd_entries_keep_the_view_and_say_why(control, value, words):
    explorer = views.SamplerExplorer(size=10, world_size=2)
    before = explorer.renderings()[0].data
    explorer.controls[control].value = value
    message = html.unescape(explorer.message.value)
    assert words in message, message
    assert len(message) < 500
    assert explorer.renderings()[0].data == before


def test_a_far_epoch_is_drawn_and_verified_at_once(no_leftovers):
    explorer = views.SamplerExplorer(size=10, world_size=2)
    started = time.monotonic()
    explorer.controls["epoch"].value = "200000"
    assert "epoch 200000" in explorer.renderings()[0].data
    verdict = explorer.verify(timeout_s=60)
    assert "Verified by a real launch" in verdict.data
    assert "from 199996 to 200000" in verdict.data
    assert time.monotonic() - started < QUICK_S
