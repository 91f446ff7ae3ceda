"""Exercises: generated from the solutions, and checked by behaviour.

For every exercise, wrong answers (mistakes a learner makes) must fail with
the stage that owns the fix, and a right answer written differently from the
solution must pass. File answers live in tests/exercise_answers/.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from ddp_lesson import checks, devices, exercises

ROOT = Path(__file__).resolve().parent.parent
ANSWERS = Path(__file__).resolve().parent / "exercise_answers"
PLAN = devices.plan()
CONNECTING, SPLITTING, SYNCING = checks.STAGES[1], checks.STAGES[2], checks.STAGES[3]

pytestmark = pytest.mark.usefixtures("no_leftovers")


@pytest.fixture
def short_deadline(monkeypatch):
    """For answers whose ranks never meet: end the check's launch sooner."""
    monkeypatch.setattr(checks, "CHECK_TIMEOUT_S", 15)


# -- one source -------------------------------------------------------------------
def test_exercises_are_generated_byte_identically_from_solutions():
    assert exercises.generate(ROOT, check=True) == 0


def test_exercise_cells_contain_no_solution():
    for path in (ROOT / "exercises").glob("*.ipynb"):
        text = path.read_text()
        assert exercises.BEGIN not in text and exercises.END not in text
        assert "YOUR CODE HERE" in text


def test_a_learners_edited_exercise_is_never_overwritten(tmp_path, capsys):
    shutil.copytree(
        ROOT / "solutions", tmp_path / "solutions", ignore=shutil.ignore_patterns("workers")
    )
    assert exercises.generate(tmp_path) == 0
    mine = tmp_path / "exercises" / "02_spawn.ipynb"
    notebook = json.loads(mine.read_text())
    notebook["cells"][3]["source"] = "world_size = 2  # my answer\n"
    mine.write_text(json.dumps(notebook))
    before = mine.read_text()
    # the solution changes, and the generator runs again
    solution = tmp_path / "solutions" / "02_spawn.ipynb"
    solution.write_text(solution.read_text().replace("Exercise 1: the world size", "Exercise 1"))
    assert exercises.generate(tmp_path) == 1
    assert mine.read_text() == before
    assert "has your edits, so it was left as it is" in capsys.readouterr().out


def test_an_untouched_exercise_is_regenerated(tmp_path):
    shutil.copytree(
        ROOT / "solutions", tmp_path / "solutions", ignore=shutil.ignore_patterns("workers")
    )
    exercises.generate(tmp_path)
    solution = tmp_path / "solutions" / "06_full_script.ipynb"
    solution.write_text(solution.read_text().replace("only one process trains", "one process"))
    assert exercises.generate(tmp_path) == 0
    assert "one process" in (tmp_path / "exercises" / "06_full_script.ipynb").read_text()


def test_unbalanced_markers_are_reported():
    with pytest.raises(ValueError, match="has no ### END SOLUTION"):
        exercises.strip_solutions("### BEGIN SOLUTION\nx = 1\n", "cell 3")
    with pytest.raises(ValueError, match="has no ### BEGIN SOLUTION before it"):
        exercises.strip_solutions("x = 1\n### END SOLUTION\n", "cell 3")


# -- stage 1: starting processes --------------------------------------------------
def start_right(main, world_size, port):
    mp.spawn(main, args=(world_size, port), nprocs=world_size)


def start_one_process(main, world_size, port):
    mp.spawn(main, args=(world_size, port), nprocs=1)


def start_rank_in_args(main, world_size, port):
    mp.spawn(main, args=(0, world_size, port), nprocs=world_size)


def start_positional(main, world_size, port):  # right, written differently
    mp.start_processes(main, (world_size, port), world_size, start_method="spawn")


def start_stub(main, world_size, port):
    raise NotImplementedError("your code here")


@pytest.mark.parametrize(
    ("start", "world_size", "fragment"),
    [
        (start_one_process, PLAN.world_size, "nprocs must be world_size"),
        (start_rank_in_args, PLAN.world_size, "args=(world_size, port) holds only"),
        (start_right, 0, "torch.cuda.device_count() is 0"),
    ],
)
def test_check_spawn_fails_wrong_answers(start, world_size, fragment):
    result = checks.check_spawn(start, world_size)
    assert result.status == checks.FAILED and result.stage == "starting processes", str(result)
    assert fragment in str(result), str(result)


