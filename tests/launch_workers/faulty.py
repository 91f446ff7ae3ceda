"""Workers that go wrong in one specific way each (see tests/faults/)."""

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import torch
from torch.distributed import all_reduce, init_process_group

import ddp_lesson.reports  # noqa: F401  (what every lesson worker imports)


def _join(rank, world_size, port, timeout_s=60):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    init_process_group(
        "gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=timeout_s)
    )


def raises(rank, world_size, port):
    if rank == 1:
        raise ValueError("rank 1 cannot continue")
    _join(rank, world_size, port)


def raises_after_init(rank, world_size, port):
    _join(rank, world_size, port)
    if rank == 1:
        raise RuntimeError("rank 1 failed in the middle of training")
    all_reduce(torch.ones(1))


def never_arrives(rank, world_size, port):
    _join(rank, world_size, port)
    if rank == 1:
        time.sleep(3600)
    all_reduce(torch.ones(1))


def exits_early(rank, world_size, port):
    if rank == 1:
        os._exit(3)
    _join(rank, world_size, port)


def killed(rank, world_size, port, how):
    _join(rank, world_size, port)
    if rank == 1:
        os.kill(os.getpid(), getattr(signal, how))
        time.sleep(60)
    all_reduce(torch.ones(1))


def fixed_port(rank, world_size, port):
    _join(rank, world_size, 12355 if port is None else port, timeout_s=300)


def prints(rank, world_size, port):
    print(f"hello from rank {rank}", flush=True)


def starts_a_child(rank, world_size, port):
    """Each rank starts a process of its own, left running, and reports its pid."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    time.sleep(0.5)  # long enough for the launch's watcher to see it
    ddp_lesson.reports.send_report(rank, child=child.pid)


def floods(rank, world_size, port):
    line = f"rank {rank} says something very loudly " * 4 + "\n"
    for _ in range(100_000):  # about 17 MB per rank
        os.write(1, line.encode())


def leaves_quietly(rank, world_size, port):
    """Rank 1 leaves at once with exit code 0, without a report; rank 0 waits for it."""
    if rank == 1:
        os._exit(0)
    _join(rank, world_size, port, timeout_s=5)
    all_reduce(torch.ones(1))


def stub_after_joining(rank, world_size, port):
    """What a probe runs on an exercise's stub: join the course's way, then raise at once."""
    from ddp_lesson import group

    group.join(rank, world_size, port)
    try:
        raise NotImplementedError(f"rank {rank}: your code here")
    finally:
        group.leave()


class _HeldUp(torch.distributed.Store):
    """A store through which a rank is held up once inside ``init_process_group``.

    Once the rank has published its own address (its first ``set``), its
    next request to the store waits ``held_s`` first, as a rank of a busy
    machine can fall behind right there.
    """

    def __init__(self, store, held_s):
        super().__init__()
        self.store, self.held_s, self.published, self.held = store, held_s, False, False

    def _maybe_held(self):
        if self.published and not self.held:
            self.held = True
            time.sleep(self.held_s)

    def set(self, key, value):
        self.store.set(key, value)
        self.published = True

    def get(self, key):
        self._maybe_held()
        return self.store.get(key)

    def wait(self, keys, *timeout):
        self._maybe_held()
        return self.store.wait(keys, *timeout)

    def add(self, key, value):
        self._maybe_held()
        return self.store.add(key, value)

    def check(self, keys):
        return self.store.check(keys)

    def compare_set(self, key, expected, desired):
        return self.store.compare_set(key, expected, desired)

    def delete_key(self, key):
        return self.store.delete_key(key)

    def num_keys(self):
        return self.store.num_keys()

    def set_timeout(self, timeout):
        return self.store.set_timeout(timeout)


def leaves_at_once(rank, world_size, port, attempts, held_s):
    """Rank 1 is held up inside ``init_process_group``; rank 0 leaves as soon as its own returns.

    ``attempts`` groups, one after another: which rank of a gloo pair makes
    the connection depends on their ports, so each attempt has an even
    chance of rank 0 finishing first while rank 1 still has to read it.
    """
    import torch.distributed as dist

    for attempt in range(attempts):
        client = dist.TCPStore("127.0.0.1", port, world_size, False, timedelta(seconds=60))
        store = dist.PrefixStore(f"attempt-{attempt}", client)
        if rank == 1:
            store = _HeldUp(store, held_s)
        init_process_group(
            "gloo", store=store, rank=rank, world_size=world_size, timeout=timedelta(seconds=60)
        )
        dist.destroy_process_group()
