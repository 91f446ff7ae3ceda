"""The lesson's stage workers as the notebooks write them, and what each stage changes.

Every stage notebook writes its worker with a ``%%writefile`` cell. A later
notebook can show how its worker differs from an earlier one without
having run that notebook: the source comes from the notebook file itself.
"""

from __future__ import annotations

import difflib
import json
import os
from pathlib import Path

#: Where the lesson notebooks live (the package sits next to them).
NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def writefile_cells(notebook: str | os.PathLike) -> dict[str, str]:
    """Map each ``%%writefile`` target in ``notebook`` to the text it writes.

    Args:
        notebook: path of an ``.ipynb`` file.
    """
    path = Path(notebook)
    if not path.is_file():
        raise FileNotFoundError(f"no notebook at {path}")
    found = {}
    for cell in json.loads(path.read_text())["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] == "code" and source.startswith("%%writefile"):
            first, _, body = source.partition("\n")
            found[first.split()[-1]] = body + "\n"
    return found


def worker_source(stage: str, folder: str | os.PathLike = NOTEBOOKS) -> str:
    """The source of ``workers/stage_NN.py`` as the stage's notebook writes it.

    Args:
        stage: the two-digit stage number, e.g. ``"06"``.
        folder: the notebooks folder.

    >>> "DistributedSampler(train_dataset)" in worker_source("06")
    True
    """
    if not (isinstance(stage, str) and len(stage) == 2 and stage.isdigit()):
        raise ValueError(f"stage must be two digits such as '06', got {stage!r}")
    target = f"workers/stage_{stage}.py"
    for notebook in sorted(Path(folder).glob(f"{stage}_*.ipynb")):
        cells = writefile_cells(notebook)
        if target in cells:
            return cells[target]
    raise LookupError(f"no notebook {stage}_*.ipynb in {folder} writes {target}")


def diff(old: str, new: str, *, context: int = 1) -> str:
    """What stage ``new``'s worker changes in stage ``old``'s, as a unified diff.

    Args:
        old: the earlier stage, e.g. ``"06"``.
        new: the later stage, e.g. ``"08"``.
        context: unchanged lines shown around each change.
    """
    lines = difflib.unified_diff(
        worker_source(old).splitlines(),
        worker_source(new).splitlines(),
        f"stage_{old}.py",
        f"stage_{new}.py",
        n=context,
        lineterm="",
    )
    return "\n".join(lines)
