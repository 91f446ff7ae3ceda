"""Every way a launch can fail, injected for real, with its time bound and message.

Each test starts real gloo processes through ``launch.bounded`` and
``mp.spawn``, exactly as a notebook does (and, where marked, through
``launch.start``, the warm starter of the checks, widgets and doctor),
then checks three promises:
the failure ends within a stated bound, the learner gets a message that
names the cause and the fix, and nothing is left behind (no child process,
no listening socket).
"""

from __future__ import annotations

import importlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import psutil
import pytest
import torch.multiprocessing as mp
from launch_workers import faulty, healthy
from waiting import wait_until

from ddp_lesson import devices, launch
from ddp_lesson.launch import processes

pytestmark = pytest.mark.usefixtures("no_leftovers")

#: Fixed slack on top of each bound, in seconds.
SLACK_S = 5.0

#: How many healthy launches' worth of time a failing launch may add to its bound.
LAUNCHES_OF_SLACK = 3

#: The two ways the course starts ranks inside ``launch.bounded``.
STARTERS = {"mp.spawn": mp.spawn, "launch.start": launch.start}
both_starters = pytest.mark.parametrize("start", STARTERS.values(), ids=STARTERS.keys())

#: What a kernel starts beside its ranks, by command line.
HELPERS = ("resource_tracker", "multiprocessing.forkserver")


def listening(port: int) -> bool:
    return any(
        c.laddr.port == port and c.status == psutil.CONN_LISTEN
        for c in psutil.net_connections("inet")
    )


_healthy_launch_s: list[float] = []


def healthy_launch_s() -> float:
    """Seconds one healthy 2-rank launch of fresh interpreters takes here right now (once).

    A fresh interpreter importing torch is the slowest way a rank starts
    (a whole script, torchrun, a kernel's first launch), so it sets the
    allowance for start-up.
    """
    if not _healthy_launch_s:
        started = time.monotonic()
        with launch.bounded(2, timeout_s=120, warm=False) as run:
            mp.spawn(healthy.main, args=(2, run.port), nprocs=2)
        _healthy_launch_s.append(time.monotonic() - started)
    return _healthy_launch_s[0]


@contextmanager
def bounded_by(seconds: float):
    """Fail if the block takes longer than ``seconds`` plus start-up time.

    Start-up time is not a constant: it is measured as a healthy launch on
    this machine, so a loaded machine does not turn a bound into a flake.
    """
    allowed = seconds + SLACK_S + LAUNCHES_OF_SLACK * healthy_launch_s()
    started = time.monotonic()
    yield
    took = time.monotonic() - started
    assert took < allowed, f"took {took:.1f} s; bound {seconds} s + start-up, {allowed:.1f} s"


def launch_expecting(
    error_type, worker, *, world_size=2, nprocs=None, args=None, timeout_s=60, start=mp.spawn
):
    with pytest.raises(error_type) as caught:
        with launch.bounded(world_size, timeout_s=timeout_s) as run:
            spawn_args = args(run) if args else (world_size, run.port)
            start(worker, args=spawn_args, nprocs=world_size if nprocs is None else nprocs)
    assert not listening(run.port)
    return str(caught.value)


# 1
@both_starters
def test_rank_raises_before_init_process_group(start):
    with bounded_by(0):
        message = launch_expecting(launch.LaunchError, faulty.raises, start=start)
    assert message.startswith("rank 1 raised ValueError: rank 1 cannot continue")
    assert "faulty.py, line" in message


# 2
@both_starters
def test_rank_raises_after_init_process_group(start):
    with bounded_by(0):
        message = launch_expecting(launch.LaunchError, faulty.raises_after_init, start=start)
    assert "rank 1 raised RuntimeError: rank 1 failed in the middle of training" in message


# 3
@both_starters
def test_rank_skips_a_collective(start):
    with bounded_by(5 + launch.STOP_GRACE_S):
        message = launch_expecting(
            launch.LaunchTimeout, faulty.never_arrives, timeout_s=5, start=start
        )
    assert "did not finish within 5 s" in message
    assert "collective" in message


