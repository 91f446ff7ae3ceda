"""Starting a launch's ranks as ``mp.spawn`` would, and waiting for them.

:class:`RankStarter` is the part of :class:`.supervisor.Supervisor` that
``mp.spawn`` inside a ``with launch.bounded(...)`` block reaches: it checks
the start, forks the ranks from the warm server (or starts fresh
interpreters) through torch's own ``start_processes``, and notes in the
launch's :class:`.state.LaunchState` how each rank ended.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import sys
import threading
from collections.abc import Callable

from ..validate import whole_number
from . import capture, errors
from .main_file import interactive_main, unguarded_line
from .ranks import RankStart, Target, entry
from .state import LaunchState
from .warm_server import start_warm_server, wait_until_ready, warm_server_fits
from .watching import Watcher


class RankStarter:
    """Starts ranks for one launch, as ``mp.spawn`` does, and records how they ended.

    The supervisor hands it, when the block opens, what only exists then:
    :attr:`tap` (the pipe the ranks' output goes to) and :attr:`torch_start`
    (torch's own ``start_processes``).

    Args:
        state: the launch's state, shared with the supervisor's other parts.
        watcher: the launch's watcher, asked where the ranks are when one fails.
    """

    def __init__(self, state: LaunchState, watcher: Watcher):
        self.state = state
        self.watcher = watcher
        self.tap: capture.OutputTap | None = None
        self.torch_start: Callable | None = None
        self.contexts: list = []  # torch's ProcessContext of each start

    def start(
        self,
        fn: Callable,
        args: tuple = (),
        nprocs: int = 1,
        *,
        join: bool = True,
        daemon: bool = False,
        warm: bool | None = None,
    ):
        """Start ``nprocs`` ranks running ``fn(rank, *args)``; see :meth:`.Supervisor.start_ranks`.

        Args:
            fn: a function defined at the top level of a module.
            args: what follows ``rank``.
            nprocs: how many ranks: the block's ``world_size``, where it has one.
            join: wait for them; ``False`` returns torch's ``ProcessContext``.
            daemon: start them as daemonic processes.
            warm: fork them from the warm server (``True``), start fresh
                interpreters (``False``), or follow the launch's setting.
        """
        target = self.check(fn, nprocs)
        if nprocs == 0:
            return None
        use_warm = self._use_warm(warm)
        start = self._rank_start(use_warm)
        if use_warm:
            self._ensure_server()
        # a fresh interpreter takes this process's environment as it starts
        with _environment(self.state.env if not use_warm else {}):
            context = self.torch_start(
                entry, (start, target or fn, *args), nprocs, False, daemon,
                "forkserver" if use_warm else "spawn",
            )  # fmt: skip
        with self.state.lock:
            first = len(self.state.rank_pids)
            self.state.rank_pids.update({first + i: p.pid for i, p in enumerate(context.processes)})
        self.contexts.append(context)
        if not join:
            self.state.unjoined += nprocs
            return context
        self.join(context)
        return None

    def check(self, fn: Callable, nprocs: int) -> Target | None:
        """Refuse a start that cannot work, before any rank starts; return ``fn``'s target.

        Args:
            fn: the function the ranks would run.
            nprocs: how many ranks were asked for.

        Raises:
            LaunchError: ``fn`` is defined in a notebook cell, the launching
                file starts ranks outside its main guard, or ``nprocs`` is not
                the block's ``world_size``.
        """
        state = self.state
        state.spawn_calls += 1
        whole_number("nprocs", nprocs)
        target = Target.of(fn)
        name = getattr(fn, "__qualname__", repr(fn))
        state.names.append(name.rsplit(".", 1)[-1])
        if target is None and getattr(fn, "__module__", None) == "__main__" and interactive_main():
            raise errors.LaunchError(errors.defined_in_notebook(name))
        unguarded = unguarded_line()
        if unguarded is not None:
            raise errors.LaunchError(
                errors.unguarded_start(sys.modules["__main__"].__file__, unguarded)
            )
        # (nprocs=0 starts nothing: the block's end says so, naming that mistake)
        if state.world_size is not None and nprocs and nprocs != state.world_size:
            raise errors.LaunchError(errors.other_world_size(nprocs, state.world_size))
        return target

    def _use_warm(self, warm: bool | None) -> bool:
        """Whether ranks fork from the warm server: as asked, and where this machine allows it."""
        from multiprocessing import get_all_start_methods

        use_warm = self.state.warm if warm is None else warm
        use_warm = use_warm and bool(self.tap.path) and "forkserver" in get_all_start_methods()
        return use_warm and warm_server_fits()  # (else fresh interpreters: slower, the same)

    def _rank_start(self, use_warm: bool) -> RankStart:
        """What every rank of this start is told (:func:`.ranks.entry` reads it)."""
        state = self.state
        return RankStart(
            folder=str(state.channel.folder),
            launcher=os.getpid(),
            threads=state.threads,
            env={**os.environ, **state.env, "TMPDIR": str(state.scratch)},
            output=self.tap.path if use_warm else "",
            cwd=os.getcwd(),
            sys_path=tuple(sys.path),
            stacks=str(state.stacks_folder),
        )

    def _ensure_server(self) -> None:
        with self.tap.paused():  # the server outlives this launch: not on its pipe
            with _environment(self.state.env):  # (it starts as the launch's processes do)
                start_warm_server()
        # Ask for ranks only once the server can fork them: an interrupt while it
        # imports then leaves no request in its socket to start a rank after the launch.
        if not wait_until_ready(give_up=lambda: self.state.timed_out):
            raise errors.LaunchError("the deadline passed while the warm server started")

    def join(self, context) -> None:
        """Wait for the ranks of ``context`` as ``mp.spawn`` does (an error in one stops all).

        When a rank fails, the others still running are asked where they are
        before torch stops them (:meth:`.watching.Watcher.take_stacks`).

        Args:
            context: torch's ``ProcessContext`` of a start of ranks.
        """
        from multiprocessing.connection import wait

        try:
            while True:
                running = [p.sentinel for p in context.processes if p.exitcode is None]
                if running:
                    wait(running)
                if any(p.exitcode for p in context.processes):  # one failed: torch stops the rest
                    self.watcher.take_stacks()
                if context.join():
                    return
        finally:
            self.settle(context)

    def settle(self, context) -> None:
        """Note how each rank ended and what it raised; remove the error files torch leaves.

        Args:
            context: torch's ``ProcessContext`` of a start of ranks.
        """
        for index, proc in enumerate(context.processes):
            if proc.exitcode is not None:
                self.state.ended[index] = proc.exitcode
        for index, path in enumerate(context.error_files):
            with contextlib.suppress(OSError, EOFError, pickle.UnpicklingError):
                with open(path, "rb") as written:  # torch's: the traceback text, pickled
                    self.state.raised_by[index] = str(pickle.load(written))
            with contextlib.suppress(OSError):
                os.unlink(path)


#: Held while this process's environment carries a launch's variables.
_environment_lock = threading.Lock()


@contextlib.contextmanager
def _environment(values: dict[str, str]):
    """This process's environment with ``values`` set, only while a process is being started.

    A process started by the ``spawn`` method (or the warm server) takes
    the environment of the moment it starts; it is put back right after.

    Args:
        values: the variables to set; none: nothing changes, and no lock is taken.
    """
    if not values:
        yield
        return
    with _environment_lock:
        saved = {key: os.environ.get(key) for key in values}
        os.environ.update(values)
        try:
            yield
        finally:
            for key, value in saved.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value
