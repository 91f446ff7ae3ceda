"""The quiz: a "What do you think happens?" question with choices, a check and a reveal."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from importlib import resources

import ipywidgets as ipw

from .base import View, html_block, inline


class Quiz(View):
    """A "What do you think happens?" question: choices, a check, and a reveal.

    The question, the lettered choices and a collapsed answer are plain HTML
    (readable without a kernel); the widget lets the learner pick a letter
    and check it. A lesson builds its quizzes with :meth:`named`, from a
    data file, so that the answer is not in the cell above the buttons.

    Args:
        question: the question, `backticks` for code.
        choices: two or more possible answers.
        answer: the index of the right choice.
        explanation: why it is right, shown on a right answer and in the reveal.
        hints: optional, per wrong choice index, why that choice is wrong.
    """

    LETTERS = "ABCDEFGH"
    controls_first = False

    def __init__(
        self,
        question: str,
        choices: Sequence[str],
        answer: int,
        explanation: str,
        hints: Mapping[int, str] | None = None,
    ) -> None:
        super().__init__()
        if isinstance(choices, str) or not 2 <= len(choices) <= len(self.LETTERS):
            raise ValueError(
                f"choices must be a list of 2 to {len(self.LETTERS)} answers, got {choices!r}"
            )
        if isinstance(answer, bool) or answer not in range(len(choices)):
            raise ValueError(f"answer must be the index of the right choice (0-{len(choices) - 1})")
        self.question, self.choices, self.answer = question, list(choices), answer
        self.explanation, self.hints = explanation, dict(hints or {})
        self.picker = ipw.ToggleButtons(
            options=list(self.LETTERS[: len(choices)]),
            value=None,
            description="your answer:",
            style={"button_width": "3em", "description_width": "initial"},
        )
        self.picker.add_class("ddp-quiz-choice")
        self.check_button = ipw.Button(description="check")
        self.check_button.add_class("ddp-quiz-check")
        self.check_button.on_click(lambda _: self.check())
        self.box = ipw.VBox([ipw.HBox([self.picker, self.check_button]), self.message])

    @classmethod
    def named(cls, notebook: str, key: str) -> Quiz:
        """The quiz ``key`` of a notebook, from ``ddp_lesson/views/quizzes/<notebook>.toml``.

        Args:
            notebook: the lesson's file name without ``.ipynb`` (``"02_spawn"``).
            key: the quiz's table in that file.

        >>> Quiz.named("02_spawn", "top_level_line").choices[2][:7]
        '5 times'
        """
        quizzes = quizzes_of(notebook)
        if key not in quizzes:
            raise KeyError(f"{notebook}.toml has no quiz {key!r}; it has {sorted(quizzes)}")
        entry = dict(quizzes[key])
        entry["hints"] = {int(k): v for k, v in entry.get("hints", {}).items()}
        return cls(**entry)

    def label(self) -> str:
        return f"Quiz: {self.question}"

    def check(self) -> bool:
        """Say whether the picked letter is right; returns True if it is."""
        if self.picker.value is None:
            self.say("Pick a letter first.", error=True)
            return False
        picked = self.LETTERS.index(self.picker.value)
        if picked == self.answer:
            self.say(f"Right. {self.explanation}")
            return True
        hint = self.hints.get(picked, "Think again, or open the answer below the choices.")
        self.say(f"Not quite. {hint}", error=True)
        return False

    def renderings(self) -> list:
        items = "".join(
            f"<li><b>{self.LETTERS[n]}.</b> {inline(c)}</li>" for n, c in enumerate(self.choices)
        )
        right = self.LETTERS[self.answer]
        body = (
            f"<p><b>What do you think happens?</b> {inline(self.question)}</p>"
            f'<ul style="list-style:none">{items}</ul>'
            f"<details><summary>Reveal the answer</summary><p><b>{right}.</b> "
            f"{inline(self.explanation)}</p></details>"
        )
        return [html_block(body, "ddp-quiz")]


def quizzes_of(notebook: str) -> dict[str, dict]:
    """Every quiz of a notebook, as its data file holds them: ``{key: fields}``."""
    folder = resources.files(__package__) / "quizzes"
    path = folder / f"{notebook}.toml"
    if not path.is_file():
        have = sorted(p.name[: -len(".toml")] for p in folder.iterdir() if p.name.endswith(".toml"))
        raise FileNotFoundError(f"no quizzes for notebook {notebook!r}; these have some: {have}")
    return tomllib.loads(path.read_text(encoding="utf-8"))