# 4
def test_fewer_processes_than_world_size():
    # refused before any rank starts, instead of waiting for the missing one until the deadline
    with bounded_by(0):
        message = launch_expecting(launch.LaunchError, healthy.main, nprocs=1, timeout_s=5)
    assert "nprocs=1) inside launch.bounded(world_size=2)" in message
    assert "nprocs=world_size" in message


# 5
def test_chosen_port_is_never_one_already_taken():
    taken = socket.create_server(("127.0.0.1", 0))
    try:
        with launch.bounded(2, timeout_s=60) as run:
            assert run.port != taken.getsockname()[1]
            mp.spawn(healthy.main, args=(2, run.port), nprocs=2)
        assert [r["total"] for r in run.reports] == [1.0, 1.0]
    finally:
        taken.close()


@pytest.mark.fixed_port
def test_fixed_tutorial_port_that_is_busy_ends_at_the_deadline():
    # A worker that ignores run.port and uses the tutorials' 12355, held by someone else.
    try:
        busy = socket.create_server(("127.0.0.1", 12355))
    except OSError:
        busy = None  # already busy on this machine: even better
    try:
        with bounded_by(6 + launch.STOP_GRACE_S):
            message = launch_expecting(
                launch.LaunchTimeout, faulty.fixed_port, args=lambda run: (2, None), timeout_s=6
            )
        assert "MASTER_PORT must be run.port" in message
    finally:
        if busy:
            busy.close()


# 6
def test_world_size_zero_is_refused_before_anything_starts():
    with bounded_by(0):
        with pytest.raises(ValueError, match=r"nprocs=0\) silently starts nothing"):
            launch.bounded(0)


def test_nprocs_zero_is_reported():
    with bounded_by(0):
        message = launch_expecting(launch.LaunchError, healthy.main, nprocs=0)
    assert "no process was started" in message and "nprocs=world_size (here 2)" in message


# 7
def test_rank_passed_twice_in_spawn_args():
    with bounded_by(0):
        message = launch_expecting(
            launch.LaunchError, healthy.main, args=lambda run: (0, 2, run.port)
        )
    assert "raised TypeError: main() takes 3 positional arguments but 4 were given" in message
    assert "passes each process its rank as the first argument" in message


# 8
@pytest.fixture
def worker_module(tmp_path, monkeypatch):
    """A worker module in a temporary folder, importable by the ranks."""
    monkeypatch.syspath_prepend(str(tmp_path))
    path = tmp_path / "learner_worker.py"
    path.write_text("def main(rank, world_size, port):\n    pass\n")
    sys.modules.pop("learner_worker", None)
    module = importlib.import_module("learner_worker")
    yield path, module
    sys.modules.pop("learner_worker", None)


def test_worker_file_with_a_syntax_error(worker_module):
    path, module = worker_module
    path.write_text("def main(rank, world_size, port)\n    pass\n")  # missing colon
    with bounded_by(0):
        message = launch_expecting(launch.LaunchError, module.main, world_size=1)
    assert "while importing the worker module" in message
    assert "SyntaxError" in message and "re-run its %%writefile cell" in message


def test_a_syntax_error_in_a_helper_imported_inside_main_names_the_helper(worker_module):
    path, module = worker_module
    (path.parent / "learner_helper.py").write_text("def helper(x):\n    return (x +\n")
    path.write_text("def main(rank, world_size, port):\n    import learner_helper\n")
    sys.modules.pop("learner_helper", None)
    with bounded_by(0):
        message = launch_expecting(launch.LaunchError, module.main, world_size=1)
    assert "SyntaxError: '(' was never closed" in message
    assert f"at {path.parent.name}/learner_helper.py, line 2: return (x +" in message, message


def test_worker_file_that_fails_at_import(worker_module):
    path, module = worker_module
    path.write_text("raise RuntimeError('the data folder is missing')\n")
    with bounded_by(0):
        message = launch_expecting(launch.LaunchError, module.main, world_size=1)
    assert "while importing the worker module" in message
    assert "RuntimeError: the data folder is missing" in message


