"""The parts of the launch layer on their own: rank start-up, process liveness, the tree."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
import torch.multiprocessing as mp
from launch_workers import healthy
from waiting import wait_until

import ddp_lesson.measures
from ddp_lesson.launch import LaunchError, LaunchTimeout, Supervisor, capture, processes
from ddp_lesson.launch.failures import Failures, worth_showing
from ddp_lesson.launch.rank_starter import RankStarter
from ddp_lesson.launch.state import LaunchState
from ddp_lesson.launch.watching import Watcher


def every_module() -> list[str]:
    """Every module of the package, as ``pkgutil.walk_packages`` finds it, but its ``__main__``s.

    ``ddp_lesson.__main__`` and ``ddp_lesson.exercises.__main__`` are left
    out: importing them runs the command they are (``python -m ...``).
    """
    import pkgutil

    import ddp_lesson

    found = pkgutil.walk_packages(ddp_lesson.__path__, "ddp_lesson.")
    return ["ddp_lesson", *sorted(m.name for m in found if not m.name.endswith(".__main__"))]


#: What ranks import to run the course's own functions (views, checks, the bench, the doctor).
RANK_SIDE = [
    "ddp_lesson.views.runs",
    "ddp_lesson.exercises.probes.stage_workers",
    "ddp_lesson.exercises.probes.practice",
    "ddp_lesson.exercises.probes.inside",
    "ddp_lesson.exercises.probes.checkpoints",
    "ddp_lesson.exercises.probes.performance",
    "ddp_lesson.bench.workers",
    "ddp_lesson.doctor.probe",
    "ddp_lesson.launch.script_main",
    # what the lesson's workers import to record what their notebooks show
    *sorted(
        f"ddp_lesson.measures.{path.stem}"
        for path in Path(ddp_lesson.measures.__file__).parent.glob("[!_]*.py")
    ),
]


def test_a_rank_running_the_courses_functions_imports_no_notebook_or_drawing_packages():
    # A rank forked from the warm server has what ddp_lesson.warm imported; the
    # rest it imports at every launch. matplotlib, ipywidgets and IPython cost
    # about half a second of CPU there, and a rank never draws or displays.
    script = f"""
import importlib, sys
import ddp_lesson.warm
before = set(sys.modules)
for name in {RANK_SIDE!r}:
    importlib.import_module(name)
heavy = ("matplotlib", "ipywidgets", "IPython", "sklearn", "PIL")
print(sorted({{m.split(".")[0] for m in set(sys.modules) - before}} & set(heavy)))
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180, check=True
    ).stdout
    assert out.strip() == "[]", out


