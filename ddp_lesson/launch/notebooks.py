"""Whole notebooks under the supervisor: executed top to bottom in a new kernel, nothing saved."""

from __future__ import annotations

import math
import os
import re
import sys
from pathlib import Path

from .. import reports
from . import errors
from .supervisor import Supervisor

#: What the executing program prints before the seconds the execution took.
_EXECUTED_IN = "NOTEBOOK_SECONDS"

#: The executing program (``python -c``): ``argv`` is the notebook and each cell's limit.
_EXECUTE = f"""
import os, sys, time
import nbformat
from nbclient import NotebookClient
path, cell_timeout_s = sys.argv[1], int(sys.argv[2])
notebook = nbformat.read(path, as_version=4)
client = NotebookClient(notebook, timeout=cell_timeout_s, kernel_name="python3",
                        resources={{"metadata": {{"path": os.path.dirname(path)}}}})
started = time.perf_counter()
client.execute()
print({_EXECUTED_IN!r}, time.perf_counter() - started, flush=True)
"""

#: What a launch sets in this process for its ranks, or in a program for its own
#: processes; the notebook's kernel gets these as they were before the launch.
_KERNEL_KEEPS = (
    "OMP_NUM_THREADS",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONUNBUFFERED",
    "TMPDIR",
    reports.REPORT_DIR_ENV,
)


def execute_notebook(
    path: str | os.PathLike, *, timeout_s: float = 1800, cell_timeout_s: float | None = None
) -> float:
    """Execute a notebook top to bottom in a new kernel in its folder; return the seconds it took.

    A program of its own executes it with ``nbclient`` under a launch's
    supervision: at ``timeout_s`` that program, its kernel and every process
    the kernel started are stopped, and when it returns nothing it started
    is left running. The notebook's file is not changed. The seconds run
    from the kernel's start to its shutdown after the last cell. The
    kernel gets this process's environment, as it was outside any launch.

    Args:
        path: the ``.ipynb`` file.
        timeout_s: seconds before the whole execution is stopped.
        cell_timeout_s: seconds one cell may run (``nbclient``'s limit,
            whole seconds, rounded up); defaults to ``timeout_s``.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        LaunchTimeout: the execution ran past ``timeout_s``.
        LaunchError: a cell raised or ran past ``cell_timeout_s``, or the
            kernel died; the message ends with the last lines printed.
    """
    __tracebackhide__ = True  # noqa: F841
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    cell_timeout_s = timeout_s if cell_timeout_s is None else cell_timeout_s
    outside = {name: os.environ.get(name) for name in _KERNEL_KEEPS}
    argv = [sys.executable, "-c", _EXECUTE, str(path.resolve()), str(math.ceil(cell_timeout_s))]
    try:
        with Supervisor(None, timeout_s) as launch:
            program = launch.command(argv, env=outside)
            launch.wait([program])
    except errors.LaunchTimeout:
        raise errors.LaunchTimeout(
            f"{path} did not finish within {timeout_s:g} s and was stopped with its kernel "
            "and processes"
        ) from None
    output = program.output
    if program.returncode != 0 or _EXECUTED_IN not in output:
        plain = re.sub(r"\x1b\[[0-9;]*m", "", output)  # the traceback's colours
        tail = "\n".join(plain.strip().splitlines()[-8:])
        raise errors.LaunchError(
            f"executing {path} failed (exit code {program.returncode}); its last lines:\n{tail}",
            output=output,
        )
    return float(output.rsplit(_EXECUTED_IN, 1)[-1].split()[0])
