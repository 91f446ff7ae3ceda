"""The exercise checks judge what an answer does, against the reference (issue 42).

Three kinds of tests, each with answers of their own in tests/exercise_answers/:

* right answers written in styles the checks once misjudged must pass;
* wrong answers that return or print what a check looked for, without
  doing the work, must fail, with a message that says what the run showed;
* for every check changed here, the reference solution rewritten (other
  names, independent lines reordered, another import style) must pass.

A failure never shows a value the learner could type back in, and says
the same thing for the same answer every time.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from ddp_lesson import data, devices
from ddp_lesson.exercises import checks
from ddp_lesson.exercises.checks import answers, debugging, practice, script
from ddp_lesson.stages import stage

ANSWERS = Path(__file__).resolve().parent / "exercise_answers"
PLAN = devices.plan()
STARTING, CONNECTING, SPLITTING, SYNCING, TEARDOWN = (
    stage(key).title
    for key in ("spawning", "process_group", "data_division", "model_wrapping", "teardown")
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


def what_it_said(result) -> tuple:
    """A failure's words, without the count of tries its fix ends with."""
    return result.status, result.stage, result.expected, result.happened


def assert_fails(result, stage_title: str, fragment: str) -> None:
    assert result.status == checks.FAILED and result.stage == stage_title, str(result)
    assert fragment in str(result), str(result)


# -- right answers that the checks used to fail -------------------------------------
@pytest.mark.parametrize("text", ["(b)", "b)", " B ", "b.", "[b]", "B:"])
def test_a_letter_written_as_on_a_quiz_sheet_is_the_letter(text):
    assert checks.check_nprocs_zero(text), text
    assert checks.check_easy(text), text


@pytest.mark.parametrize(
    ("said", "key"),
    [
        ("ddp_setup", "process_group"),
        ("init_process_group", "process_group"),
        ("Destroy_Process_Group", "teardown"),
        ("destroy process group", "teardown"),
        ("data_division", "data_division"),
    ],
)
def test_stage_names_written_with_underscores_are_understood(said, key):
    assert answers.stage_named(said) == key


def test_a_ddp_subclass_that_forwards_attributes_is_a_ddp_wrapper():
    assert checks.check_wrap(ANSWERS / "wrap_forwarding_subclass.py")


def test_a_store_hosted_by_the_answer_itself_is_a_right_group():
    assert checks.check_process_group(ANSWERS / "pg_own_store.py")


def test_a_sampler_with_a_seed_of_its_own_splits_the_data_right():
    assert checks.check_sampler(ANSWERS / "sampler_own_seed.py")


# -- wrong answers that the checks used to pass --------------------------------------
@SEVERAL
def test_lists_worked_out_beside_a_plain_loader_fail():
    result = checks.check_sampler(ANSWERS / "sampler_lists_from_helper.py")
    assert_fails(result, SPLITTING, "which no item of it holds")
    assert "rank 0's lists" in result.happened, str(result)


def test_a_loader_with_another_batch_size_than_the_exercise_asks_fails():
    result = checks.check_sampler(ANSWERS / "sampler_pairs.py")
    assert_fails(result, SPLITTING, "its batch size is 2")


@SEVERAL
def test_epoch_orders_that_skip_the_loader_are_blamed_not_the_loader():
    result = checks.check_sampler(ANSWERS / "sampler_orders_from_dataset.py")
    assert_fails(result, SPLITTING, "although the loader's sampler is a DistributedSampler")
    assert result.fix.startswith("epoch_orders"), str(result)


def test_parameter_names_written_in_by_hand_fail_without_showing_the_right_ones():
    result = checks.check_unused(function("practice_unused_listed.py", "params_without_grad"))
    assert_fails(result, SYNCING, "the same names as in the first run")
    assert "second output" in result.happened, str(result)
    # what the second run expects is never shown, nor the first's beyond the answer itself
    assert "head.weight" not in str(result) and "head.bias" not in str(result), str(result)


def test_a_table_of_the_listed_cases_written_in_by_hand_fails():
    table = {(32, 1): 32, (32, 2): 64, (16, 4): 64, (64, 8): 512, (8, 3): 24}

    def plan_batches(per_rank, world_size, base_lr=0.1, base_batch=32):
        together = table.get((per_rank, world_size), per_rank)
        return together, base_lr * together / base_batch

    result = checks.check_global_batch(plan_batches)
    assert_fails(result, SPLITTING, "global_batch = ")
    assert any(f"for {p} images per rank on {w} rank(s)" in result.happened
               for p, w in practice.UNLISTED_CASES), str(result)  # fmt: skip


@SEVERAL
def test_every_rank_evaluating_the_whole_test_set_through_its_tensors_fails():
    result = checks.check_evaluate(ANSWERS / "practice_evaluate_all_tensors.py")
    assert_fails(result, SPLITTING, f"every rank gave the model all {len(data.digits('test'))}")


