"""How long each lesson notebook takes to execute top to bottom (``make bench --notebooks``).

Each notebook runs in a new kernel under
:func:`ddp_lesson.launch.execute_notebook`; nothing is saved.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

#: Seconds a notebook's kernel may take to start, on top of its cells' limits.
KERNEL_START_S = 240


def notebook_times(paths: Sequence[str | os.PathLike], *, timeout_s: float = 600) -> list[dict]:
    """Execute each notebook top to bottom in its own folder and time it (nothing is saved).

    Args:
        paths: the ``.ipynb`` files, executed in this order.
        timeout_s: seconds each cell may run. A notebook may take that for
            each of its code cells, plus :data:`KERNEL_START_S`, in all;
            then it is stopped with its kernel and every process it started.

    Returns:
        One row per notebook: ``notebook`` (its name without ``.ipynb``)
        and ``seconds`` (from its kernel's start to its shutdown).

    Raises:
        LaunchError, LaunchTimeout: as :func:`ddp_lesson.launch.execute_notebook`.
    """
    from pathlib import Path

    import nbformat

    from .. import launch

    rows = []
    for path in map(Path, paths):
        cells = sum(cell.cell_type == "code" for cell in nbformat.read(path, as_version=4).cells)
        deadline_s = timeout_s * max(cells, 1) + KERNEL_START_S
        seconds = launch.execute_notebook(path, timeout_s=deadline_s, cell_timeout_s=timeout_s)
        rows.append({"notebook": path.stem, "seconds": seconds})
    return rows
