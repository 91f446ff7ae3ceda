"""The core path as a learner meets it: what they read, how long it takes, what quizzes ask.

Run as a script to print the figures: ``python tests/test_core_path.py``.

*Machinery* is code the course runs for itself, not DDP: a line that names
one of the course's helpers (``ddp_lesson``, ``launch``, ``views``,
``reports``, ``sources``, ``devices``, ``measures``, ``plots``, ``data``, a
launch's ``run.`` record, ``importlib.reload``, ``import workers``), and
every line of a cell that does none of DDP's work (it names neither torch
nor a DDP utility: analysis that prints what a run showed). Lines of a
collapsed cell (JupyterLab's ``source_hidden``) are not read, so they are
not counted; blank lines neither.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
from course_map import LESSONS  # noqa: E402

CORE = [stem for stem, (_, _, core) in LESSONS.items() if core]
MAX_MACHINERY = 0.25

HELPER = re.compile(
    r"ddp_lesson|\b(launch|views|reports|sources|devices|measures|plots|data)\.|\brun\."
    r"|importlib\.reload|import workers\b|dont_write_bytecode|\bplan\b"
)
DDP_WORK = re.compile(r"\btorch\b|\bdist\.|mp\.spawn|DistributedSampler|\bDDP\b|torchrun")


def hidden(cell: dict) -> bool:
    return bool(cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"))


def code_lines(path: Path) -> tuple[int, int]:
    """(machinery lines, visible code lines) of the notebook at ``path``."""
    machinery = visible = 0
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        if cell["cell_type"] != "code" or hidden(cell):
            continue
        source = "".join(cell["source"])
        lines = [line for line in source.splitlines() if line.strip()]
        visible += len(lines)
        code = "\n".join(line.split("#")[0] for line in lines)
        if not source.startswith("%%writefile") and not DDP_WORK.search(code):
            machinery += len(lines)  # analysis or plumbing: no DDP in it
        else:
            machinery += sum(1 for line in lines if HELPER.search(line))
    return machinery, visible


def core_share(stems: list[str] = CORE) -> float:
    counts = [code_lines(ROOT / "notebooks" / f"{stem}.ipynb") for stem in stems]
    return sum(m for m, _ in counts) / sum(v for _, v in counts)


def test_counting_tells_machinery_from_ddp(tmp_path):
    cells = [
        {"cell_type": "code", "metadata": {}, "source": "mp.spawn(main, nprocs=2)\n"},
        {"cell_type": "code", "metadata": {}, "source": "with launch.bounded(2) as run:\n"
         "    mp.spawn(main, nprocs=2)\nprint(run.summary(['rank']))\n"},
        {"cell_type": "code", "metadata": {}, "source": "gap = max(a - b)\nprint(gap)\n"},
        {"cell_type": "code", "metadata": {"jupyter": {"source_hidden": True}},
         "source": "from ddp_lesson import views\nimport os\n"},
    ]
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps({"cells": cells}))
    assert code_lines(path) == (4, 6)


def test_most_code_a_learner_reads_on_the_core_path_is_ddp():
    share = core_share()
    assert share <= MAX_MACHINERY, (
        f"{share:.0%} of the visible code lines of the core path are the course's machinery "
        f"(at most {MAX_MACHINERY:.0%}): collapse plumbing cells (source_hidden) or shorten them"
    )


if __name__ == "__main__":
    stems = sys.argv[1:] or CORE
    for stem in stems:
        machinery, visible = code_lines(ROOT / "notebooks" / f"{stem}.ipynb")
        share = machinery / visible
        print(f"{stem:20} {machinery:4} of {visible:4} visible code lines ({share:.0%})")
    print(f"all: {core_share(stems):.1%}")


# --- quizzes ---------------------------------------------------------------

QUIZ_CALL = re.compile(r'Quiz\.named\("(\w+)", "(\w+)"\)')
MAX_ONE_POSITION = 0.40
STOP = set("that this with from what which when their there than then each every into only "
           "does have been were will would your they them also just same".split())


def words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z_][a-z0-9_]{3,}", text.lower()) if w not in STOP}


FUNCTION_WORDS = set("the a an of to in on at its it is are be and or then each own every with "
                     "for by as that this from".split())


def pairs(text: str) -> set[tuple[str, str]]:
    """Neighbouring words, function words aside: a phrase restates more than a word."""
    found = re.findall(r"[a-z0-9_']+", text.lower())
    return {(a, b) for a, b in zip(found, found[1:], strict=False)
            if a not in FUNCTION_WORDS and b not in FUNCTION_WORDS}


def stated(choice: str, text: str, by=words) -> float:
    """The share of a choice's words (or word pairs, ``by=pairs``) that ``text`` contains."""
    own = by(choice)
    return len(own & by(text)) / len(own) if own else 0.0


