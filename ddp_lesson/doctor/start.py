"""How each process of a diagnosed run starts: the probe first, then the learner's code.

One way in per launch style (:mod:`.run` picks it):

* :func:`worker_process`: a process the doctor started, which loads the file
  and calls its ``main(rank, world_size, *args)``;
* :func:`script_process`: the script's own process, which runs the file as
  ``__main__``; the processes its ``mp.spawn`` starts begin at
  :func:`forked_rank` (or :func:`rank_entry`);
* :func:`torchrun_rank`: what torchrun runs in every worker, forked from
  a warm server in its agent (:data:`AGENT`), then
  :func:`run_torchrun_rank`.

A script's ``mp.spawn`` keeps what spawn means for the script: each process
runs the file's top level again as ``__mp_main__``, gets its function and
arguments pickled, and starts with fresh random seeds. Unless CUDA is
already in use in the script's process, the processes are forked from it
for that, which spares each one the seconds of importing torch again.
"""

from __future__ import annotations

import ast
import builtins
import multiprocessing
import multiprocessing.util
import os
import pickle
import random
import runpy
import subprocess
import sys
import time
import traceback
import types
from collections.abc import Callable
from pathlib import Path

import torch

from ..launch import AGENT_STORE_ENV, torch_hooks
from . import probe, start_follow
from .read_syntax import is_main_block
from .read_terms import TORCHRUN_VARIABLES
from .record import SELF_LAUNCH, SELF_SUBPROCESS, Settings

#: torch's own ``start_processes``, which the script's process hands its spawns to.
_torch_start: list[Callable] = []


def rank_entry(
    index: int, settings: Settings, nprocs: int, first: int, fn: Callable, *args
) -> None:
    """A process of a script's ``mp.spawn``, started by spawn itself (CUDA was in use).

    ``first``: how many processes the script's earlier starts made, so that
    each process of the run has a record of its own.
    """
    probe.install(settings, first + index, nprocs=nprocs, launch=first)
    probe.call_main(index, fn, args)


def _fresh_main(path: str) -> types.ModuleType:
    """Run the learner's file as ``__mp_main__``, as a process started by spawn does."""
    module = types.ModuleType("__mp_main__")
    module.__file__ = path
    module.__builtins__ = builtins
    sys.modules["__mp_main__"] = sys.modules["__main__"] = module
    code = compile(Path(path).read_bytes(), path, "exec")
    exec(code, module.__dict__)
    return module


def forked_rank(index: int, nprocs: int, first: int, payload: bytes | None) -> None:
    """A process of a script's ``mp.spawn``, forked, then made what spawn would have made.

    ``payload`` is the pickled function and arguments; ``None`` when they
    hold what only inheritance may pass (torch's elastic agent hands its
    processes queues), which the fork then carries (:data:`_inherited`).
    ``first``: as for :func:`rank_entry`.
    """
    settings = probe.settings()
    probe.install(settings, first + index, nprocs=nprocs, launch=first)
    # a process spawn starts makes its own processes with spawn too (a DataLoader's
    # workers: they start without the parent's process group)
    multiprocessing.set_start_method("spawn", force=True)
    # a new interpreter starts with seeds of its own
    torch.seed()
    random.seed()
    if "numpy" in sys.modules:
        sys.modules["numpy"].random.seed()
    try:
        _fresh_main(settings.file)
    except BaseException as error:
        probe.current().error = probe.error_entry(error, **{"import": True})
        probe.save()
        raise
    fn, args = pickle.loads(payload) if payload is not None else _inherited[0]
    probe.call_main(index, fn, args)


#: The function and arguments of the processes being forked, when they cannot be pickled.
_inherited: list[tuple[Callable, tuple]] = []


def _route(fn: Callable, args: tuple) -> tuple[str, str]:
    """How the learner started processes (``mp.spawn``, ``elastic_launch``...), and what runs."""
    by = "start_processes"
    frame = sys._getframe(2)
    while frame is not None and not probe.is_learner(frame.f_code.co_filename):
        module = frame.f_globals.get("__name__", "")
        if module.startswith("torch.distributed.launcher"):
            by = "elastic_launch"
        elif frame.f_code is _spawn.__code__ and by == "start_processes":
            by = "mp.spawn"
        frame = frame.f_back
    target = fn
    if getattr(fn, "__module__", "").startswith("torch.distributed.elastic") and args:
        target = args[0]  # the agent's wrapper runs the learner's function, its first argument
    return by, probe.called_name(target)


