"""The launch's side of a rank: what every rank it starts does before the learner's function.

A launch never relies on a rank importing the course to set itself up.
It starts each rank at :func:`entry`, handing it a :class:`RankStart`, and
:func:`enter` does, explicitly and in this order:

* stop itself, and everything it starts, as soon as the process that
  started it or the launching process is gone: a kernel killed mid-launch
  must not leave ranks behind (first, since the next steps can block);
* take the launch's environment, working folder and import path (a rank
  forked from the warm server starts with the server's), and read
  ``TORCH_DISTRIBUTED_DEBUG`` again from it (torch read it in the server,
  when it imported ``torch.distributed``);
* send its output to the launch (forked ranks open the launch's pipe);
* use the launch's number of torch threads;
* send its reports to the launch's folder (:func:`ddp_lesson.reports.connect`);
* adopt its own orphans;
* skip the interpreter's last garbage collections at exit (after
  ``import torch`` and a ``DDP(...)`` they would walk every object torch
  made; nothing a rank leaves behind needs a cycle collected).

Then :func:`entry` has the rank write its Python stack when the launch
asks (before it stops a rank still running) and imports the function by
module and name, as ``mp.spawn`` would, and calls it with the rank, noting
where it left if it called ``sys.exit`` or returned (:mod:`.stacks`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from .. import reports
from . import processes, torch_hooks

#: Seconds between two looks at whether the launching process is still there.
WATCH_S = 0.5


@dataclass(frozen=True)
class RankStart:
    """What a launch hands every rank it starts.

    Attributes:
        folder: where the rank's reports go.
        launcher: the pid of the process that opened the launch.
        threads: torch threads for the rank.
        env: the launch's environment (a forked rank takes it over).
        output: the launch's named pipe for a forked rank's output; empty
            when the rank inherited its output from the launching process.
        cwd: the launching process's working folder.
        sys_path: the launching process's import path.
        stacks: where the rank writes its stack when asked, and where its
            function ended (:mod:`.stacks`); empty for neither.
    """

    folder: str
    launcher: int
    threads: int
    env: dict[str, str] = field(default_factory=dict)
    output: str = ""
    cwd: str = ""
    sys_path: tuple[str, ...] = ()
    stacks: str = ""


@dataclass(frozen=True)
class Target:
    """A function named by module and name, imported by the rank that runs it.

    Naming it, rather than pickling it, lets a rank forked from a server
    that started long ago import the worker file as it is now, and lets a
    function that cannot be found fail with a message that says why.
    """

    module: str
    name: str

    @classmethod
    def of(cls, fn: Callable) -> Target | None:
        """The target for a module-level function, or ``None`` for anything else."""
        module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
        if not module or module == "__main__" or not name or "<" in name:
            return None
        return cls(module, name)

    def resolve(self) -> Callable:
        found: object = importlib.import_module(self.module)
        for part in self.name.split("."):
            found = getattr(found, part)
        return found  # type: ignore[return-value]

    def __str__(self) -> str:
        return f"{self.module}.{self.name}"


class WorkerNotFound(RuntimeError):
    """Raised in a rank that could not import or find the function it was asked to run."""


def entry(index: int, start: RankStart, target: Target | Callable, *args: object) -> None:
    """What every rank of a launch runs: :func:`enter`, then ``target(index, *args)``."""
    from . import errors, stacks

    enter(start)
    stacks.dump_on_signal(start.stacks, index)
    if isinstance(target, Target):
        try:
            with _no_spawning(target):
                target = target.resolve()
        except WorkerNotFound:
            raise
        except Exception as error:  # whatever importing the learner's file raised
            raise WorkerNotFound(errors.not_found(index, target, error)) from error
    try:
        stacks.run_noting_exit(start.stacks, index, target, args)
    except BaseException:
        # With its launcher gone (a killed kernel), nobody will read or
        # remove the error file torch writes for a rank that raised: leave
        # quietly instead of writing one into the temporary folder.
        if not processes.alive(start.launcher):
            os._exit(1)
        raise


@contextlib.contextmanager
def _no_spawning(target: Target):
    """While the worker's module is imported, starting processes is refused with a reason.

    A worker module that calls ``mp.spawn`` at its top level would have
    every rank that imports it start ranks of its own.
    """

    def refused(torch_start, *args, **kwargs):
        raise WorkerNotFound(
            f"importing the worker module {target.module} called mp.spawn: its top level "
            "starts processes, so every rank that imports it would start ranks of its "
            'own. Put the lines that start the processes under `if __name__ == "__main__":`, '
            "as scripts/ddp_spawn.py does."
        )

    with torch_hooks.handed(torch_hooks.START_PROCESSES, refused):
        yield


def enter(start: RankStart) -> None:
    """Set up this process as a rank of the launch described by ``start`` (see the module)."""
    import torch

    # A rank forked from the warm server inherits the server's Python-level
    # SIGTERM handler, which runs only between bytecodes: a rank blocked in
    # C++ (waiting in init_process_group for a rank that died) would ignore
    # the SIGTERM that stops it. A rank ends at once on SIGTERM, as usual.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # First, before anything that can block (opening the launch's pipes
    # waits for the launching process to open the other end).
    watch_launcher(start.launcher)
    if start.env:
        os.environ.clear()
        os.environ.update(start.env)
        torch.distributed.set_debug_level_from_env()
    if start.cwd:
        os.chdir(start.cwd)
    if start.sys_path:
        sys.path[:] = list(start.sys_path)
    sys.dont_write_bytecode = True  # an edited worker file is never shadowed
    if start.output:
        out = os.open(start.output, os.O_WRONLY)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.close(out)
    torch.set_num_threads(start.threads)
    reports.connect(start.folder)
    processes.become_subreaper()
    quick_exit()
    pause_after_destroy()


def watch_launcher(launcher: int) -> None:
    """Stop this rank, and what it started, once its parent or the launching process is gone.

    torch.multiprocessing asks Linux for SIGINT on parent death, which does
    nothing in a process that ignores SIGINT (anything started in the
    background inherits that), and a forked rank's parent is the warm
    server, not the kernel. So a small daemon thread watches both the
    rank's parent and the process that opened the launch; it also checks
    once right away, in case the kernel died while this rank was starting.
    """
    import threading
    import time

    parent = os.getppid()

    def orphaned() -> bool:
        return os.getppid() != parent or (launcher > 0 and not processes.alive(launcher))

    def die() -> None:
        for proc in processes.descendants():
            try:
                proc.kill()
            except Exception:  # gone already
                pass
        os.kill(os.getpid(), signal.SIGKILL)

    if orphaned():
        die()

    def watch() -> None:
        while not orphaned():
            time.sleep(WATCH_S)
        die()

    threading.Thread(target=watch, name="ddp-lesson-launcher-watch", daemon=True).start()


#: Seconds a rank lets go of Python's lock after ``destroy_process_group()``.
DESTROY_PAUSE_S = 0.05


def pause_after_destroy() -> None:
    """Make ``destroy_process_group()`` let go of Python's lock briefly before it returns.

    A torch problem at teardown: a collective that has finished is freed
    a moment later by one of gloo's threads, and the Python state it still
    holds (that of the thread that started it) needs Python's lock to be
    freed. If the rank's main thread holds that lock meanwhile while it
    frees the process group (with the DDP wrapper, when ``main`` returns),
    whose destructor waits for that gloo thread, both wait for ever; if
    the main thread has reached interpreter shutdown, Python ends the gloo
    thread half-way and the process aborts ("terminate called without an
    active exception"). A pause after ``destroy_process_group()`` lets the
    gloo thread finish first. Installed before the worker's module is
    imported, so ``from torch.distributed import destroy_process_group``
    finds it.
    """
    torch_hooks.wrap(torch_hooks.DESTROY, _with_pause)


def _with_pause(destroy_process_group: Callable) -> Callable:
    import time

    @functools.wraps(destroy_process_group)
    def pausing(*args, **kwargs):
        try:
            return destroy_process_group(*args, **kwargs)
        finally:
            time.sleep(DESTROY_PAUSE_S)  # sleeping lets go of Python's lock

    return pausing


#: What a process that a script's ``mp.spawn`` starts runs first (see :func:`spawn_with_pause`).
PAUSE_FIRST = "from ddp_lesson.launch.ranks import pause_after_destroy; pause_after_destroy(); "


def spawn_with_pause() -> None:
    """Make every process this one starts by the ``spawn`` method install the pause first.

    A spawned process imports its parent's main module (a learner's script,
    as ``__mp_main__``) before it runs what it was sent, so a script whose
    top line is ``from torch.distributed import destroy_process_group``
    binds that name then. The pause must be in place before that import: it
    goes at the front of the command line multiprocessing starts the
    process with (``python -c "...; spawn_main(...)"``).
    """
    torch_hooks.wrap(torch_hooks.COMMAND_LINE, _pause_first)


def _pause_first(get_command_line: Callable) -> Callable:

    @functools.wraps(get_command_line)
    def with_pause(**kwds):
        line = get_command_line(**kwds)
        if "-c" in line[:-1]:
            program = line.index("-c") + 1
            line[program] = PAUSE_FIRST + line[program]
        return line

    return with_pause


def quick_exit() -> None:
    """Spare this rank the interpreter's last garbage collections when it exits.

    At exit Python walks every object still alive looking for reference
    cycles, every object that importing torch and a first ``DDP(...)``
    made among them. Reports and progress are written as they are
    sent, so at exit the objects are frozen: the collector skips them, and
    the rest of shutdown (atexit handlers, module teardown, reference
    counting) happens as usual.
    """
    import atexit
    import gc

    atexit.register(gc.freeze)