def test_importing_the_course_starts_no_thread_and_installs_no_hook():
    # In a fresh interpreter with an IPython shell, as a notebook kernel has;
    # the packages the course uses are imported first, so that what they do
    # at import (torch registers atexit handlers) is not counted.
    modules = every_module()
    on_disk = [p for p in Path(ddp_lesson.__file__).parent.rglob("*.py") if p.stem != "__main__"]
    assert len(modules) == len(on_disk)  # every file, none skipped
    script = f"""
import atexit, importlib, sys, threading
from IPython.core.interactiveshell import InteractiveShell
shell = InteractiveShell.instance()
import torch, torch._dynamo, torch.distributed, torch.distributed.run
import matplotlib.pyplot, ipywidgets, nbformat, psutil
def state():
    return ([t.name for t in threading.enumerate()], sys.excepthook,
            shell.custom_exceptions, atexit._ncallbacks(), sys.meta_path[:])
before = state()
for name in {modules!r}:
    importlib.import_module(name)
import ddp_lesson.exercises.checks as checks
checks.check_spawn  # the checks' own modules, found on first use
import ddp_lesson.views as views
[getattr(views, name) for name in views.__all__]  # so are the views'
after = state()
print([a == b for a, b in zip(before, after)], after[0], after[3])
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=180, check=True
    ).stdout
    assert out.startswith("[True, True, True, True, True]"), out


def test_a_rank_freezes_its_objects_at_exit_only_when_a_launch_set_it_up(tmp_path):
    # An atexit handler registered first runs last: it sees what the
    # interpreter's final garbage collections would see.
    script = (
        "import atexit, gc, sys\n"
        "before = gc.get_freeze_count()  # some Pythons freeze a few objects at start\n"
        "frozen = lambda: str(gc.get_freeze_count() - before)\n"
        "atexit.register(lambda: open(sys.argv[1], 'w').write(frozen()))\n"
        "import ddp_lesson.launch.ranks as ranks\n"
        "if sys.argv[2] == 'rank':\n"
        "    ranks.quick_exit()\n"
    )
    frozen = {}
    for who in ("rank", "notebook"):
        out = tmp_path / f"frozen-{who}.txt"
        subprocess.run([sys.executable, "-c", script, str(out), who], check=True, timeout=120)
        frozen[who] = int(out.read_text())
    assert frozen["rank"] > 10_000, frozen  # torch's objects, skipped by the last collections
    assert frozen["notebook"] == 0, frozen  # importing the course changes nothing


def test_a_process_counts_as_alive_until_it_exits_even_before_it_is_reaped():
    assert processes.alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_until(lambda: not processes.alive(child.pid), 60, "`python -c pass` to exit")
    assert psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE  # nobody waited yet
    assert not processes.alive(child.pid)
    child.wait()
    assert not processes.alive(child.pid)  # reaped: no such process


def test_an_orphan_is_adopted_and_stopped_with_the_tree():
    # A child that starts a grandchild and exits at once: the grandchild is
    # an orphan, which this process adopts while it is a subreaper.
    code = "import subprocess, sys; subprocess.Popen(['sleep', '300']); sys.exit(0)"
    with processes.adopting_orphans() as supported:
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)

        def adopted():
            return [p for p in processes.descendants() if "sleep" in p.name()]

        if supported:
            wait_until(adopted, 60, "the orphaned grandchild to be adopted")
        stopped = processes.stop_tree(processes.descendants, grace_s=1)
    if supported:
        assert stopped >= 1
    assert not [p for p in processes.descendants() if "sleep" in p.name()]


def test_adopting_orphans_starts_no_process(monkeypatch):
    # every rank and every launch asks for it: a helper process (ldconfig, which
    # ctypes.util.find_library runs) would be counted and stopped as theirs
    def refused(*args, **kwargs):
        raise AssertionError(f"a process was started: {args[:1]}")

    monkeypatch.setattr(subprocess, "Popen", refused)
    monkeypatch.setattr(os, "posix_spawn", refused)
    with processes.adopting_orphans() as supported:
        pass
    assert supported == sys.platform.startswith("linux")


def test_a_rank_whose_launcher_is_gone_stops_even_while_its_output_pipe_blocks(tmp_path):
    # A rank forked while the kernel dies opens the launch's output pipe,
    # which blocks until a reader comes: none ever will. It must end anyway.
    pipe = tmp_path / "output"
    os.mkfifo(pipe)
    gone = subprocess.Popen(["true"])
    gone.wait()
    script = (
        "import sys\n"
        "from ddp_lesson.launch import ranks\n"
        f"ranks.enter(ranks.RankStart(folder='', launcher={gone.pid}, threads=1, "
        f"output={str(pipe)!r}))\n"
        "print('entered')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done


def test_stale_folders_of_killed_launches_and_their_servers_are_removed(tmp_path):
    from ddp_lesson.launch import folders

    gone = subprocess.Popen(["true"])
    gone.wait()
    launch_folder = tmp_path / f"{folders.FOLDER_PREFIX}{gone.pid}-abc"
    server_folder = tmp_path / "pymp-abc"
    live_folder = tmp_path / "pymp-live"
    other_folder = tmp_path / "pymp-someone-else"  # not the course's: never touched
    for folder in (launch_folder, server_folder, live_folder, other_folder):
        folder.mkdir()
    (server_folder / f"{folders.SERVER_MARK}{gone.pid}").touch()
    (live_folder / f"{folders.SERVER_MARK}{os.getppid()}").touch()
    removed = folders.remove_stale_folders(tmp_path)
    assert sorted(removed) == sorted([str(launch_folder), str(server_folder)])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pymp-live", "pymp-someone-else"]


# -- the supervisor's parts, each on its own --------------------------------------------
def test_the_supervisor_holds_its_parts_around_one_state_and_mixes_nothing_in():
    assert Supervisor.__bases__ == (object,)
    run = Supervisor(2, 30)
    parts = [run.watcher, run.ranks, run.programs, run.failures]
    assert all(part.state is run.state for part in parts)
    assert run.ranks.watcher is run.watcher
    # what the supervisor documents reads the shared state
    run.state.timed_out = True
    assert run.timed_out and run.world_size == 2 and run.timeout_s == 30
    assert not run.running and run.progress() == {}


def test_the_rank_starter_alone_refuses_another_number_of_ranks_than_world_size():
    def starter(world_size):
        state = LaunchState(world_size=world_size, timeout_s=30, threads=1)
        return RankStarter(state, Watcher(state))

    assert starter(2).check(healthy.main, 2) is not None  # the function, by module and name
    assert starter(None).check(healthy.main, 5) is not None  # programs only: nothing to hold to
    assert starter(2).check(healthy.main, 0) is not None  # said at the block's end, as before
    for nprocs in (1, 3):
        try:
            starter(2).check(healthy.main, nprocs)
        except LaunchError as error:
            assert f"nprocs={nprocs}) inside launch.bounded(world_size=2)" in str(error)
        else:
            raise AssertionError(f"nprocs={nprocs} in a world of 2 was accepted")


def test_the_failures_alone_turn_a_state_that_timed_out_into_a_timeout():
    state = LaunchState(world_size=2, timeout_s=5, threads=1, timed_out=True, started=2)
    with pytest.raises(LaunchTimeout, match="did not finish within 5 s"):
        Failures(state).raise_for(None, None)
    state.timed_out = False
    Failures(state).raise_for(None, None)  # no spawn, nothing expected: nothing to say


@pytest.mark.parametrize("how", ["SIGTERM", "SIGUSR2"])
def test_a_rank_the_launch_stopped_is_not_named_when_another_raised_first(how):
    # torch stops the other ranks with SIGTERM once one raises, and the launch asks them
    # for their stacks first; when torch then names such a rank, the error to read is the
    # one the raising rank left
    import signal

    from torch.multiprocessing.spawn import ProcessExitedException

    signum = signal.Signals[how]
    state = LaunchState(world_size=4, timeout_s=5, threads=1, started=4)
    state.ended = {0: -signum, 1: -signal.SIGTERM, 2: 1, 3: -signal.SIGTERM}
    trace = 'Traceback ...\n  File "w.py", line 17, in ddp_setup\nValueError: no cuda:2'
    state.raised_by = {2: trace}
    stopped = ProcessExitedException(
        f"process 0 terminated with signal {how}", error_index=0, error_pid=1,
        exit_code=-signum, signal_name=how,
    )  # fmt: skip
    with pytest.raises(LaunchError) as raised:
        Failures(state).raise_for(ProcessExitedException, stopped)
    assert raised.value.rank == 2 and "ValueError: no cuda:2" in str(raised.value), raised.value


#: A rank past its function, asked for its stack while Python ends (``faulthandler``
#: has let go of the signal by then, as it does at the end): it must end as it would have.
ASKED_WHILE_ENDING = r"""
import faulthandler, os, sys
from ddp_lesson.launch import stacks
stacks.dump_on_signal(sys.argv[1], 1)
faulthandler.unregister(stacks.STACK_SIGNAL)
os.kill(os.getpid(), stacks.STACK_SIGNAL)
print("ended as it would have")
"""


def test_a_rank_asked_for_its_stack_as_it_ends_is_not_killed_by_the_asking(tmp_path):
    from ddp_lesson.launch import stacks

    done = subprocess.run(
        [sys.executable, "-c", ASKED_WHILE_ENDING, str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0 and "ended as it would have" in done.stdout, done
    assert (tmp_path / "stack-1.txt").exists()
    # and a launch that asks a rank which has ended meanwhile takes no stack from it
    assert stacks.take({1: 2**22 + 7}, tmp_path, {}) == {}


def test_a_block_that_fails_to_open_undoes_every_step_it_had_taken(monkeypatch):
    def broken(path, *args, **kwargs):
        raise OSError(f"no pipe at {path}")

    spawn_log = logging.getLogger("torch.multiprocessing.spawn")
    before = (mp.start_processes, spawn_log.level)
    monkeypatch.setattr(capture, "OutputTap", broken)  # the last step before the watcher
    run = Supervisor(2, 30)
    with pytest.raises(OSError, match="no pipe"):
        with run:
            raise AssertionError("the block ran although it did not open")
    assert (mp.start_processes, spawn_log.level) == before
    assert run.state.folder is not None and not run.state.folder.exists()
    assert run.ranks.tap is None and not run.running
    assert not [t for t in threading.enumerate() if t.name == "ddp-lesson-watch"]


def test_a_rank_stopped_before_its_function_ran_names_no_line():
    from ddp_lesson.launch import stacks

    # a rank still starting up: only the code the process was started with is on its stack
    dump = (
        "Current thread 0x1 (most recent call first):\n"
        '  File "/usr/lib/python3.11/multiprocessing/spawn.py", line 120 in spawn_main\n'
        '  File "<string>", line 1 in <module>\n'
    )
    assert stacks.where(dump) == ""


#: A rank that writes its stack in two parts with a pause between them, as a
#: busy machine can make a rank do: its first line, then the frames.
SLOW_DUMPER = r"""
import signal, sys, time
path = sys.argv[1]
def dump(signum, frame):
    with open(path, "a") as out:
        out.write('Current thread 0x1 (most recent call first):\n')
        out.flush()
        time.sleep(0.5)
        out.write('  File "/x/workers/w.py", line 20 in main\n')
        out.write('  File "/x/ddp_lesson/launch/ranks.py", line 9 in entry\n')
open(path, "w").close()
signal.signal(signal.SIGUSR2, dump)
print("ready", flush=True)
while True:
    time.sleep(0.01)
"""


def test_a_stack_read_while_the_rank_still_writes_it_is_waited_for(tmp_path):
    from ddp_lesson.launch import stacks

    child = subprocess.Popen(
        [sys.executable, "-c", SLOW_DUMPER, str(tmp_path / "stack-1.txt")],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "ready"
        assert stacks.take({1: child.pid}, tmp_path, {}) == {1: "workers/w.py, line 20, in main"}
    finally:
        child.kill()
        child.wait()


def test_torchs_note_on_a_store_the_launch_already_hosts_is_not_shown():
    printed = (
        "[E1207 16:45:12.153370475 TCPStore.cpp:277] [c10d] The server socket on 55805 has "
        "failed to bind. TORCHELASTIC_USE_AGENT_STORE is enabled so ignoring the error.\n"
        "group of 2 on gloo\n"
    )
    assert worth_showing(printed) == "group of 2 on gloo"
    assert worth_showing("loss 0.5\nloss 0.4\n") == "loss 0.5\nloss 0.4"
