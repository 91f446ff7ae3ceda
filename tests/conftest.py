"""Shared helpers for the tests."""

from __future__ import annotations

import threading
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent


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