def _at_import() -> int | None:
    """The line of the script's top level, outside ``if __name__ == "__main__":``, that led
    to this start of processes (None when it runs under the guard, or from no such line)."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "<module>" and probe.is_learner(frame.f_code.co_filename):
            line = frame.f_lineno
            tree = ast.parse(Path(frame.f_code.co_filename).read_text())
            guarded = [n for n in tree.body if is_main_block(n)]
            return None if any(n.lineno <= line <= n.end_lineno for n in guarded) else line
        frame = frame.f_back
    return None


def _started_at_import(by: str, start_method: str) -> None:
    """Stop the script when a start of processes that imports the file again in each new
    process (the spawn method) is reached from code that runs at import."""
    line = _at_import() if start_method != "fork" else None
    if line is None:
        return
    probe.stop_at_stage(
        "spawning",
        f"{by} (line {probe.learner_line(3)}) is reached from line {line}, which runs when "
        'the file is imported, outside `if __name__ == "__main__":`. Every process it '
        f"starts imports this file again, reaches line {line} and would start processes "
        "again; Python stops it ('An attempt has been made to start a new process before "
        f"the current process has finished its bootstrapping phase'). Put line {line} "
        'under `if __name__ == "__main__":`',
        line,
    )


def _start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """``mp.start_processes`` in the script's process: recorded, each process probed."""
    by, runs = _route(fn, tuple(args))
    _started_at_import(by, start_method)
    first = sum(s["nprocs"] for s in probe.current().spawns)  # started by earlier calls
    probe.current().spawns.append(
        {"nprocs": nprocs, "nargs": len(args), "line": probe.learner_line(), "by": by,
         "target": runs, "given": None if isinstance(args, tuple | list) else type(args).__name__}
    )  # fmt: skip
    probe.save()
    if start_method == "spawn" and not torch.cuda.is_initialized():
        try:
            payload = pickle.dumps((fn, tuple(args)))  # fails where spawn would
        except RuntimeError as error:
            if "inheritance" not in str(error):  # (what spawn alone may pickle)
                raise
            payload = None
            _inherited[:] = [(fn, tuple(args))]
        sys.stdout.flush()
        sys.stderr.flush()
        target, given, method = forked_rank, (nprocs, first, payload), "fork"
    else:
        given = (probe.settings(), nprocs, first, fn, *args)
        target, method = rank_entry, start_method
    with start_follow.inside_torch_start():
        context = _torch_start[0](target, given, nprocs, False, daemon, start_method=method)
    if not join:
        if daemon:  # ended with the script's process unless it joins them
            _unjoined.append([context, probe.current().spawns[-1], False])
            real_join = context.join

            def join_noted(*args, _seen=_unjoined[-1], **kwargs):
                _seen[2] = True
                return real_join(*args, **kwargs)

            context.join = join_noted
        return context
    # (torch leaves a raising rank's error file behind: the doctor's run removes it)
    while not context.join():
        pass
    return None


#: Daemonic processes started with join=False: [context, the start's record, joined yet].
_unjoined: list[list] = []


def _left_unjoined(record) -> bool:
    """Stop the processes the script started as daemons and never joined, and say so
    (True) when some still ran as the script's own code ended."""
    for context, start, joined in _unjoined:
        running = [p for p in context.processes if p.is_alive()]
        if joined or not running:
            continue
        for process in running:
            process.terminate()
        record.stop = {
            "stage": "spawning",
            "evidence": (
                f"{start['by']} (line {start['line']}) started {start['nprocs']} daemonic "
                "process(es) with join=False, and the script never joined them: its own code "
                "ended while they still ran, and a daemonic process ends with the process that "
                "started it, so they were stopped before they could finish. Keep what it "
                "returns and join it (`while not context.join(): pass`), or leave join=True"
            ),
            "line": start["line"],
            "time": time.time(),
        }
        return True
    return False


def _spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    return _start_processes(fn, args, nprocs, join, daemon, start_method)


def _recorded(torch_start: Callable) -> Callable:
    _torch_start[:] = [torch_start]
    return _start_processes


def _recorded_spawn(torch_spawn: Callable) -> Callable:
    return _spawn


def _program_of(entrypoint: str, args: list) -> str | None:
    """The Python file a torchrun agent was asked to run (``python -u FILE ...``), if any."""
    words = [entrypoint, *map(str, args)]
    files = [w for w in words if w.endswith(".py") and os.path.isfile(w)]
    return os.path.realpath(files[0]) if files else None


def _agent_launch(torch_launch_agent: Callable) -> Callable:
    """``launch_agent``, as the script's own process sees it: a run of the script itself
    under torchrun's agent (``torch.distributed.run.main([..., sys.argv[0]])``) is run
    again by the doctor under its torchrun, where its ranks are recorded."""

    def launch_agent(config, entrypoint, args, *rest, **kwargs):
        if isinstance(entrypoint, str) and _program_of(entrypoint, args) == probe.settings().file:
            probe.wants_torchrun(SELF_LAUNCH, probe.learner_line())
        return torch_launch_agent(config, entrypoint, args, *rest, **kwargs)

    return launch_agent


