"""The widgets, driven by setting their controls as a learner would.

Expected values are computed here straight from torch's DistributedSampler,
not through the course's own helpers, so a widget that drew something else
would fail.
"""

from __future__ import annotations

import html
import json
import os
import re
from pathlib import Path

import pytest
import torch
from torch.utils.data import TensorDataset
from torch.utils.data.distributed import DistributedSampler

from ddp_lesson import devices, launch, reports
from ddp_lesson import views as widgets
from ddp_lesson.views import runs as probes

ROOT = Path(__file__).resolve().parents[1]


def sampler_says(size, world_size, epoch=0, shuffle=True, seed=0, drop_last=False):
    dataset = TensorDataset(torch.arange(size))
    out = []
    for rank in range(world_size):
        sampler = DistributedSampler(
            dataset, num_replicas=world_size, rank=rank, shuffle=shuffle, seed=seed,
            drop_last=drop_last,
        )  # fmt: skip
        sampler.set_epoch(epoch)
        out.append(list(sampler))
    return out


def set_controls(view, **values):
    for name, value in values.items():
        control = view.controls[name]
        control.value = value if isinstance(value, bool) else str(value)


def said(view) -> str:
    """The message a view shows the learner, as text."""
    return html.unescape(view.message.value)


class FakeHandle:
    """Stands in for a display handle: records what the view replaced its output with."""

    def __init__(self):
        self.shown = []

    def update(self, obj):
        self.shown.append(obj)


# -- sampler explorer ------------------------------------------------------------------
SETTINGS = [
    dict(size=10, world_size=2, epoch=0, shuffle=True, seed=0, drop_last=False),
    dict(size=11, world_size=3, epoch=2, shuffle=True, seed=5, drop_last=False),
    dict(size=11, world_size=3, epoch=1, shuffle=True, seed=0, drop_last=True),
    dict(size=7, world_size=2, epoch=4, shuffle=False, seed=0, drop_last=False),
    dict(size=23, world_size=4, epoch=3, shuffle=True, seed=1, drop_last=False),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "-".join(map(str, s.values())))
def test_explorer_draws_what_the_sampler_gives(settings):
    explorer = widgets.SamplerExplorer()
    set_controls(explorer, **settings)
    assert explorer.message.value == ""
    expected = sampler_says(**settings)
    assert explorer.partition == expected
    drawn = explorer.renderings()[0].data
    for rank, indices in enumerate(expected):
        assert f"rank {rank}: {indices}" in drawn


def test_explorer_marks_padding_exactly_where_the_sampler_padded():
    explorer = widgets.SamplerExplorer()
    set_controls(explorer, size=11, world_size=4, epoch=2, seed=3)
    # DistributedSampler pads by repeating the start of the epoch's permutation
    permutation = torch.randperm(11, generator=torch.Generator().manual_seed(3 + 2)).tolist()
    padded = sorted(permutation[: 12 - 11])
    assert explorer.marks == {"repeated": padded, "dropped": []}
    drawn = explorer.renderings()[0].data
    framed = drawn.count("border:2px solid #d00000")
    holders = sum(index in part for part in explorer.partition for index in padded)
    assert framed == holders == 2 * len(padded)


def test_explorer_marks_what_drop_last_skips():
    explorer = widgets.SamplerExplorer()
    set_controls(explorer, size=11, world_size=3, drop_last=True)
    taken = {i for part in sampler_says(11, 3, drop_last=True) for i in part}
    assert explorer.marks["dropped"] == sorted(set(range(11)) - taken)
    assert len(explorer.marks["dropped"]) == 11 % 3
    assert "text-decoration:line-through" in explorer.renderings()[0].data


def test_without_set_epoch_every_epoch_repeats_epoch_zero():
    explorer = widgets.SamplerExplorer(size=10, world_size=2, epoch=3)
    with_calls = dict(explorer.history)
    assert len(set(map(tuple, with_calls.values()))) == 4  # four different orders
    set_controls(explorer, set_epoch=False)
    assert explorer.partition == sampler_says(10, 2, epoch=0)
    assert set(map(tuple, explorer.history.values())) == {tuple(sampler_says(10, 2)[0])}
    assert "the same order every epoch" in explorer.renderings()[0].data