def test_an_accuracy_written_in_by_hand_fails():
    result = checks.check_evaluate(ANSWERS / "practice_evaluate_typed.py")
    assert_fails(result, CONNECTING, "returned 0.8412, which is not the share")


def test_selecting_the_gpu_after_the_group_fails():
    result = checks.check_launchers(ANSWERS / "launchers_set_device_late.py")
    assert_fails(result, CONNECTING, "only after init_process_group")


def test_gradients_changed_after_ddps_average_fail():
    result = checks.check_wrap(ANSWERS / "wrap_halved_gradients.py")
    assert_fails(result, SYNCING, "differ from that average by up to")


def test_an_optimizer_built_for_another_model_fails():
    result = checks.check_ddp_script(ANSWERS / "script_optimizer_of_another_model.py")
    # the doctor's run sees it first (its words), or the check's own first steps do
    said = ("updates none of the parameters DDP wraps", "the optimizer held 0 of the 6")
    assert result.stage == SYNCING and any(s in result.happened for s in said), str(result)
    assert "line 37:" in result.fix, str(result)


@SEVERAL
def test_a_loss_divided_by_the_world_size_on_top_of_ddp_fails():
    result = checks.check_ddp_script(ANSWERS / "script_loss_over_world_size.py")
    assert_fails(result, SYNCING, f"were {1 / PLAN.world_size:.3g} times that average")


@SEVERAL
def test_gradients_are_compared_for_a_batch_whose_images_were_standardised():
    result = checks.check_ddp_script(ANSWERS / "script_standardised_loss_over_world_size.py")
    assert_fails(result, SYNCING, f"were {1 / PLAN.world_size:.3g} times that average")
    right = checks.check_ddp_script(ANSWERS / "script_standardised.py")
    assert right, str(right)


def test_a_port_written_into_the_script_fails_at_its_spawn_call():
    result = checks.check_ddp_script(ANSWERS / "script_fixed_port.py")
    assert_fails(result, STARTING, "main was given port 29517 at each of 3 starts")
    assert "mp.spawn(main, args=(n, PORT, args.epochs)" in result.fix, str(result)


def test_a_loop_that_trains_one_epoch_short_fails_at_its_loop():
    result = checks.check_ddp_script(ANSWERS / "script_epochs_from_one.py")
    assert_fails(result, SPLITTING, "to train 3 epochs")
    assert "went through its DistributedSampler 2 time(s)" in result.happened, str(result)
    assert "for epoch in range(1, epochs)" in result.fix, str(result)


def test_a_gpu_selected_after_the_group_fails_though_this_machine_has_none():
    result = checks.check_ddp_script(ANSWERS / "script_set_device_late.py")
    assert_fails(result, CONNECTING, "only after init_process_group")
    assert "(given a GPU of its own)" in result.happened, str(result)


def test_a_group_released_only_when_nothing_raises_fails():
    result = checks.check_ddp_script(ANSWERS / "script_release_without_finally.py")
    assert_fails(result, TEARDOWN, "had not been released")
    assert "dist.destroy_process_group()" in result.fix, str(result)


def test_an_error_caught_and_not_raised_again_fails():
    result = checks.check_ddp_script(ANSWERS / "script_error_swallowed.py")
    assert_fails(result, TEARDOWN, "the error was caught and not raised again")


@SEVERAL
def test_every_rank_logging_fails_at_the_line_that_logs():
    result = checks.check_ddp_script(ANSWERS / "script_every_rank_logs.py")
    assert_fails(result, script.LOG, "rank 1 printed or logged")
    assert "logging.warning(" in result.happened, str(result)


def test_hooks_that_all_reduce_the_loop_s_last_parameter_are_told_so():
    result = checks.check_hooks(ANSWERS / "inside_late_binding.py")
    assert_fails(result, SYNCING, "more than once and never that of")
    assert "register the hook on every parameter" not in result.fix, str(result)


# -- the reference rewritten passes every check changed here -------------------------
@pytest.mark.parametrize(
    ("check", "answer"),
    [
        ("check_process_group", "pg_reference_rewritten.py"),
        ("check_sampler", "sampler_reference_rewritten.py"),
        ("check_wrap", "wrap_reference_rewritten.py"),
        ("check_evaluate", "practice_evaluate_rewritten.py"),
        ("check_accumulate", "practice_accumulate_rewritten.py"),
        ("check_launchers", "launchers_reference_rewritten.py"),
        ("check_ddp_script", "script_reference_rewritten.py"),
        ("check_ddp_script", "script_in_a_bounded_launch.py"),
        ("check_hooks", "inside_reference_rewritten.py"),
    ],
)
def test_the_reference_rewritten_passes(check, answer):
    result = getattr(checks, check)(ANSWERS / answer)
    assert result, str(result)


def test_the_reference_rewritten_passes_the_unused_check():
    assert checks.check_unused(function("practice_unused_rewritten.py", "params_without_grad"))


