"""Put an "Open in Colab" badge and a set-up cell at the top of every lesson notebook.

Both are generated from one place, ``[project.urls] Repository`` in
pyproject.toml. The badge is the notebook's first cell; the set-up cell goes
right before the notebook's first code cell, so it runs before anything
imports the course. Where the course's package is installed (``make lab``,
Binder, nbval) the set-up cell does nothing and prints nothing; on a fresh
machine such as Colab it clones the repository, installs the course with
``tools/install_course.py`` and moves into the clone's ``notebooks/``.

Running it again updates both cells in place, so a new lesson notebook, or a
new repository address, needs only::

    python tools/colab_cells.py            # insert or update
    python tools/colab_cells.py --check    # exit 1 if a notebook is not current

It edits the notebook files' JSON directly (no kernel, outputs untouched),
writing them in the layout nbformat writes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from course_meta import ROOT, repository_url, torch_pin  # noqa: E402

BADGE_ID = "colab-badge"
SETUP_ID = "course-setup"
BRANCH = "main"
#: The environment variable the set-up cell reads instead of the repository
#: address: a fork, a mirror, or (in the tests) a local clone.
REPO_VARIABLE = "DDP_LESSON_REPO"
CLONE = "ddp-lesson"

SETUP_TEMPLATE = """\
# Set-up for a fresh machine such as Colab (collapsed: nothing to read here).
# Where the course's package is
# missing, fetch the course and install it (tools/install_course.py). With
# the course installed (make lab, Binder) this cell does nothing.
# On Colab its own torch is kept: replacing it with the course's torch
# {torch} costs minutes of CUDA downloads and may not suit Colab's GPU
# driver; numbers can then differ slightly from the saved outputs.
import importlib.util
import os
import subprocess
import sys

REPO = "{url}"
if importlib.util.find_spec("ddp_lesson") is None:
    url = os.environ.get("{variable}", REPO)
    if not os.path.isdir("{clone}"):
        subprocess.run(["git", "clone", "-q", url, "{clone}"], check=True)
    script = "{clone}/tools/install_course.py"
    subprocess.run([sys.executable, script], check=True)
    sys.path.insert(0, os.path.abspath("{clone}"))
if os.path.isdir("{clone}/notebooks"):
    os.chdir("{clone}/notebooks")"""


def lesson_notebooks(root: Path = ROOT) -> list[Path]:
    """Every lesson notebook, ``notebooks/NN_*.ipynb``, in order."""
    return sorted((Path(root) / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def badge_source(notebook: str, url: str) -> str:
    """The badge cell's markdown for ``notebooks/<notebook>`` of the repository at ``url``.

    >>> print(badge_source("00_setup.ipynb", "https://github.com/o/r"))  # doctest: +ELLIPSIS
    [![Open in Colab](...colab-badge.svg)](https://colab.research.google.com/github/o/r/...
    ...
    """
    if not url.startswith("https://github.com/"):
        raise SystemExit(f"Colab opens notebooks from GitHub; Repository is {url}")
    path = url.removeprefix("https://github.com/")
    colab = f"https://colab.research.google.com/github/{path}/blob/{BRANCH}/notebooks/{notebook}"
    return (
        f"[![Open in Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab})\n"
        "\n"
        "On Colab, run the first code cell: it fetches and installs the course."
    )


def setup_source(url: str, torch: str) -> str:
    """The set-up cell's code for the repository at ``url``, the course pinning ``torch``."""
    source = SETUP_TEMPLATE.format(url=url, variable=REPO_VARIABLE, clone=CLONE, torch=torch)
    long = [line for line in source.splitlines() if len(line) > 78]
    if long:
        raise SystemExit(f"set-up cell lines must be at most 78 characters: {long}")
    return source


def lines(text: str) -> list[str]:
    """A cell's ``source`` as nbformat stores it: one string per line."""
    return text.splitlines(keepends=True)


def with_cells(notebook: dict, badge: str, setup: str) -> dict:
    """``notebook`` with the badge first and the set-up cell before its first code cell."""
    cells = [c for c in notebook["cells"] if c.get("id") not in (BADGE_ID, SETUP_ID)]
    badge_cell = {"cell_type": "markdown", "id": BADGE_ID, "metadata": {}, "source": lines(badge)}
    setup_cell = {
        "cell_type": "code",
        "execution_count": None,
        "id": SETUP_ID,
        # collapsed in JupyterLab: plumbing, not DDP (its output stays in sight)
        "metadata": {"jupyter": {"source_hidden": True}},
        "outputs": [],
        "source": lines(setup),
    }
    first_code = next((i for i, c in enumerate(cells) if c["cell_type"] == "code"), len(cells))
    cells.insert(first_code, setup_cell)
    cells.insert(0, badge_cell)
    # Number the executed cells as running the notebook from the top does, the
    # set-up cell first. A numbered cell is one nbval compares: the set-up
    # cell's saved output is empty, so nbval fails if it ever prints.
    count = 0
    for cell in cells:
        if cell["cell_type"] == "code" and (cell is setup_cell or cell["execution_count"]):
            count += 1
            cell["execution_count"] = count
            for output in cell["outputs"]:
                if output["output_type"] == "execute_result":
                    output["execution_count"] = count
    return {**notebook, "cells": cells}


def dumps(notebook: dict) -> str:
    """The notebook as nbformat writes it (so an unchanged notebook stays byte-identical)."""
    return json.dumps(notebook, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def updated(path: Path, root: Path = ROOT) -> str:
    """The text ``path`` should have: its cells with the current badge and set-up cell."""
    url = repository_url(root)
    notebook = json.loads(path.read_text(encoding="utf-8"))
    result = with_cells(notebook, badge_source(path.name, url), setup_source(url, torch_pin(root)))
    return dumps(result)


def write_or_check(targets, check: bool, tool: str) -> int:
    """Write each ``(path, text)`` whose file differs, or with ``check`` only report them.

    Returns the exit code: 1 when ``check`` finds a file that is not current.
    """
    stale = []
    for path, text in targets:
        if text == path.read_text(encoding="utf-8"):
            continue
        stale.append(path.name)
        if not check:
            path.write_text(text, encoding="utf-8")
    if check and stale:
        print(f"not current: {', '.join(stale)}; run: python tools/{tool}")
        return 1
    verb = "would update" if check else "updated"
    print(f"{verb} {', '.join(stale)}" if stale else "everything is current")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    parser.add_argument("--root", type=Path, default=ROOT, help="the course's checkout")
    args = parser.parse_args(argv)
    targets = [(path, updated(path, args.root)) for path in lesson_notebooks(args.root)]
    return write_or_check(targets, args.check, "colab_cells.py")


if __name__ == "__main__":
    sys.exit(main())
