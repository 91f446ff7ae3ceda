"""A check's message says only what the run showed, and nothing false.

Each answer here (tests/exercise_answers/msg_*.py) once drew a message that
was false or pointed elsewhere: a broadcast into copies called skipped, a
device picked from the global rank blamed on joining the group, a wrong
denominator called counts never combined, the check's own harness named to
the learner, and finish() blamed for what attach_hooks handed it. Every test
asserts that the false words are gone and that the true ones are there.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ddp_lesson import devices
from ddp_lesson.exercises import checks
from ddp_lesson.exercises.checks import answers
from ddp_lesson.stages import stage

ANSWERS = Path(__file__).resolve().parent / "exercise_answers"
PLAN = devices.plan()
STARTING, CONNECTING, SYNCING = (
    stage(key).title for key in ("spawning", "process_group", "model_wrapping")
)
SEVERAL = pytest.mark.skipif(PLAN.world_size < 2, reason="needs two ranks or more")

pytestmark = pytest.mark.usefixtures("no_leftovers")


@pytest.fixture(autouse=True)
def fresh_tries():
    """Every test starts with no wrong tries counted (a check reveals after a few)."""
    answers.forget()
    yield
    answers.forget()


def function(file: str, name: str):
    """The function ``name`` of the answer file ``file``."""
    spec = importlib.util.spec_from_file_location(Path(file).stem, ANSWERS / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def failed_at(result, stage_title: str) -> None:
    assert result.status == checks.FAILED and result.stage == stage_title, str(result)


@SEVERAL
def test_a_broadcast_into_copies_is_said_to_have_run_into_copies():
    """The broadcasts ran; they filled clones, and the model kept each rank's start."""
    path = ANSWERS / "msg_hooks_broadcast_into_copies.py"
    result = checks.check_hooks(path)
    failed_at(result, SYNCING)
    assert "skipped" not in str(result), str(result)
    assert "called dist.broadcast" in result.happened, result.happened
    assert "none of them on one of the model's own parameters or buffers" in result.happened
    assert "kept the parameters it started with" in result.happened, result.happened
    line = answers.line_of(path, "def broadcast_parameters(model):")
    assert result.fix.startswith(f"{path.name}, line {line} "), result.fix
    assert str(result) == str(checks.check_hooks(path)).replace("1 more try", "2 more tries")


@SEVERAL
def test_an_empty_copy_handed_to_finish_blames_attach_hooks_not_finish():
    """finish() got an empty list while the hooks filled another: attach_hooks is named."""
    path = ANSWERS / "msg_hooks_hands_back_new_list.py"
    result = checks.check_hooks(path)
    failed_at(result, SYNCING)
    assert "held 0 entries when finish() was called" in result.happened, result.happened
    finish = answers.line_of(path, "def finish(model, in_flight):")
    assert f"line {finish} " not in result.fix, result.fix
    attach = answers.line_of(path, "def attach_hooks(model):")
    hooks = answers.line_of(path, "param.register_post_accumulate_grad_hook(on_gradient)")
    assert any(f"line {n} " in result.fix for n in (attach, hooks)), result.fix
    assert "attach_hooks" in result.fix and "returns" in result.fix, result.fix


def test_a_device_picked_by_the_global_rank_is_told_about_the_device_not_the_group():
    """The group is joined right; the second node's process failed while picking its GPU."""
    path = ANSWERS / "msg_launchers_device_by_rank_helper.py"
    result = checks.check_launchers(path)
    failed_at(result, CONNECTING)
    assert "joins once, as its global rank" not in str(result), str(result)
    assert "the device follows the local rank" in result.fix, result.fix
    assert "LOCAL_RANK" in result.fix, result.fix
    assert "rank must be below world_size" in result.happened, result.happened
    line = answers.line_of(
        path, 'device = device_for(_which_gpu(), int(os.environ["LOCAL_WORLD_SIZE"]))'
    )
    assert f"line {line}" in result.fix, result.fix
    revealed = checks.check_launchers(path, reveal=True)
    assert "init_process_group(backend) with nothing else" not in str(revealed), str(revealed)
    assert 'device_for(int(os.environ["LOCAL_RANK"])' in revealed.fix, revealed.fix


@SEVERAL
def test_combined_right_answers_over_a_local_count_are_called_a_wrong_denominator():
    """The counts were combined; what they were divided by was one rank's images."""
    result = checks.check_evaluate(ANSWERS / "msg_evaluate_divides_by_own_count.py")
    failed_at(result, CONNECTING)
    assert "counted its own part only" not in str(result), str(result)
    assert "must combine what they counted" not in str(result), str(result)
    assert "above 1" in result.happened, result.happened
    assert "divided by that rank's own number of images" in result.happened, result.happened
    assert "divided by" in result.fix and "?" in result.fix, result.fix


@SEVERAL
def test_a_start_one_process_short_is_told_in_the_learner_s_terms():
    """The message names what start() asked for, never the check's own launch block."""
    result = checks.check_spawn(function("msg_spawn_one_short.py", "start"), PLAN.world_size)
    failed_at(result, STARTING)
    assert "launch.bounded" not in str(result), str(result)
    assert "bounded" not in str(result), str(result)
    short = PLAN.world_size - 1
    assert f"start() asked for {short} process" in result.happened, result.happened
    assert f"(nprocs={short})" in result.happened, result.happened
    assert f"world_size is {PLAN.world_size}" in result.happened, result.happened
    assert "how many processes" in result.fix, result.fix
