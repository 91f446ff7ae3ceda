"""The doctor's command line: ``python -m ddp_lesson doctor PATH`` or ``ddp-doctor PATH``."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator, Sequence

from .diagnose import TIMEOUT_RANGE_S, TIMEOUT_S, check_options, diagnose


def main(argv: Sequence[str] | None = None) -> int:
    """The ``python -m ddp_lesson doctor`` command; returns the exit code.

    0: the run completed and showed every stage OK; 1: a stage is at
    fault, a process raised, the run did not finish, or it ended before
    some stage could be checked; 2: the input could not be diagnosed, or
    the run checked nothing (the one-line message says why).
    """
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m ddp_lesson doctor",
        description="Name the stage (and line) of a DDP script that is at fault.",
    )
    parser.add_argument(
        "path",
        help="a script (run as Python; one that needs torchrun's variables runs under "
        "torchrun), or a worker file defining main(rank, world_size, ...)",
    )
    parser.epilog = "ARGS after -- go to main after world_size (a worker file) or to the script."
    parser.add_argument("--world-size", default=None, help="processes (default: the course's)")
    low, high = TIMEOUT_RANGE_S
    parser.add_argument(
        "--timeout", default=str(TIMEOUT_S), help=f"deadline in seconds, from {low} to {high}"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    options = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    try:
        world_size, timeout_s = check_options(
            None if options.world_size is None else _number(options.world_size, whole=True),
            _number(options.timeout),
            names=("--world-size", "--timeout"),
        )
    except (TypeError, ValueError) as error:
        return _fail(options, str(error))
    with _tracker_quiet():
        result = diagnose(options.path, world_size, timeout_s=timeout_s, args=extra)
    try:
        print(result.to_json() if options.json else result, flush=True)
    except BrokenPipeError:  # (read by a command that stopped early, such as `| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return result.exit_code


#: The warning filter (``PYTHONWARNINGS``' form) that keeps multiprocessing's resource
#: tracker quiet about the semaphores of processes the doctor stopped.
QUIET_TRACKER = "ignore::UserWarning:multiprocessing.resource_tracker"


@contextlib.contextmanager
def _tracker_quiet() -> Iterator[None]:
    """Inside, a resource tracker multiprocessing starts does not warn of leaked semaphores.

    The semaphores of a run the doctor stopped are its own doing, not the script's: the
    tracker, started later with this environment, would print its warning under the report.
    """
    before = os.environ.get("PYTHONWARNINGS")
    os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [before, QUIET_TRACKER]))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONWARNINGS", None)
        else:
            os.environ["PYTHONWARNINGS"] = before


def _number(text: str, whole: bool = False) -> object:
    """``text`` as the number it spells (an int with ``whole``), else ``text`` itself.

    What is not a number is left as it was typed, so that the range check
    quotes it.
    """
    try:
        return int(text) if whole else float(text)
    except ValueError:
        return text


def _fail(options, message: str) -> int:
    if options.json:
        print(json.dumps({"path": options.path, "ok": False, "problem": message, "stages": {}}))
    else:
        print(f"doctor: {message}")
    return 2
