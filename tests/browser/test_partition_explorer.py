"""Notebook 04 in a real JupyterLab, driven by headless Chromium.

The test starts JupyterLab on 127.0.0.1 with a token, opens a copy of
``notebooks/04_sampler.ipynb``, runs every cell, then types into the sampler
explorer's world-size and epoch boxes and checks that the partition drawn in
the page is the one the real ``DistributedSampler`` gives for the new
settings. A screenshot of the explorer is saved in ``tests/artifacts/``.

Chromium comes from Debian's ``chromium`` package (Playwright cannot download
its own browser on the machines that test this course). Without it the test
is skipped, except under CI (``CI=true``), where it fails: ``.ci/run``
installs it.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import nbformat
import pytest
from lab import ARTIFACTS, RUN_ALL_S, jupyterlab, running_notebook

from ddp_lesson import data

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def lab(tmp_path):
    """A JupyterLab server on 127.0.0.1 serving a copy of notebook 04; yields (url, token)."""
    (tmp_path / "workers").mkdir()
    notebook = nbformat.read(ROOT / "notebooks" / "04_sampler.ipynb", as_version=4)
    for cell in notebook.cells:  # everything the page shows must come from this run
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    notebook.metadata.pop("widgets", None)
    nbformat.write(notebook, tmp_path / "04_sampler.ipynb")
    shutil.copy(ROOT / "notebooks" / "workers" / "__init__.py", tmp_path / "workers")
    with jupyterlab(tmp_path, "jupyterlab.log") as (url, token):
        yield url, token


def _rendered(page) -> list[str]:
    return page.locator(".ddp-partition .ddp-rank-list").all_inner_texts()


def _expect_partition(page, partition: list[list[int]]) -> None:
    expected = [f"rank {rank}: {indices}" for rank, indices in enumerate(partition)]
    deadline = time.monotonic() + 30
    while _rendered(page) != expected:
        if time.monotonic() > deadline:
            raise AssertionError(f"page shows {_rendered(page)}, expected {expected}")
        time.sleep(0.2)


def _type(page, control: str, value: str) -> None:
    box = page.locator(f".ddp-sampler-explorer .{control} input")
    box.fill(value)
    box.press("Enter")  # the boxes act on Enter, not on every keystroke


def test_explorer_follows_controls_in_jupyterlab(no_leftovers, lab):
    url, token = lab
    with running_notebook(url, token, "04_sampler.ipynb") as page:
        # the last lesson cell launches real ranks to verify the explorer
        verified = page.locator(".ddp-verified")
        verified.wait_for(timeout=RUN_ALL_S * 1000)
        assert "Verified by a real launch" in verified.inner_text()

        explorer = page.locator(".ddp-sampler-explorer")
        explorer.scroll_into_view_if_needed()
        _expect_partition(page, data.sampler_partition(11, 2, epoch=1))

        _type(page, "ddp-world-size", "3")
        _expect_partition(page, data.sampler_partition(11, 3, epoch=1))
        _type(page, "ddp-epoch", "2")
        after = data.sampler_partition(11, 3, epoch=2)
        _expect_partition(page, after)
        marks = page.locator(".ddp-partition .ddp-marks").inner_text()
        assert f"repeated as padding: {data.padding_of(after, 11)['repeated']}" in marks

        page.locator(".ddp-partition").first.scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / "partition-explorer.png"))
        # the button's whole label shows beside the controls, not "verify with a real l..."
        button = page.locator(".ddp-sampler-explorer .ddp-verify")
        assert button.evaluate("b => b.scrollWidth <= b.clientWidth"), "label cut off"

        # bad input: a message in the widget, and the drawing stays as it was
        _type(page, "ddp-world-size", "0")
        message = page.locator(".ddp-sampler-explorer .ddp-message")
        message.get_by_text("world size must be >= 1").wait_for(timeout=30_000)
        _expect_partition(page, after)
