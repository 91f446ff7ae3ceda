"""The doctor's command line: ``python -m ddp_lesson doctor PATH`` or ``ddp-doctor PATH``."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from ..validate import seconds
from .diagnose import TIMEOUT_S, diagnose


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
        help="a script (its __main__ calls mp.spawn, or it is written for torchrun), "
        "or a worker file defining main(rank, world_size, ...)",
    )
    parser.epilog = "ARGS after -- go to main after world_size (a worker file) or to the script."
    parser.add_argument("--world-size", default=None, help="processes (default: the course's)")
    parser.add_argument("--timeout", default=str(TIMEOUT_S), help="deadline in seconds")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    options = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    try:
        world_size = None if options.world_size is None else int(options.world_size)
    except ValueError:
        return _fail(options, f"--world-size must be a whole number, got {options.world_size!r}; "
                     "pass e.g. --world-size 2")
    try:
        value = float(options.timeout)
    except ValueError:
        return _fail(options, f"--timeout must be a number of seconds, got {options.timeout!r}")
    try:
        timeout_s = seconds("--timeout", value)
    except ValueError as error:
        return _fail(options, f"{error}; pass e.g. --timeout {TIMEOUT_S}")
    result = diagnose(options.path, world_size, timeout_s=timeout_s, args=extra)
    if options.json:
        print(result.to_json())
    else:
        print(result)
    return result.exit_code


def _fail(options, message: str) -> int:
    if options.json:
        print(json.dumps({"path": options.path, "ok": False, "problem": message, "stages": {}}))
    else:
        print(f"doctor: {message}")
    return 2
