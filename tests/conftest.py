"""Shared helpers for the tests."""

from __future__ import annotations

import multiprocessing
import multiprocessing.util
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent

#: What may stay in the temporary folder: torch's own reusable compile cache.
KEPT = ("torchinductor_",)


def pytest_configure(config):
    """Keep pytest's own tmp_path folders in one folder of this run, removed when it ends.

    By default pytest keeps the last three runs' folders in the temporary
    folder; the course promises to leave that folder as it found it.
    """
    if config.option.basetemp is None:
        config.option.basetemp = tempfile.mkdtemp(prefix="ddp-lesson-pytest-")
        config.stash[_OWN_BASETEMP] = config.option.basetemp


def pytest_unconfigure(config):
    own = config.stash.get(_OWN_BASETEMP, None)
    if own:
        shutil.rmtree(own, ignore_errors=True)


_OWN_BASETEMP = pytest.StashKey[str]()


def litter(folder: Path) -> list[str]:
    """What is left in ``folder`` but torch's compile cache."""
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith(KEPT))


@pytest.fixture(scope="session", autouse=True)
def clean_temporary_folder(tmp_path_factory):
    """Run the whole session, kernels and ranks included, in an empty temporary folder.

    The session also measures with the benchmark's quick settings.

    At the end nothing may be left in it but torch's compile cache: no
    error files of ranks that raised, no launch folders, no forkserver
    folders of kernels that have gone.
    """
    # This process's own folders stay where they were: its multiprocessing
    # folder (removed when it exits) and pytest's own (tmp_path, removed at
    # the end of the run by pytest_unconfigure).
    multiprocessing.util.get_temp_dir()
    tmp_path_factory.getbasetemp()
    folder = Path(tempfile.mkdtemp(prefix="ddp-lesson-tests-"))
    # the benchmark's quick settings: 10_performance's measuring cells only
    # show that their code runs (their saved outputs come from a full run)
    settings = {"TMPDIR": str(folder), "DDP_LESSON_BENCH_QUICK": "1"}
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    tempfile.tempdir = None  # this process too
    yield folder
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    tempfile.tempdir = None
    # nbval stops each notebook's kernel outright (shutdown_kernel(now=True)),
    # as a learner's killed kernel is stopped; the folder its warm server
    # used is then removed by the next launch, whoever starts it. Do here
    # what that launch would do, once the kernel is gone.
    from ddp_lesson.launch import supervisor

    deadline = time.monotonic() + 10
    while True:
        supervisor.remove_stale_folders(folder)
        left = litter(folder)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    if not left:
        shutil.rmtree(folder, ignore_errors=True)
    assert not left, f"the tests left these in the temporary folder {folder}: {left}"


@pytest.fixture
def no_leftovers():
    """Fail the test if it leaves any process running."""
    from ddp_lesson import launch

    yield
    left = launch.child_processes()
    assert not left, f"processes left running: {[(p.pid, p.cmdline()) for p in left]}"


@pytest.fixture
def listening():
    """The addresses that this test's process and its descendants listen on, while it runs."""
    seen: set[str] = set()
    done = threading.Event()

    def watch() -> None:
        me = psutil.Process()
        while not done.wait(0.1):
            try:
                pids = {me.pid} | {p.pid for p in me.children(recursive=True)}
            except psutil.Error:
                continue
            for c in psutil.net_connections("inet"):
                if c.status == psutil.CONN_LISTEN and c.pid in pids:
                    seen.add(c.laddr.ip)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    yield seen
    done.set()
    watcher.join()
