"""Whole programs under the supervisor: ``python file.py``, as a learner runs a script."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from . import errors
from .supervisor import Supervisor


def run_script(path: str | os.PathLike, *args: object, timeout_s: float = 180) -> str:
    """Run a Python file as a whole, as ``python path args...``, and return what it printed.

    The script runs in a session of its own under a launch's supervision: at
    ``timeout_s`` it is stopped together with every process it started,
    however deep.

    Args:
        path: the script, e.g. ``"workers/stage_06.py"``.
        *args: its command-line arguments.
        timeout_s: seconds before the script and its processes are stopped.

    Raises:
        FileNotFoundError: ``path`` does not exist (run the cell that writes it).
        LaunchTimeout: the script ran past ``timeout_s``.
        LaunchError: the script exited with an error; the message ends with
            the last lines it printed.
    """
    __tracebackhide__ = True  # noqa: F841
    if not Path(path).is_file():
        raise FileNotFoundError(
            f"{path} does not exist yet: run the %%writefile cell that creates it first"
        )
    try:
        with Supervisor(None, timeout_s) as launch:
            # as `python path args`, with the pause after destroy_process_group (script_main)
            argv = [sys.executable, "-m", "ddp_lesson.launch.script_main", str(path)]
            script = launch.command([*argv, *map(str, args)])
            launch.wait([script])
    except errors.LaunchTimeout:
        raise errors.LaunchTimeout(
            f"{path} did not finish within {timeout_s:g} s and was stopped with its processes"
        ) from None
    if script.returncode != 0:
        tail = "\n".join(script.output.strip().splitlines()[-8:])
        raise errors.LaunchError(
            f"{path} exited with code {script.returncode}; its last lines:\n{tail}",
            output=script.output,
        )
    return script.output
