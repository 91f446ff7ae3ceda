"""The overlap picture of 11_inside_ddp in a real JupyterLab, driven by headless Chromium.

The test writes a short notebook from ``notebooks/11_inside_ddp.ipynb``'s
own cells (its setup, the two worker files, and the overlap view), runs it
in JupyterLab on 127.0.0.1, waits for the picture the ranks' timestamps
drew, then switches the view to one all-reduce per parameter, presses its
button and waits for the new launch's facts and picture. Screenshots land
in ``tests/artifacts/`` (``overlap-picture.png``).

Chromium comes from Debian's ``chromium`` package, as for
``test_partition_explorer.py``; the helpers both share are in ``lab.py``.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import nbformat
import pytest
from lab import ARTIFACTS, RUN_ALL_S, jupyterlab, running_notebook

ROOT = Path(__file__).resolve().parents[2]
NAME = "11_overlap.ipynb"

#: The cells of notebook 11 this test needs, recognised by what they contain.
NEEDED = (
    "plan = devices.plan()",
    "%%writefile workers/by_hand.py",
    "%%writefile workers/stage_11.py",
    "import workers.stage_11 as worker",
    "views.OverlapTimeline(",
)


def _short_notebook(folder: Path) -> None:
    lesson = nbformat.read(ROOT / "notebooks" / "11_inside_ddp.ipynb", as_version=4)
    cells = [
        c for c in lesson.cells if c.cell_type == "code" and any(n in c.source for n in NEEDED)
    ]
    assert len(cells) == len(NEEDED), [c.source[:40] for c in cells]
    for cell in cells:  # everything the page shows must come from this run
        cell.outputs, cell.execution_count = [], None
    short = nbformat.v4.new_notebook(
        cells=cells, metadata={"kernelspec": lesson.metadata.kernelspec}
    )
    nbformat.write(short, folder / NAME)
    (folder / "workers").mkdir()
    shutil.copy(ROOT / "notebooks" / "workers" / "__init__.py", folder / "workers")


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on 127.0.0.1 serving the short notebook; yields (url, token)."""
    _short_notebook(tmp_path)
    with jupyterlab(tmp_path, "jupyterlab-overlap.log") as (url, token):
        yield url, token


def _picture(view) -> str:
    """The source of the picture drawn below the view's facts (a PNG data URL)."""
    image = view.locator("xpath=following::img[1]")
    image.wait_for(timeout=30_000)
    return image.get_attribute("src") or ""


def test_overlap_picture_is_drawn_from_a_real_launch_and_follows_its_controls(no_leftovers, lab):
    url, token = lab
    with running_notebook(url, token, NAME, height=1200, failure="overlap-failure.png") as page:
        facts = page.locator(".ddp-overlap").first
        facts.get_by_text("last layer first").wait_for(timeout=RUN_ALL_S * 1000)
        assert "2 all-reduce(s) in the step" in facts.inner_text()
        first = _picture(facts)
        assert first.startswith("data:image/png")

        controls = page.locator(".ddp-overlap-view")
        controls.locator(".ddp-how select").select_option("per parameter")
        controls.locator(".ddp-run").click()
        facts.get_by_text("6 all-reduce(s) in the step").wait_for(timeout=120_000)
        deadline = time.monotonic() + 30  # the facts are replaced first, then the picture
        while (second := _picture(facts)) == first and time.monotonic() < deadline:
            time.sleep(0.2)
        assert second.startswith("data:image/png") and second != first
        # the view's controls at the top of the page, its facts and picture below them
        controls.evaluate("view => view.scrollIntoView({block: 'start'})")
        page.screenshot(path=str(ARTIFACTS / "overlap-picture.png"))