def _self_subprocess(popen_init: Callable) -> Callable:
    """``subprocess.Popen``, as the script's own process sees it: Python started on the
    script itself with torchrun's variables (``RANK``...) in its environment is a launch
    of its own ranks, which the doctor runs under its torchrun instead, recorded."""

    def init(self, args, *rest, **kwargs):
        words = [args] if isinstance(args, str | os.PathLike) else list(args)
        env = kwargs.get("env")
        env = os.environ if env is None else env
        # torchrun itself, run as a program: `torchrun ...` or `python -m torch.distributed.run`
        agent = os.path.basename(str(words[0])) == "torchrun" or any(
            str(w) in ("torch.distributed.run", "torch.distributed.launch") for w in words
        )
        if (
            _program_of(str(words[0]), words[1:]) == probe.settings().file
            and (agent or any(key in env for key in TORCHRUN_VARIABLES))
            and probe.learner_line() is not None
        ):
            probe.wants_torchrun(SELF_LAUNCH if agent else SELF_SUBPROCESS, probe.learner_line())
        own = probe.is_learner(sys._getframe(1).f_code.co_filename)  # (not torch's agent's)
        if own and AGENT_STORE_ENV in env and len(rest) < 9:  # (env given by position: as is)
            # the switch that points a rank at the doctor's store is not for programs the
            # script starts: their rank 0 would never host the store they wait for
            kwargs["env"] = {k: v for k, v in env.items() if k != AGENT_STORE_ENV}
        return popen_init(self, args, *rest, **kwargs)

    return init


def _run_file(path: str, argv: list[str]) -> None:
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(path))
    runpy.run_path(path, run_name="__main__")


def worker_process(index: int, settings: Settings, world_size: int, path: str, args: tuple) -> None:
    """What each process runs for a worker file: load it, call ``main(rank, world_size, *args)``."""
    from ..sources import load

    probe.install(settings, index, nprocs=world_size)
    sys.path.insert(0, os.path.dirname(path))  # its own modules beside it, as for a script
    try:
        module = load(path)
    except BaseException as error:
        probe.current().error = probe.error_entry(error, **{"import": True})
        probe.save()
        raise
    probe.call_main(index, module.main, (world_size, *args))


def script_process(index: int, settings: Settings, path: str, argv: list[str]) -> None:
    """The script's own process: run the file as ``__main__`` with its spawns recorded."""
    # recorded here, also where a launch inside the script would take spawn over
    torch_hooks.hold(torch_hooks.START_PROCESSES)
    torch_hooks.wrap(torch_hooks.START_PROCESSES, _recorded)
    torch_hooks.wrap(torch_hooks.SPAWN, _recorded_spawn)
    torch_hooks.wrap(torch_hooks.LAUNCH_AGENT, _agent_launch)
    probe.install(settings, index, script=True)
    probe.wrap_for_good(subprocess.Popen, "__init__", _self_subprocess)
    # as in `python FILE`: no start method chosen yet (this process was forked by a forkserver)
    multiprocessing.set_start_method(None, force=True)
    start_follow.follow()
    record = probe.current()
    probe.save()
    code = 0
    try:
        _run_file(path, argv)
    except SystemExit as done:
        code = probe.exit_code(done)
        if code:
            record.error = probe.error_entry(done)
    except probe.TorchrunScript:
        pass  # a script for torchrun: the doctor runs it again under torchrun
    except probe.DoctorStop:
        code = 1  # the evidence is the record's stop
    except KeyError as error:
        key = error.args[0] if error.args else None
        if key in TORCHRUN_VARIABLES and not record.spawns:  # (os.environ["RANK"]...)
            record.torchrun = {"variable": key, "line": probe.error_entry(error)["line"]}
        else:
            record.error = probe.error_entry(error)
            code = 1
    except BaseException as error:
        record.error = probe.error_entry(error)
        code = 1
    if code == 0 and _left_unjoined(record):
        code = 1
    record.returned = code == 0
    probe.save()
    # os._exit runs no finaliser: release the semaphores the script's queues hold (torch's
    # elastic agent makes some) as Python's exit would, or the resource tracker warns of leaks
    multiprocessing.util._run_finalizers(0)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def run_torchrun_rank(path: str, argv: list[str], leave: bool = True) -> None:
    """What each process torchrun starts runs: the probe, then the file as ``__main__``.

    ``leave=False`` returns once the file has ended normally (see :func:`.probe.finish`).
    """
    settings = Settings.from_env(os.environ)
    index = int(os.environ.get("RANK", "0"))
    probe.install(settings, index, nprocs=int(os.environ.get("WORLD_SIZE", "0")))
    try:
        _run_file(path, argv)
    except SystemExit as done:
        if probe.exit_code(done):
            probe.failed(done)
            raise
    except BaseException as error:
        probe.failed(error)
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    probe.finish(leave)


def torchrun_rank(path: str, *argv: str) -> None:
    """One of torchrun's workers, forked from its agent's warm server: probed, then the file."""
    from ..launch import as_python_u

    as_python_u()
    multiprocessing.set_start_method(None, force=True)  # as in the new interpreter torchrun starts
    run_torchrun_rank(os.path.realpath(path), list(argv), leave=False)  # (torch's return value)


def agent() -> None:
    """torchrun, as the course runs it (:func:`ddp_lesson.launch.torchrun_agent`), probed."""
    from ..launch import torchrun_agent

    torchrun_agent(worker=torchrun_rank)


#: ``python -c AGENT TORCHRUN-ARGS --run-path --start-method=forkserver PATH ARGS``: the
#: doctor's torchrun (a command, not a module, so forked workers import no main module).
AGENT = "from ddp_lesson.doctor.start import agent; agent()"