def test_a_control_change_replaces_the_shown_drawing():
    explorer = widgets.SamplerExplorer(size=10, world_size=2)
    handle = FakeHandle()
    explorer._handles.append([handle])
    set_controls(explorer, world_size=3)
    assert len(handle.shown) == 1
    assert "rank 2: " in handle.shown[0].data
    set_controls(explorer, world_size="0")  # bad input: nothing is replaced
    assert len(handle.shown) == 1


def _too_many() -> str:
    return str(devices.MAX_CPU_PROCESSES_PER_CORE * devices.usable_cores() + 1)


BAD_INPUTS = [
    ("world_size", "0", "mp.spawn(..., nprocs=0) silently starts nothing"),
    ("world_size", "-2", "world size must be >= 1"),
    ("world_size", _too_many, "more CPU processes than this machine can run"),
    ("world_size", "two", "world size must be a whole number, got 'two'"),
    ("world_size", "2.5", "world size must be a whole number, got '2.5'"),
    ("world_size", "", "world size must be a whole number, got ''"),
    ("size", "1", "data-set size 1 is smaller than world size 2"),
    ("size", "0", "data-set size must be 1 or more, got 0"),
    ("size", "5000", "more than the 200 columns this grid can draw"),
    ("size", "1e3", "data-set size must be a whole number"),
    ("seed", "-1", "seed must be 0 or more, got -1"),
    ("seed", "0x10", "seed must be a whole number"),
    ("epoch", "-3", "epoch must be 0 or more, got -3"),
    ("epoch", "one", "epoch must be a whole number, got 'one'"),
]


