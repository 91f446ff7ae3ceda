"""The tests' one way to wait for something: a bound, and a failure that names what ran out."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(done: Callable[[], object], seconds: float, what: str) -> object:
    """Call ``done`` every 50 ms until it returns something true; return that.

    Raises AssertionError naming ``what`` (the thing waited for) and the
    bound when ``seconds`` pass first. Bounds are margins for a machine busy
    with other work, never a measure of speed.

    >>> wait_until(lambda: 3, 1, "a three")
    3
    >>> wait_until(lambda: 0, 0.1, "a three")
    Traceback (most recent call last):
    AssertionError: waited 0.1 s for a three; it did not happen
    """
    deadline = time.monotonic() + seconds
    while True:
        result = done()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {seconds:g} s for {what}; it did not happen")
        time.sleep(0.05)
