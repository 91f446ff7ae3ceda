"""Data a rank put on a ``multiprocessing`` queue that nobody takes: its process cannot end.

A process that puts an object on a ``multiprocessing.Queue`` hands it to a
feeder thread, which writes it into a pipe; at exit the process waits for
that thread, which waits until the pipe has room: until another process
reads. A script that waits for its ranks to end (``mp.spawn``'s join)
before it reads what they put therefore waits for ever, once what they put
is more than the pipe holds. :func:`install_queue_recording` notes the
learner's line of each put (:func:`.probe.install`); :func:`queues_left`
(in :func:`.probe.finish`, once the rank's function has returned) says
which queue still holds this process back.
"""

from __future__ import annotations

import time
from multiprocessing import queues

from .probe_state import learner_line, process_state, wrap_for_good


def install_queue_recording() -> None:
    """Note each ``multiprocessing`` queue this process puts on, with the learner's line."""
    wrap_for_good(queues.Queue, "put", recorded_put)


def recorded_put(original):
    def put(self, *args, **kwargs):
        line = learner_line()
        if line is not None:
            process_state.setdefault("queues", {}).setdefault(id(self), (self, line))
        return original(self, *args, **kwargs)

    return put


def queues_left(until: float) -> list[int]:
    """The lines of the puts whose queue's data is still unread at ``until`` (a
    ``time.monotonic()`` deadline): their feeder threads keep this process from exiting."""
    held = []
    for queue, line in process_state.get("queues", {}).values():
        feeder = getattr(queue, "_thread", None)
        if feeder is None:
            continue
        try:
            queue.close()  # as the process's exit would: the feeder sends what is left, then ends
        except (OSError, ValueError):
            continue
        feeder.join(max(0.0, until - time.monotonic()))
        if feeder.is_alive():
            held.append(line)
    return held
