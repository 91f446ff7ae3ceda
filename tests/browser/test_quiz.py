"""A lesson's quiz in a real JupyterLab: its answer stays hidden until the learner asks.

The test runs the quiz cell of ``notebooks/02_spawn.ipynb`` as it is
committed, in headless Chromium, and checks what a learner sees: the
question and the lettered choices, but neither the answer nor its
explanation, in the cell or in its output; a wrong pick gets a hint and
still no answer; the right pick, or the "Reveal the answer" line, shows
the explanation. A screenshot of each state lands in ``tests/artifacts/``.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest
from lab import ARTIFACTS, jupyterlab, running_notebook

from ddp_lesson.views.quiz import Quiz

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK, KEY = "02_spawn", "top_level_line"


def _plain(text: str) -> str:
    """What the page shows of a quiz text: its `code` marks are formatting, not letters."""
    return text.replace("`", "")


@pytest.fixture
def lab(tmp_path):
    """JupyterLab serving the lesson's quiz cell, as committed; yields (url, token)."""
    cells = json.loads((ROOT / "notebooks" / f"{NOTEBOOK}.ipynb").read_text())["cells"]
    (asked,) = ["".join(c["source"]) for c in cells if f'"{KEY}"' in "".join(c["source"])]
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell("from ddp_lesson import views"),
        nbformat.v4.new_code_cell(asked),
    ]
    nbformat.write(notebook, tmp_path / "quiz.ipynb")
    with jupyterlab(tmp_path, "jupyterlab-quiz.log") as (url, token):
        yield url, token


def test_a_quiz_keeps_its_answer_until_the_learner_answers(no_leftovers, lab):
    quiz = Quiz.named(NOTEBOOK, KEY)
    right, wrong = "ABCD"[quiz.answer], "ABCD"[min(quiz.hints)]
    explanation = _plain(quiz.explanation)[:60]
    url, token = lab
    with running_notebook(url, token, "quiz.ipynb", failure="failure-quiz.png") as page:
        check = page.locator(".ddp-quiz-check")
        check.wait_for(timeout=120_000)
        shown = page.get_by_text(explanation, exact=False)

        # before an answer: the question and choices, no answer anywhere in sight
        assert _plain(quiz.question)[:40] in page.locator(".ddp-quiz").inner_text()
        assert explanation not in " ".join(page.locator(".jp-InputArea").all_inner_texts())
        assert not page.locator(".ddp-quiz details p").is_visible()
        assert not any(s.is_visible() for s in shown.all())
        page.screenshot(path=str(ARTIFACTS / "quiz-before.png"))

        # a wrong pick: its hint, still no answer
        choices = page.locator(".ddp-quiz-choice")
        choices.get_by_role("button", name=wrong, exact=True).click()
        check.click()
        message = page.locator(".ddp-message")
        message.get_by_text("Not quite").wait_for(timeout=30_000)
        assert _plain(quiz.hints[min(quiz.hints)])[:30] in message.inner_text()
        assert not any(s.is_visible() for s in shown.all())

        # the right pick: the explanation, in the widget's message
        choices.get_by_role("button", name=right, exact=True).click()
        check.click()
        message.get_by_text(re.compile("^Right")).wait_for(timeout=30_000)
        assert explanation in message.inner_text()

        # and the saved page's own reveal line opens the answer too
        page.locator(".ddp-quiz summary").click()
        answer = page.locator(".ddp-quiz details p")
        answer.wait_for(state="visible", timeout=10_000)
        assert answer.inner_text().startswith(f"{right}.")
        page.screenshot(path=str(ARTIFACTS / "quiz-after.png"))