@pytest.mark.parametrize(("control", "value", "says"), BAD_INPUTS)
def test_explorer_explains_bad_input_and_keeps_its_drawing(control, value, says):
    explorer = widgets.SamplerExplorer(size=10, world_size=2)
    before = explorer.partition
    value = value() if callable(value) else value
    set_controls(explorer, **{control: value})  # must not raise
    assert says in said(explorer)
    assert explorer.partition == before
    set_controls(explorer, **{control: {"world_size": 2, "size": 10}.get(control, 0)})
    assert explorer.message.value == ""


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"world_size": 0}, "world size must be >= 1"),
        ({"size": 1, "world_size": 2}, "smaller than world size"),
        ({"seed": -1}, "seed must be 0 or more"),
    ],
)
def test_explorer_refuses_bad_starting_values(kwargs, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        widgets.SamplerExplorer(**kwargs)


def test_verify_compares_the_drawing_with_real_ranks(no_leftovers):
    explorer = widgets.SamplerExplorer(size=11, world_size=2, epoch=1, set_epoch=False)
    result = explorer.verify(timeout_s=90)
    assert explorer.verified, result.data
    assert "Verified by a real launch" in result.data
    for report in explorer.launched:
        assert report["num_replicas"] == 2
        assert report["sampler_rank"] == report["rank"]
        assert report["orders"] == [explorer.partition[report["rank"]]] * 2
    # a drawing that disagreed with the ranks would be caught
    explorer._partition_at = lambda epoch: sampler_says(11, 2, epoch=epoch + 7)
    result = explorer.verify(timeout_s=90)
    assert not explorer.verified
    assert "iterated something else" in result.data


# -- progress ----------------------------------------------------------------------------
def test_progress_bars_follow_the_ranks(no_leftovers):
    import torch.multiprocessing as mp

    bars = widgets.ProgressBars()
    with launch.bounded(2, timeout_s=90) as run:
        bars.follow(run, "epoch")
        mp.spawn(
            probes.partition, args=(2, run.port, 10, [0, 1, 2], True, 0, False, True), nprocs=2
        )
    bars.wait()
    assert run.progress() == {0: (3, 3), 1: (3, 3)}
    shown = [
        (row.children[0].value, row.children[0].max, row.children[1].value)
        for row in bars.box.children
    ]
    assert shown == [(3, 3, "3/3 epochs")] * 2
    assert all(row.children[0].bar_style == "success" for row in bars.box.children)


def test_send_progress_outside_a_launch_does_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(reports.REPORT_DIR_ENV, raising=False)
    reports.send_progress(0, 1, 2)
    monkeypatch.setenv(reports.REPORT_DIR_ENV, str(tmp_path))
    reports.send_progress(1, 1, 4)
    reports.send_progress(0, 2, 2)
    assert reports.read_progress(tmp_path) == {0: (2, 2), 1: (1, 4)}
    with pytest.raises(ValueError, match="total must be a whole number >= 1"):
        reports.send_progress(0, 1, 0)


def test_progress_refuses_anything_but_a_run():
    with pytest.raises(TypeError, match="launch.bounded"):
        widgets.progress("run")


# -- gradient sync check -----------------------------------------------------------------
def test_gradient_sync_measures_ddp_against_no_ddp(no_leftovers):
    sync = widgets.GradientSync(world_size=2, steps=2).run(timeout_s=90)
    verdict = sync.verdict()
    assert verdict["steps"] == 2
    assert verdict["in_sync"] and verdict["synced_gradients"] == 0.0
    assert verdict["ddp_parameters"] == 0.0
    assert verdict["own_gradients"] > 0.0  # different batches, different own gradients
    assert verdict["plain_diverged"] and verdict["plain_parameters"] > 0.0
    first, second = sync.reports
    assert first["synced_norms"] == second["synced_norms"]
    assert first["own_norms"] != second["own_norms"]
    assert first["names"][-1] == "linear_relu_stack.4.bias"
    page, figure = sync.renderings()
    assert "identical on every rank" in page.data
    assert page.data.count('class="ddp-sync-row"') == len(first["names"])
    assert len(figure.axes) == 2


def test_gradient_sync_explains_bad_input():
    sync = widgets.GradientSync(world_size=2, steps=3)
    set_controls(sync, steps="0")
    assert "steps must be 1 or more, got 0" in said(sync)
    set_controls(sync, steps="500")
    assert "steps must be 50 or fewer" in said(sync)
    set_controls(sync, steps="3", world_size="0")
    assert "world size must be >= 1" in said(sync)
    assert sync.settings == {"world_size": 2, "steps": 3}
    with pytest.raises(ValueError, match="call run"):
        sync.verdict()


# -- rank assignment ---------------------------------------------------------------------
def test_rank_view_predicts_then_shows_what_ranks_reported(no_leftovers):
    view = widgets.RankAssignment(world_size=2)
    view.control.value = "3"
    assert [row["rank"] for row in view.predicted()] == [0, 1, 2]
    plan = devices.plan()
    assert {row["device"] for row in view.predicted()} == {str(plan.device(r)) for r in range(3)}
    assert "cuda:2 (nccl)" in view.renderings()[0].data
    view.control.value = "2"
    reported = view.launch(timeout_s=90)
    assert [r["rank"] for r in reported] == [0, 1]
    assert {r["backend"] for r in reported} == {plan.backend}
    assert len({r["pid"] for r in reported}) == 2 and os.getpid() not in {
        r["pid"] for r in reported
    }
    page = view.renderings()[0].data
    assert "As predicted" in page and page.count("yes (not the notebook)") == 2


def test_rank_view_says_when_reports_disagree_with_the_prediction():
    view = widgets.RankAssignment(world_size=2)
    view.with_reports([{"rank": 0, "device": "cpu"}, {"rank": 0, "device": "cpu"}])
    assert "Not as predicted" in view.renderings()[0].data


@pytest.mark.parametrize(
    ("value", "says"),
    [("0", "mp.spawn(..., nprocs=0) silently starts nothing"), ("x", "whole number")],
)
def test_rank_view_explains_bad_world_sizes(value, says):
    view = widgets.RankAssignment(world_size=2)
    view.control.value = value
    assert says in said(view)
    assert view.world_size == 2


def test_rank_view_refuses_reports_without_rank_or_device():
    view = widgets.RankAssignment(world_size=2)
    with pytest.raises(ValueError, match="view.with_reports"):
        view.with_reports([{"rank": 0}])


# -- quiz --------------------------------------------------------------------------------
def make_quiz():
    return widgets.Quiz(
        "Where does `rank` come from?",
        ["an environment variable", "mp.spawn", "nowhere"],
        answer=1,
        explanation="mp.spawn passes it.",
        hints={0: "Not with mp.spawn."},
    )


def test_quiz_checks_answers():
    quiz = make_quiz()
    assert not quiz.check() and "Pick a letter first" in said(quiz)
    quiz.picker.value = "A"
    quiz.check_button.click()
    assert "Not quite. Not with mp.spawn." in said(quiz)
    quiz.picker.value = "C"
    assert not quiz.check() and "open the answer" in said(quiz)
    quiz.picker.value = "B"
    assert quiz.check() and "Right. mp.spawn passes it." in said(quiz)


def test_quiz_reveal_is_readable_without_a_kernel():
    page = make_quiz().renderings()[0].data
    assert "<code>rank</code>" in page
    assert "<details><summary>Reveal the answer</summary><p><b>B.</b>" in page


QUIZ_FILES = sorted((ROOT / "ddp_lesson" / "views" / "quizzes").glob("*.toml"))


def _quiz_cells(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if "Quiz" in "".join(c["source"])]


@pytest.mark.parametrize("path", QUIZ_FILES, ids=lambda p: p.stem)
def test_every_quiz_of_a_data_file_is_well_formed_and_asked_by_its_notebook(path):
    from ddp_lesson.views.quiz import quizzes_of

    notebook = ROOT / "notebooks" / f"{path.stem}.ipynb"
    assert notebook.exists(), f"{path.name} names no lesson notebook"
    asked = " ".join(_quiz_cells(notebook))
    for key in quizzes_of(path.stem):
        quiz = widgets.Quiz.named(path.stem, key)  # the constructor's own checks
        assert set(quiz.hints) <= set(range(len(quiz.choices))) - {quiz.answer}, key
        assert f'Quiz.named("{path.stem}", "{key}")' in asked, f"{key} is never asked"


def test_no_notebook_shows_a_quiz_answer_above_its_buttons():
    for notebook in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        for source in _quiz_cells(notebook):
            if "Quiz(" in source or "Quiz.named(" in source:
                assert not re.search(r"\b(answer|explanation|hints)\s*=", source), notebook.name
                assert "Quiz(" not in source, f"{notebook.name}: a quiz written in its cell"


def test_an_unknown_quiz_names_what_there_is():
    with pytest.raises(KeyError, match="top_level_line"):
        widgets.Quiz.named("02_spawn", "no_such_quiz")
    with pytest.raises(FileNotFoundError, match="02_spawn"):
        widgets.Quiz.named("99_nothing", "x")


@pytest.mark.parametrize(
    ("choices", "answer", "says"),
    [(["only one"], 0, "2 to 8 answers"), ("ab", 0, "list of 2 to 8"), (["a", "b"], 2, "0-1")],
)
def test_quiz_refuses_malformed_questions(choices, answer, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        widgets.Quiz("?", choices, answer, "because")


def test_launch_button_fills_in_the_shown_view(no_leftovers):
    view = widgets.RankAssignment(world_size=2)
    handle = FakeHandle()
    view._handles.append([handle])
    view.launch_button.click()
    assert not view.launch_button.disabled
    assert "the ranks reported; their process ids" in said(view)
    assert len(handle.shown) == 1 and "As predicted" in handle.shown[0].data


def test_a_failed_launch_from_a_button_becomes_a_message(monkeypatch):
    sync = widgets.GradientSync(world_size=2, steps=2)

    def fails(timeout_s=90):
        raise launch.LaunchError("rank 1 raised RuntimeError: planted")

    monkeypatch.setattr(sync, "run", fails)
    sync.run_button.click()  # must not raise
    assert "rank 1 raised RuntimeError: planted" in said(sync)
    assert not sync.run_button.disabled
