"""The quiz: a "What do you think happens?" question with choices, a check and a reveal."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ipywidgets as ipw

from .base import View, html_block, inline


class Quiz(View):
    """A "What do you think happens?" question: choices, a check, and a reveal.

    The question, the lettered choices and a collapsed answer are plain HTML
    (readable without a kernel); the widget lets the learner pick a letter
    and check it.

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