def test_worker_file_without_main(worker_module):
    path, _ = worker_module
    path.write_text("def mian(rank, world_size, port):\n    pass\n")
    sys.modules.pop("learner_worker", None)
    module = importlib.import_module("learner_worker")
    with bounded_by(0):
        with pytest.raises(AttributeError, match="has no attribute 'main'"):
            with launch.bounded(1, timeout_s=60) as run:
                mp.spawn(module.main, args=(1, run.port), nprocs=1)


def test_script_that_spawns_outside_its_main_guard(tmp_path):
    # Each spawned process imports the launching file; without the guard it spawns again.
    script = tmp_path / "unguarded.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent.parent)!r})\n"
        "import torch.multiprocessing as mp\n"
        "from launch_workers import healthy\n"
        "from ddp_lesson import launch\n"
        "with launch.bounded(2, timeout_s=60) as run:\n"
        "    mp.spawn(healthy.main, args=(2, run.port), nprocs=2)\n"
    )
    with bounded_by(0):
        with pytest.raises(launch.LaunchError) as raised:
            launch.run_script(script, timeout_s=120)
    message = str(raised.value)  # the script's last lines: the launch's own message
    assert "finished its bootstrapping phase." in message  # Python's words, whole
    assert 'under `if __name__ == "__main__":`' in message


# 9
@both_starters
def test_interrupted_launch_leaves_no_orphan(start):
    # A kernel always handles SIGINT; a test started in the background may ignore it.
    healthy_launch_s()  # (measured now: the SIGINT must come during the launch under test)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(4.0, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with bounded_by(4 + launch.STOP_GRACE_S):
            launch_expecting(KeyboardInterrupt, faulty.never_arrives, start=start)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)


def gone_within(procs: list[psutil.Process], seconds: float) -> list[psutil.Process]:
    """Wait up to ``seconds`` for ``procs`` to end; return those still running.

    A process that is not our child stays a zombie until whoever adopted it
    reaps it; it has ended all the same, as the ranks' own watch counts it.
    """
    deadline = time.monotonic() + seconds
    while True:
        running = [proc for proc in procs if processes.alive(proc.pid)]
        if not running or time.monotonic() > deadline:
            return running
        time.sleep(0.2)


@pytest.mark.parametrize("start", STARTERS, ids=STARTERS)
@pytest.mark.parametrize("when", ["while-starting", "while-waiting"])
def test_killed_kernel_takes_its_ranks_with_it(tmp_path, start, when):
    # A kernel restart or crash skips every cleanup; the ranks must not outlive it,
    # whether it dies while they are still importing torch or while they wait in a
    # collective. Ranks watch their parent and the launching process from a thread
    # (ddp_lesson.reports); torch's own request, SIGINT on parent death, is ignored
    # when the test runs in the background.
    script = tmp_path / "kernel.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent.parent)!r})\n"
        "import torch.multiprocessing as mp\n"
        "from launch_workers import faulty\n"
        "from ddp_lesson import launch\n"
        "if __name__ == '__main__':\n"
        "    with launch.bounded(2, timeout_s=300) as run:\n"
        f"        {start}(faulty.never_arrives, args=(2, run.port), nprocs=2)\n"
    )
    kernel = subprocess.Popen([sys.executable, str(script)])
    try:

        def both_started() -> list[psutil.Process] | None:
            found = _ranks(kernel.pid)
            return found if len(found) == 2 else None

        # a fresh interpreter imports torch before it starts them: slow on a busy machine
        ranks = wait_until(both_started, 240, "the script's launch to start its two ranks")
        if when == "while-waiting":
            time.sleep(healthy_launch_s())  # let them get into the collective
    finally:
        kernel.kill()
        kernel.wait()
    alive = gone_within(ranks, 10 + healthy_launch_s())
    for proc in alive:
        proc.kill()
    assert not alive, f"ranks outlived their killed parent: {[p.pid for p in alive]}"


