"""Shared helpers for the tests."""

from __future__ import annotations

import threading
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def deep_tempdir(tmp_path, monkeypatch):
    """A temporary folder whose path is too long for a warm server's Unix socket.

    A launch started during the test puts its folder (and its processes'
    TMPDIR) inside it.
    """
    import tempfile

    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    return deep


@pytest.fixture
def short_tempdir(monkeypatch):
    """A temporary folder with a short path under /tmp, removed afterwards: room for any socket."""
    import shutil
    import tempfile

    short = tempfile.mkdtemp(prefix="ddp-", dir="/tmp")
    monkeypatch.setattr(tempfile, "tempdir", short)
    yield short
    shutil.rmtree(short, ignore_errors=True)


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
