"""A prediction's answer in a real JupyterLab: folded until the learner opens it.

Notebooks 08, 09 and 10 ask "What do you think?" and end the cell that
answers with ``views.reveal(...)``. This runs such a cell in headless
Chromium and checks what a learner sees: a closed "Show the result" line,
not the result; one click shows it. A screenshot of each state lands in
``tests/artifacts/``.
"""

from __future__ import annotations

import nbformat
import pytest
from lab import ARTIFACTS, jupyterlab, running_notebook

RESULT = "largest difference from the run that never stopped: 0.0"


@pytest.fixture
def lab(tmp_path):
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("from ddp_lesson.views import reveal"),
        nbformat.v4.new_code_cell(f"reveal({RESULT!r})"),
    ]
    nbformat.write(notebook, tmp_path / "reveal.ipynb")
    with jupyterlab(tmp_path, "jupyterlab-reveal.log") as (url, token):
        yield url, token


def test_a_revealed_result_stays_folded_until_opened(no_leftovers, lab):
    url, token = lab
    with running_notebook(url, token, "reveal.ipynb", failure="failure-reveal.png") as page:
        summary = page.locator(".ddp-reveal summary")
        summary.wait_for(timeout=120_000)
        shown = page.locator(".ddp-reveal pre")
        assert not shown.is_visible(), "the result shows before the learner asked for it"
        assert "Show the result" in summary.inner_text()
        page.screenshot(path=str(ARTIFACTS / "reveal-before.png"))

        summary.click()
        shown.wait_for(state="visible", timeout=10_000)
        assert shown.inner_text().strip() == RESULT
        page.screenshot(path=str(ARTIFACTS / "reveal-after.png"))