def test_the_reference_rewritten_passes_the_global_batch_check():
    def plan_batches(per_rank, world_size, base_lr=0.1, base_batch=32):
        together = world_size * per_rank
        return together, together / base_batch * base_lr

    assert checks.check_global_batch(plan_batches)


# -- feedback from evidence ------------------------------------------------------------
@pytest.mark.fixed_port
def test_a_failure_says_the_same_for_the_same_answer():
    path = ANSWERS / "pg_fixed_port.py"
    first, again = (checks.check_process_group(path) for _ in range(2))
    assert not first and what_it_said(first) == what_it_said(again), (str(first), str(again))


@SEVERAL
def test_the_sampler_check_shows_no_rank_s_real_list():
    result = checks.check_sampler(ANSWERS / "sampler_no_set_epoch.py")
    assert_fails(result, SPLITTING, "nothing told it that the epoch changed")
    for size in (10, 13):
        for epoch in (0, 1):
            for share in data.sampler_partition(size, PLAN.world_size, epoch=epoch):
                assert str(share) not in str(result), str(result)


def test_the_global_batch_check_shows_what_the_answer_gave_not_the_right_number():
    def plan_batches(per_rank, world_size, base_lr=0.1, base_batch=32):
        return per_rank, base_lr

    result = checks.check_global_batch(plan_batches)
    assert "global_batch = 32" in result.happened, str(result)
    assert "64" not in str(result), str(result)


def test_a_start_without_mp_spawn_is_not_told_about_its_mp_spawn_call():
    import torch.multiprocessing as mp

    def start(main, world_size, port):
        mp.start_processes(main, (world_size, port), 1, start_method="spawn")

    result = checks.check_spawn(start, PLAN.world_size)
    assert not result and "the mp.spawn call" not in result.fix, str(result)


def test_the_unused_check_shows_positions_as_given_not_the_names():
    def positions(model, loss):
        trainable = [p for p in model.parameters() if p.requires_grad]
        loss.backward()
        return [i for i, p in enumerate(trainable) if p.grad is None]

    result = checks.check_unused(positions)
    assert "aux.weight" not in str(result) and "positions, not names" in str(result), str(result)
    assert debugging.RUNS[0] in result.happened, str(result)


# -- messages that say only what the run showed ----------------------------------------
# Each answer here (exercise_answers/msg_*.py) once drew a message that was false or
# pointed elsewhere: a broadcast into copies called skipped, a device picked from the
# global rank blamed on joining the group, a wrong denominator called counts never
# combined, the check's own harness named to the learner, and finish() blamed for what
# attach_hooks handed it. Each test asserts the false words are gone, the true ones there.
def assert_fails_at(result, stage_title: str) -> None:
    assert result.status == checks.FAILED and result.stage == stage_title, str(result)


@SEVERAL
def test_a_broadcast_into_copies_is_said_to_have_run_into_copies():
    """The broadcasts ran; they filled clones, and the model kept each rank's start."""
    path = ANSWERS / "msg_hooks_broadcast_into_copies.py"
    result = checks.check_hooks(path)
    assert_fails_at(result, SYNCING)
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
    assert_fails_at(result, SYNCING)
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
    assert_fails_at(result, CONNECTING)
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
    assert_fails_at(result, CONNECTING)
    assert "counted its own part only" not in str(result), str(result)
    assert "must combine what they counted" not in str(result), str(result)
    assert "above 1" in result.happened, result.happened
    assert "divided by that rank's own number of images" in result.happened, result.happened
    assert "divided by" in result.fix and "?" in result.fix, result.fix


@SEVERAL
def test_a_start_one_process_short_is_told_in_the_learner_s_terms():
    """The message names what start() asked for, never the check's own launch block."""
    result = checks.check_spawn(function("msg_spawn_one_short.py", "start"), PLAN.world_size)
    assert_fails_at(result, STARTING)
    assert "launch.bounded" not in str(result), str(result)
    assert "bounded" not in str(result), str(result)
    short = PLAN.world_size - 1
    assert f"start() asked for {short} process" in result.happened, result.happened
    assert f"(nprocs={short})" in result.happened, result.happened
    assert f"world_size is {PLAN.world_size}" in result.happened, result.happened
    assert "how many processes" in result.fix, result.fix


def test_a_quoted_launch_error_keeps_the_rank_and_line_not_where_its_traceback_is_kept():
    # the learner calling a check holds no exception: "its .rank_traceback" is not theirs
    from ddp_lesson import launch
    from ddp_lesson.exercises.checks import base

    message = launch.errors.raised(
        0, 'Traceback:\n  File "/x/workers/w.py", line 3, in main\nTypeError: str expected', []
    )
    assert ".rank_traceback" in message
    quoted = base.quote(launch.LaunchError(message, 0))
    assert "rank 0 raised TypeError: str expected" in quoted and "line 3" in quoted, quoted
    assert "rank_traceback" not in quoted, quoted