def quizzes() -> list[tuple[str, str, str]]:
    """(notebook, key, the markdown right above the quiz) for every quiz a lesson asks."""
    found = []
    for path in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for i, cell in enumerate(cells):
            for notebook, key in QUIZ_CALL.findall("".join(cell["source"])):
                above = next((c for c in reversed(cells[:i]) if c["cell_type"] == "markdown"),
                             None)
                found.append((notebook, key, "".join(above["source"]) if above else ""))
    return found


def answered_above(quiz, above: str) -> bool:
    """Whether the markdown above restates the right choice more than any wrong one.

    Two signals: most of the right choice's words, clearly more than any
    wrong choice's; or more of its phrases (word pairs) than any wrong
    choice's. A paraphrase in other words escapes both: reviews catch it.
    """
    def best_wrong(scores):
        return max(s for i, s in enumerate(scores) if i != quiz.answer)

    by_word = [stated(choice, above) for choice in quiz.choices]
    by_pair = [stated(choice, above, pairs) for choice in quiz.choices]
    right_word, right_pair = by_word[quiz.answer], by_pair[quiz.answer]
    return (right_word >= 0.6 and right_word >= best_wrong(by_word) + 0.1) or (
        right_pair >= 0.14 and right_pair > best_wrong(by_pair)
    )


def test_the_right_answers_spread_over_the_positions():
    from ddp_lesson.views.quiz import Quiz

    asked = [Quiz.named(notebook, key) for notebook, key, _ in quizzes()]
    positions = [quiz.answer for quiz in asked]
    for position in set(positions):
        share = positions.count(position) / len(positions)
        assert share <= MAX_ONE_POSITION, (
            f"choice {'ABCD'[position]} is right in {share:.0%} of the {len(positions)} quizzes "
            f"(at most {MAX_ONE_POSITION:.0%}): move some right answers to other positions"
        )


def test_no_quiz_is_answered_by_the_markdown_right_above_it():
    from ddp_lesson.views.quiz import Quiz

    for notebook, key, above in quizzes():
        assert not answered_above(Quiz.named(notebook, key), above), (
            f"{notebook}: the cell above quiz {key!r} states its right choice; ask first, "
            "explain after"
        )


def test_a_quiz_stated_above_is_caught():
    from ddp_lesson.views.quiz import Quiz

    quiz = Quiz("Where does rank come from?", ["an environment variable",
                "mp.spawn passes each process its index as the first argument"], 1, "because")
    assert answered_above(quiz, "mp.spawn passes each process its index first.")
    assert not answered_above(quiz, "Processes need a way to tell themselves apart.")
    # a phrase restated in a longer sentence (how 05's quiz was once answered above it)
    synced = Quiz("After backward?", ["different: each follows its own batch",
                  "identical: DDP averages them across ranks during backward()"], 1, "because")
    assert answered_above(synced, "it computes this rank's gradients, and it averages them "
                                  "with every other rank's")


# --- self-contained ---------------------------------------------------------

OUTSIDE_TEXT = re.compile(r"\bthe lesson\b(?! notebook)", re.IGNORECASE)


def test_no_notebook_points_to_a_lesson_text_the_learner_does_not_have():
    """'the lesson' meant a text outside the repository; the course shows what it means."""
    found = []
    for folder in ("notebooks", "solutions", "exercises"):
        for path in sorted((ROOT / folder).glob("[0-9][0-9]_*.ipynb")):
            for i, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
                texts = ["".join(cell["source"])] + [
                    "".join(o.get("text", "")) for o in cell.get("outputs", [])]
                for text in texts:
                    found += [f"{folder}/{path.name} cell {i}: ...{m.group(0)}..."
                              for m in OUTSIDE_TEXT.finditer(text)]
    assert not found, "\n".join(found)


# --- predict, then run ------------------------------------------------------

PROMPT = re.compile(r"what do you think", re.IGNORECASE)


def unfolded_predictions(path: Path) -> list[int]:
    """Cells that ask for a prediction whose answer is not folded away.

    A prompt keeps its answer in a ``<details>`` block of its own, or the
    code below it (up to the next markdown cell) ends in ``views.reveal``,
    whose saved output stays closed until the learner opens it.
    """
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    found = []
    for i, cell in enumerate(cells):
        text = "".join(cell["source"])
        if cell["cell_type"] != "markdown" or not PROMPT.search(text) or "<details>" in text:
            continue
        below = []
        for after in cells[i + 1:]:
            if after["cell_type"] == "markdown":
                break
            below.append(after)
        folded = any(
            "ddp-reveal" in "".join(out.get("data", {}).get("text/html", ""))
            for after in below for out in after.get("outputs", [])
        )
        if not folded:
            found.append(i)
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")),
                         ids=lambda p: p.stem)
def test_a_prediction_prompt_keeps_its_answer_folded(path):
    assert not unfolded_predictions(path), (
        f"{path.name}: cells {unfolded_predictions(path)} ask what the learner thinks, but the "
        "answer is in sight: put it in <details>, or end the answering cell with views.reveal"
    )
