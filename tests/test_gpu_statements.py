"""GPU behaviour the course never ran is labelled as such.

This machine, and the machine that made the saved outputs, has no GPU, so
what the notebooks say NCCL or a GPU *does* is explained, not observed. A
reader must be able to tell the two apart: such a statement is either backed
by a saved output of a GPU run or carries the course's label, "explained,
not run" (the form 14_debugging and 15_first_week use in their headings).

How a GPU statement is recognised (the rule this test applies):

- The prose is a notebook's markdown, outside fenced code blocks and the
  cells that tools write (badge, course map). It is split into paragraphs
  (blank lines; each item of a list and each row of a table is a paragraph
  of its own, so that a list under a labelled sentence is not covered by
  it) and paragraphs into sentences.
- A sentence is a GPU statement when it names the GPU side (the word NCCL,
  CUDA, GPU or GPUs, or a device such as `cuda:0`; environment variables
  such as `NCCL_DEBUG` alone do not count) *and* says what happens at run
  time with one of the verbs in ``BEHAVIOUR`` (fails, hangs, ends, runs
  out, combines, hides, aborts, succeeds, sits idle, binds, ...), in any
  tense or after "can", "may" or "would"; after "a" or "the" the word is a
  noun ("a hang", "the overlap") and does not count.
- It is labelled when the label appears in its paragraph or in the nearest
  heading above it (in its cell or an earlier one), so one labelled heading
  covers a section such as "What NCCL offers (explained, not run: ...)".
- It is backed when the notebook's saved outputs come from a GPU run: an
  output that reports a GPU machine (``torch.cuda.device_count(): N`` with
  N >= 1, as ``devices.plan().describe()`` prints it) or a group on NCCL
  (``backend: nccl``). The policy tables that only predict what a GPU
  machine would choose (00's and 02's) print neither.

The verbs are a net, not a grammar: a claim worded without them ("each rank
owns a whole device") passes unseen, so the label is still the writer's job;
a sentence caught that describes what this machine's own run showed is
reworded so that it does not name the GPU side.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))

#: The words a reader sees beside a statement that was not run.
LABEL = re.compile(r"explained,\s+not\s+run", re.I)

#: What names the GPU side. Case matters: "cuda" alone is a device type in code.
GPU = re.compile(r"\b(?:NCCL|CUDA|GPUs?)\b|\bcuda:\d+\b")

#: Verbs that claim what happens at run time (stems; any ending follows).
BEHAVIOUR = re.compile(
    r"(?<!\ba )(?<!\bthe )\b(?:fail|hang|hung|end(?:s|ed)\b|run(?:s)? out|ran out|combin"
    r"|hid(?:e|es|den|ing)\b|abort|crash|deadlock|succeed|time(?:s|d)? out|sit(?:s)? idle"
    r"|refus|overlap|bind|bound to|brought down|bring(?:s)? down|raise|err(?:s|ed)\b)\w*",
    re.I,
)

#: Output text that only a run on a GPU machine prints.
GPU_RUN = re.compile(r"torch\.cuda\.device_count\(\): [1-9]|\bbackend: nccl\b")

#: Cells that tools write: the badge and the course map.
GENERATED = ("colab-badge", "course-map")


def paragraphs(markdown: str) -> list[str]:
    """The paragraphs of one markdown cell: blocks between blank lines, list items apart."""
    text = re.sub(r"```.*?```", "\n\n", markdown, flags=re.S)
    found: list[str] = []
    for block in re.split(r"\n\s*\n", text):
        items = re.split(r"\n(?=\s*(?:[-*|]|\d+\.)\s)", block)
        found += [re.sub(r"^(?:[-*]|\d+\.)\s+", "", item.strip()) for item in items]
    return [paragraph for paragraph in found if paragraph]


def sentences(paragraph: str) -> list[str]:
    """A paragraph split after each full stop, question or exclamation mark."""
    flat = " ".join(paragraph.split())
    return [s for s in re.split(r"(?<=[.!?])\s+(?=[A-Z(`*])", flat) if s]


def is_gpu_statement(sentence: str) -> bool:
    """Whether a sentence names the GPU side and claims what it does."""
    return bool(GPU.search(sentence) and BEHAVIOUR.search(sentence))


def unlabelled_statements(notebook: dict) -> list[tuple[int, str]]:
    """(cell index, sentence) of each GPU statement with no label and no GPU run behind it."""
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
            text = "".join(output.get("text", "")) + "".join(
                output.get("data", {}).get("text/plain", "")
            )
            if GPU_RUN.search(text):
                return []  # the saved outputs come from a GPU run
    found = []
    heading = ""
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "markdown" or cell.get("id", "").startswith(GENERATED):
            continue
        for paragraph in paragraphs("".join(cell["source"])):
            if paragraph.startswith("#"):
                heading = paragraph
            if LABEL.search(paragraph) or LABEL.search(heading):
                continue
            found += [(index, s) for s in sentences(paragraph) if is_gpu_statement(s)]
    return found


def markdown_notebook(*cells: str) -> dict:
    """A notebook of markdown cells, for the unit checks below."""
    return {"cells": [{"cell_type": "markdown", "source": text} for text in cells]}


def test_an_unlabelled_gpu_statement_is_flagged_and_a_labelled_one_is_not():
    said = "Under NCCL the ranks hang at the first all-reduce."
    assert unlabelled_statements(markdown_notebook(said)) == [(0, said)]
    labelled = said[:-1] + " (explained, not run: this machine has no GPU)."
    assert unlabelled_statements(markdown_notebook(labelled)) == []
    section = "## On GPUs (explained, not run)\n\nSome text."
    assert unlabelled_statements(markdown_notebook(section, said)) == []
    # a label in another section, or in another list item, does not cover it
    other = "## On CPUs\n\nGloo is explained, not run, here."
    assert unlabelled_statements(markdown_notebook(section, other, said)) == [(2, said)]
    listed = "- One point (explained, not run).\n- " + said
    assert unlabelled_statements(markdown_notebook(listed)) == [(0, said)]


def test_what_does_not_claim_gpu_behaviour_is_not_flagged():
    for text in [
        "On this machine's CPU ranks the call fails at once.",  # no GPU named
        "NCCL needs a GPU of its own for every rank.",  # a requirement, no behaviour
        "`NCCL_DEBUG=INFO` is the variable to set.",  # a variable's name only
        "```python\n# NCCL hangs here\n```",  # code, not prose
    ]:
        assert unlabelled_statements(markdown_notebook(text)) == [], text


def test_a_saved_gpu_run_backs_the_statements():
    said = markdown_notebook("Under NCCL the ranks hang at the first all-reduce.")
    said["cells"].append(
        {
            "cell_type": "code",
            "source": "print(plan.describe())",
            "outputs": [{"output_type": "stream", "text": "backend: nccl\n"}],
        }
    )
    assert unlabelled_statements(said) == []


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_gpu_statements_are_run_or_labelled(path):
    found = unlabelled_statements(json.loads(path.read_text()))
    assert not found, (
        f"{path.name}: GPU behaviour described without a GPU run behind it; add "
        "'(explained, not run: ...)' to the sentence's paragraph or section heading:\n"
        + "\n".join(f"  cell {index}: {sentence}" for index, sentence in found)
    )
