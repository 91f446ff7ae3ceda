"""The workers as the notebooks write them: read from a notebook, compared, varied.

Every stage notebook writes its worker with a ``%%writefile`` cell. A later
notebook can show how its worker differs from an earlier one without
having run that notebook: the source comes from the notebook file itself.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
from pathlib import Path
from types import ModuleType

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


def write_worker(
    stage: str, target: str | os.PathLike, folder: str | os.PathLike = NOTEBOOKS
) -> Path:
    """Write ``workers/stage_NN.py`` to ``target`` as the stage's notebook writes it.

    A later notebook starts its variants (see :func:`variant`) from this
    file, so it needs no copy of the stage's script and no run of the
    stage's notebook.

    Args:
        stage: the two-digit stage number, e.g. ``"06"``.
        target: the file to write.
        folder: the notebooks folder.

    Returns:
        The path written.
    """
    path = Path(target)
    path.write_text(worker_source(stage, folder))
    return path


#: The comment above the line where a worker imports what its notebook
#: measures (from :mod:`ddp_lesson.measures`); a line ending with
#: :data:`MEASURES_TAG` serves only that too.
MEASURES_TAG = "# what this notebook measures"
#: The line where the measuring section of an older worker starts (an
#: exercise's worker still keeps its measuring code below this line).
MEASURING = "# ---- what this notebook measures"


def script_part(source: str) -> str:
    r"""A worker's source without the lines that only serve its notebook's measurements.

    Those are: the :data:`MEASURES_TAG` comment and the import from
    ``ddp_lesson.measures`` under it; any line ending with the tag (a call
    such as ``record(rank, train_loader, epochs)``); and a section that
    starts at a line beginning with :data:`MEASURING` and runs to a
    ``if __name__ == "__main__":`` block or to the end of the file.

    >>> text = "a = 1\n# what this notebook measures (not part of a DDP script):\n"
    >>> text += "from ddp_lesson.measures.x import f\nf(a)  # what this notebook measures\nb = 2"
    >>> print(script_part(text))
    a = 1
    b = 2
    >>> text = "a = 1\n# ---- what this notebook measures\nb = 2\nif __name__ == '__main__':\n    a"
    >>> print(script_part(text))
    a = 1
    if __name__ == '__main__':
        a
    """
    lines = source.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith(MEASURING)), None)
    if start is not None:
        end = next(
            (i for i in range(start, len(lines)) if lines[i].startswith("if __name__ ==")),
            len(lines),
        )
        lines = lines[:start] + lines[end:]
    kept = []
    for line in lines:
        if line.startswith(MEASURES_TAG) or line.startswith("from ddp_lesson.measures."):
            if kept and not kept[-1].strip():
                kept.pop()  # with the blank line that set it apart
            continue
        if line.rstrip().endswith(MEASURES_TAG):
            continue
        kept.append(line)
    return "".join(kept)


def diff_text(
    old: str, new: str, old_name: str, new_name: str, *, context: int = 1, whole: bool = False
) -> str:
    """A unified diff of two workers' sources (their script parts unless ``whole``)."""
    if not whole:
        old, new = script_part(old), script_part(new)
    lines = difflib.unified_diff(
        old.splitlines(), new.splitlines(), old_name, new_name, n=context, lineterm=""
    )
    return "\n".join(lines)


def diff(old: str, new: str, *, context: int = 1, whole: bool = False) -> str:
    """What stage ``new``'s worker changes in stage ``old``'s, as a unified diff.

    The workers are read from the notebooks' ``%%writefile`` cells, so the
    diff is always of the code the notebooks show. Only the script parts are
    compared (see :func:`script_part`): what each notebook measures is its
    own business.

    Args:
        old: the earlier stage, e.g. ``"05"``.
        new: the later stage, e.g. ``"06"``.
        context: unchanged lines shown around each change.
        whole: compare the whole files, measuring sections included.
    """
    return diff_text(
        worker_source(old), worker_source(new), f"stage_{old}.py", f"stage_{new}.py",
        context=context, whole=whole,
    )  # fmt: skip