def _ranks(kernel: int) -> list[psutil.Process]:
    """The kernel's ranks: its own children, or its warm server's, but not the helpers.

    Not a rank: the helpers the kernel starts beside them (its forkserver and
    resource tracker), a process a rank starts itself (a worker's own
    subprocess is a copy of the rank between its fork and its exec), or a
    child of the kernel not yet past its exec (a copy of the kernel's own
    command line).
    """
    try:
        own = psutil.Process(kernel).cmdline()
        children = psutil.Process(kernel).children(recursive=True)
    except psutil.Error:
        return []

    def described(process: psutil.Process) -> tuple[int, str] | None:
        try:
            if not process.name().startswith("python"):
                return None
            if process.status() == psutil.STATUS_ZOMBIE or process.cmdline() == own:
                return None
            return process.ppid(), " ".join(process.cmdline())
        except psutil.Error:  # gone already
            return None

    seen = {p: described(p) for p in children}
    servers = {
        p.pid for p, d in seen.items()
        if d and d[0] == kernel and "multiprocessing.forkserver" in d[1]
    }  # fmt: skip
    return [
        p for p, d in seen.items()
        if d and (d[0] in servers or (d[0] == kernel and not any(h in d[1] for h in HELPERS)))
    ]  # fmt: skip


# 10: two notebooks launching at once: see
# tests/test_launch.py::test_two_notebooks_launching_at_once_do_not_clash


# 11
@both_starters
@pytest.mark.parametrize("how", ["SIGKILL", "SIGABRT"])
def test_rank_killed_by_a_signal(how, start):
    with bounded_by(0):
        message = launch_expecting(
            launch.LaunchError, faulty.killed, args=lambda run: (2, run.port, how), start=start
        )
    assert f"rank 1 was killed by {how}" in message
    assert "leaves the others waiting" in message


@pytest.mark.parametrize(
    ("worker", "how", "named"),
    [
        (faulty.killed, ("SIGKILL",), "rank 1 was killed by SIGKILL"),
        (faulty.raises_after_init, (), "rank 1 raised RuntimeError: rank 1 failed in the middle"),
    ],
    ids=["killed", "raised"],
)
def test_the_rank_that_failed_first_is_named_when_its_partner_ended_too(worker, how, named):
    # torch names the first failed rank in its list when it looks. Here it looks only
    # once both have ended: rank 1 first, then rank 0, whose all_reduce lost its partner.
    with bounded_by(0), pytest.raises(launch.LaunchError) as caught:
        with launch.bounded(2, timeout_s=60) as run:
            context = mp.start_processes(worker, (2, run.port, *how), 2, join=False)
            deadline = time.monotonic() + 50
            while time.monotonic() < deadline and any(
                p.exitcode is None for p in context.processes
            ):
                time.sleep(0.05)
            assert [p.exitcode != 0 for p in context.processes] == [True, True]
            run.join(context)
    message = str(caught.value)
    assert message.startswith(named), message
    assert "rank 0" not in message.splitlines()[0], message


# 12
@both_starters
def test_rank_that_floods_its_output(capfd, start):
    with bounded_by(0):
        with launch.bounded(2, timeout_s=120) as run:
            start(faulty.floods, args=(2, run.port), nprocs=2)
    assert len(run.output) < 3 * launch.OUTPUT_KEPT_BYTES
    assert "bytes of rank output not shown" in run.output
    shown = capfd.readouterr().out
    assert len(shown) < 3 * launch.OUTPUT_KEPT_BYTES


# inputs of the public helpers
@pytest.mark.parametrize("bad", [0, -5, "10", None])
def test_bad_launch_timeouts_are_refused(bad):
    with pytest.raises((ValueError, TypeError), match="timeout_s"):
        launch.bounded(2, timeout_s=bad)


def test_world_size_beyond_this_machine_is_refused():
    limit = devices.MAX_CPU_PROCESSES_PER_CORE * devices.usable_cores()
    with pytest.raises(ValueError, match="more CPU processes than this machine"):
        launch.bounded(limit + 1)