def test_check_spawn_passes_a_right_answer_and_spots_stubs():
    assert checks.check_spawn(start_positional, PLAN.world_size)
    assert checks.check_spawn(start_stub, PLAN.world_size).status == checks.NOT_ATTEMPTED
    assert checks.check_spawn(start_right, ...).status == checks.NOT_ATTEMPTED


@pytest.mark.parametrize(
    ("check", "right", "wrong"),
    [
        (checks.check_nprocs_zero, " B ", ["a", "c"]),
        (checks.check_easy, "b", ["a", "c"]),
    ],
)
def test_multiple_choice_checks(check, right, wrong):
    assert check(right)
    for answer in wrong:
        assert check(answer).status == checks.FAILED
    assert check(...).status == checks.NOT_ATTEMPTED


# -- stage 2: connecting processes --------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "stage", "fragment"),
    [
        ("pg_fixed_port.py", CONNECTING, "MASTER_PORT=str(port)"),
        ("pg_every_rank_zero.py", CONNECTING, ""),
        ("pg_no_destroy.py", "teardown", "destroy_process_group()"),
    ],
)
@pytest.mark.usefixtures("short_deadline")
def test_check_process_group_fails_wrong_answers(answer, stage, fragment):
    started = time.monotonic()
    result = checks.check_process_group(ANSWERS / answer)
    assert time.monotonic() - started < checks.CHECK_TIMEOUT_S + 15
    assert result.status == checks.FAILED and result.stage == stage, str(result)
    assert fragment in str(result)


def test_check_process_group_passes_a_right_answer():
    assert checks.check_process_group(ANSWERS / "pg_tcp_init_method.py")


def test_check_of_a_missing_file_says_which_cell_to_run(tmp_path):
    result = checks.check_process_group(tmp_path / "nowhere.py")
    assert result.status == checks.NOT_ATTEMPTED and "%%writefile" in str(result)


# -- stage 3: splitting the data ----------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        ("sampler_missing.py", "every rank iterated all 10 items"),
        ("sampler_no_set_epoch.py", "set_epoch(epoch)"),
    ],
)
def test_check_sampler_fails_wrong_answers(answer, fragment):
    result = checks.check_sampler(ANSWERS / answer)
    assert result.status == checks.FAILED and result.stage == SPLITTING, str(result)
    assert fragment in str(result)


def test_check_sampler_passes_a_right_answer():
    assert checks.check_sampler(ANSWERS / "sampler_separate_variable.py")


@pytest.mark.parametrize(
    ("predicted", "fragment"),
    [([2, 5, 8], "padding repeats [0, 1]"), ([2, 5, 8, 9], "[2, 5, 8, 1]")],
)
def test_check_sampler_prediction_fails_wrong_answers(predicted, fragment):
    result = checks.check_sampler_prediction(
        predicted, size=10, world_size=3, rank=2, shuffle=False
    )
    assert result.status == checks.FAILED and result.stage == SPLITTING
    assert fragment in str(result)


def test_check_sampler_prediction_passes_a_right_answer():
    assert checks.check_sampler_prediction(
        (2, 5, 8, 1), size=10, world_size=3, rank=2, shuffle=False
    )


# -- stage 4: synchronising the model -------------------------------------------------
@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        ("wrap_missing.py", "a plain NeuralNetwork"),
        pytest.param(
            "wrap_gpu_form_on_cpu.py",
            "device_ids=[rank] only when device.type == 'cuda'",
            marks=pytest.mark.skipif(PLAN.device_type == "cuda", reason="right on GPUs"),
        ),
    ],
)
def test_check_wrap_fails_wrong_answers(answer, fragment):
    result = checks.check_wrap(ANSWERS / answer)
    assert result.status == checks.FAILED and result.stage == SYNCING, str(result)
    assert fragment in str(result)


def test_check_wrap_passes_a_right_answer():
    assert checks.check_wrap(ANSWERS / "wrap_one_expression.py")


# -- fault finding ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("stage", "line"),
    [
        ("splitting the data", "sampler=DistributedSampler(train_dataset)"),
        ("starting processes", "model = DDP(model, device_ids=[rank])"),
    ],
)
def test_check_medium_fails_wrong_answers(stage, line):
    result = checks.check_medium(stage, line)
    assert result.status == checks.FAILED and result.stage == "starting processes"


def test_check_medium_passes_a_right_answer():
    assert checks.check_medium("Spawning", "nprocs=world_size in the mp.spawn call")