def variant(source: str | os.PathLike, target: str | os.PathLike, change: str) -> str:
    r"""Write ``target`` as ``source`` with a few lines changed; return the diff.

    ``change`` lists the lines to take out (``-``) and to put in (``+``),
    as in a diff. Consecutive ``-`` lines (and lines kept as they are,
    starting with a space, to say where) must appear together exactly once
    in ``source``; the ``+`` lines that follow them go where they were. A
    ``-...`` line after them takes out the rest of the file too. A line
    starting with ``@@`` ends a group, as between a diff's hunks (two
    places that only lose lines). Lines compare without their trailing
    spaces.

    Args:
        source: the worker file to start from.
        target: the file to write.
        change: the lines, as in a diff.

    Raises:
        ValueError: lines to take out are not in ``source``, or are there
            more than once (the message names them).

    >>> import tempfile, pathlib
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "a.py").write_text("x = 1\ny = 2\n")
    >>> print(variant(folder / "a.py", folder / "b.py", "-y = 2\n+y = 3  # the mistake"))
    --- a.py
    +++ b.py
    @@ -1,2 +1,2 @@
     x = 1
    -y = 2
    +y = 3  # the mistake
    >>> _ = (folder / "a.py").write_text("x = 1\ny = 2\nz = 3\n")
    >>> print(variant(folder / "a.py", folder / "c.py", "-x = 1\n@@\n-z = 3"))
    --- a.py
    +++ c.py
    @@ -1,3 +1 @@
    -x = 1
     y = 2
    -z = 3
    >>> print(variant(folder / "a.py", folder / "d.py", "-y = 2\n-..."))
    --- a.py
    +++ d.py
    @@ -1,3 +1 @@
     x = 1
    -y = 2
    -z = 3
    >>> import shutil; shutil.rmtree(folder)
    """
    old = Path(source).read_text()
    lines = old.splitlines()
    groups = _change_groups(change)
    edits = [_placed(group, lines, source) for group in groups]
    for start, length, replacement in sorted(edits, reverse=True):
        lines[start : start + length] = replacement
    new = "\n".join(lines) + "\n"
    Path(target).write_text(new)
    return diff_text(old, new, Path(source).name, Path(target).name, whole=True)


#: One group of a change: the lines matched (each with its sign), the lines
#: put in, and whether the rest of the file goes too (a list, set in place).
_Group = tuple[list[tuple[str, str]], list[str], list[bool]]


def _change_groups(change: str) -> list[_Group]:
    """Read a :func:`variant` change into its groups, in the order they are written."""
    hunks: list[_Group] = []
    apart = True  # the next '-' or ' ' line starts a group of its own
    for raw in change.strip("\n").splitlines():
        sign, text = raw[:1], raw[1:]
        if raw.startswith("@@"):
            apart = True
        elif raw == "-..." and not apart and not hunks[-1][1]:
            hunks[-1][2][0] = True
            apart = True  # nothing is left below to match
        elif sign in ("-", " ") and (apart or hunks[-1][1]):
            hunks.append(([(sign, text)], [], [False]))
            apart = False
        elif sign in ("-", " "):
            hunks[-1][0].append((sign, text))
        elif sign == "+" and hunks and (not apart or hunks[-1][2][0]):
            hunks[-1][1].append(text)
        else:
            raise ValueError(
                "each change line starts with '-', '+', a space or '@@', and '+' lines "
                f"follow the lines they replace; got {raw!r}"
            )
    return hunks


def _placed(
    group: _Group, lines: list[str], source: str | os.PathLike
) -> tuple[int, int, list[str]]:
    """Find where one group goes in ``lines``: ``(first line, lines replaced, replacement)``."""
    matched, added, to_end = group
    wanted = [text.rstrip() for _, text in matched]
    at = [
        i
        for i in range(len(lines) - len(wanted) + 1)
        if [line.rstrip() for line in lines[i : i + len(wanted)]] == wanted
    ]
    if len(at) != 1:
        where = "are not in" if not at else f"appear {len(at)} times in"
        shown = " / ".join(t.strip() for t in wanted)
        raise ValueError(
            f"the lines {shown!r} {where} {source}: re-run the cell that writes it, or "
            "give lines that appear once (add the lines around them)"
        )
    kept = [lines[at[0] + n] for n, (sign, _) in enumerate(matched) if sign == " "]
    length = len(lines) - at[0] if to_end[0] else len(wanted)
    return at[0], length, kept + added


def load(path: str | os.PathLike, name: str = "learner_worker") -> ModuleType:
    """Import the Python file at ``path`` as a fresh module, run from the file as it is now.

    The exercises' probes and the doctor load a learner's file this way in
    every rank, so that each rank runs the file as it is on disk now. The
    module is ``sys.modules[name]`` while it runs and after (replacing an
    earlier load): code that looks its own module up there, such as
    ``@dataclass`` under ``from __future__ import annotations``, finds it.
    """
    import sys

    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
