"""The exercises of 12_batches, 13_evaluation and 14_debugging, checked by behaviour.

Every check fails at least two wrong answers (mistakes a learner makes) with
the stage that owns the fix, and passes a right answer written differently
from the solution. File answers live in tests/exercise_answers/practice_*.py.
"""

from __future__ import annotations

import collections
import math
from pathlib import Path

import pytest
import torch

from ddp_lesson import devices
from ddp_lesson.exercises import checks
from ddp_lesson.exercises.checks import answers, practice
from ddp_lesson.stages import stage

ANSWERS = Path(__file__).resolve().parent / "exercise_answers"
CONNECTING, SPLITTING, SYNCING = (
    stage(key).title for key in ("process_group", "data_division", "model_wrapping")
)

pytestmark = pytest.mark.usefixtures("no_leftovers")

#: For answers that are right on one rank and wrong on several (a collective some ranks
#: skip, a sum over the ranks).
SEVERAL_RANKS = pytest.mark.skipif(
    devices.plan().world_size < 2, reason="right on one rank: nothing to wait for or add up"
)


@pytest.fixture(autouse=True)
def fresh_tries():
    """Every test starts with no wrong tries counted (a check shows the fix after a few)."""
    answers.forget()
    yield
    answers.forget()


def assert_fails(result, stage_title: str, fragment: str) -> None:
    assert result.status == checks.FAILED and result.stage == stage_title, str(result)
    assert fragment in str(result), str(result)


# -- 12, exercise 1: the global batch and the learning rate ---------------------------
def batches_forgets_world(per_rank, world_size, base_lr=0.1, base_batch=32):
    return per_rank, base_lr * per_rank / base_batch


def batches_scales_by_ranks(per_rank, world_size, base_lr=0.1, base_batch=32):
    return per_rank * world_size, base_lr * world_size


def batches_right(per_rank, world_size, base_lr=0.1, base_batch=32):
    factor = (per_rank / base_batch) * world_size
    return world_size * per_rank, factor * base_lr


def batches_stub(per_rank, world_size, base_lr=0.1, base_batch=32):
    raise NotImplementedError("your code here")


Plan = collections.namedtuple("Plan", "global_batch lr")


def batches_square_root(per_rank, world_size, base_lr=0.1, base_batch=32):
    # another style, and another rule: a named tuple, the square-root scaling rule
    grown = Plan(per_rank * world_size, None)
    return grown._replace(lr=base_lr * math.sqrt(grown.global_batch / base_batch))


def batches_whole_factor(per_rank, world_size, base_lr=0.1, base_batch=32):
    # another style: how many whole base batches the global batch holds (floor division)
    total = per_rank * world_size
    return total, base_lr * (total // base_batch)


@pytest.mark.parametrize(
    ("answer", "stage_title", "fragment"),
    [
        (batches_forgets_world, SPLITTING, "how many images does one step follow?"),
        # the global batch is right: the mistake is the learning rate, which no stage owns
        (batches_scales_by_ranks, practice.RATE, "which is base_lr times the world size alone"),
        (batches_whole_factor, practice.RATE, "rounded down to a whole number"),
        (batches_square_root, practice.RATE, "grows by the factor the batch grew by"),
    ],
)
def test_check_global_batch_fails_wrong_answers(answer, stage_title, fragment):
    result = checks.check_global_batch(answer)
    assert_fails(result, stage_title, fragment)
    assert "global_batch /" not in str(result) and "* world_size" not in str(result)


def test_check_global_batch_shows_the_line_on_the_third_try_or_on_request():
    def plan_batches(per_rank, world_size, base_lr=0.1, base_batch=32):
        return per_rank * world_size, base_lr * world_size  # scaled by the ranks

    line = "lr = base_lr * global_batch / base_batch"
    said = [checks.check_global_batch(plan_batches).fix for _ in range(3)]
    assert [line in fix for fix in said] == [False, False, True], said
    assert "after 2 more tries" in said[0] and "after 1 more try" in said[1], said

    def plan_batches(per_rank, world_size, base_lr=0.1, base_batch=32):  # noqa: F811
        return per_rank * world_size, base_lr * per_rank * world_size / base_batch

    assert checks.check_global_batch(plan_batches)  # fixed: the count starts afresh

    def plan_batches(per_rank, world_size, base_lr=0.1, base_batch=32):  # noqa: F811
        return per_rank * world_size, base_lr * world_size

    assert line not in checks.check_global_batch(plan_batches).fix
    assert line in checks.check_global_batch(plan_batches, reveal=True).fix


def test_check_global_batch_passes_a_right_answer_and_spots_stubs():
    assert checks.check_global_batch(batches_right)
    assert checks.check_global_batch(batches_stub).status == checks.NOT_ATTEMPTED


# -- 12, exercise 2: accumulation with no_sync() ---------------------------------------
@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        ("practice_accumulate_sync_every.py", "4 all-reduces of the whole gradient"),
        # the backwards sit in no_sync(), the forwards did not: the reading of no_sync() is
        # the forward's
        ("practice_accumulate_forward_outside.py", "is each of those forwards inside it"),
        ("practice_accumulate_unscaled.py", "a step 4 times as large"),
        ("practice_accumulate_never_sync.py", "DDP's own gradient exchange never ran"),
        ("practice_accumulate_cleared_each.py", "zero_grad() ran 3 time(s) after a backward"),
        ("practice_accumulate_grads_kept.py", "were still in .grad when the second began"),
        pytest.param(
            "practice_accumulate_sync_first.py",
            "DDP's all-reduce ran in backward 1 of 4",
            marks=SEVERAL_RANKS,
        ),
        pytest.param(
            "practice_accumulate_over_ranks.py",
            "times too small, with 4 micro-batches",
            marks=SEVERAL_RANKS,
        ),
    ],
)
def test_check_accumulate_fails_wrong_answers(answer, fragment):
    assert_fails(checks.check_accumulate(ANSWERS / answer), SYNCING, fragment)


def test_check_accumulate_passes_a_right_answer():
    assert checks.check_accumulate(ANSWERS / "practice_accumulate_flag.py")


def test_check_accumulate_of_a_stub_or_missing_file_is_not_attempted(tmp_path):
    stub = tmp_path / "stub.py"
    stub.write_text(
        "def accumulate_step(model, optimizer, micro_batches):\n"
        "    raise NotImplementedError('your code here')\n"
    )
    assert checks.check_accumulate(stub).status == checks.NOT_ATTEMPTED
    missing = checks.check_accumulate(tmp_path / "nowhere.py")
    assert missing.status == checks.NOT_ATTEMPTED and "%%writefile" in str(missing)


# -- 12, exercise 3: seeds for shuffling and for augmentation ---------------------------
@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        ("practice_seeds_sampler_per_rank.py", "the same seed on every rank"),
        ("practice_seeds_same_generator.py", "ranks drew the same noise"),
        ("practice_seeds_from_clock.py", "drew other noise than the first's"),
        ("practice_seeds_fixed_order.py", "another seed, another order"),
        ("practice_seeds_rank_times_seed.py", "the same noise from a loader built with seed"),
        ("practice_seeds_in_the_rank.py", "loaded in the rank's own process"),
        # its noise is the same on every rank because no worker draws it: say that
        ("practice_seeds_generator_without_workers.py", "loaded in the rank's own process"),
    ],
)
def test_check_seeds_fails_wrong_answers(answer, fragment):
    assert_fails(checks.check_seeds(ANSWERS / answer), SPLITTING, fragment)


def test_check_seeds_passes_a_right_answer():
    assert checks.check_seeds(ANSWERS / "practice_seeds_worker_init.py")


# -- 13, exercise 1: evaluation on every rank ------------------------------------------
@pytest.mark.parametrize(
    ("answer", "stage_title", "fragment"),
    [
        ("practice_evaluate_local.py", CONNECTING, "on 359 test images, per rank:"),
        ("practice_evaluate_sampler.py", SPLITTING, "went through the model more than once"),
        ("practice_evaluate_mean.py", CONNECTING, "the mean of the ranks' accuracies"),
        pytest.param(
            "practice_evaluate_one_rank_broadcasts.py",
            SPLITTING,
            "rank 1 gave the model none of them",
            marks=SEVERAL_RANKS,
        ),
        # gloo's own time limit ends rank 0's wait: the check still says where to look
        pytest.param(
            "practice_evaluate_rank0_sums.py",
            CONNECTING,
            "leaves the others waiting",
            marks=SEVERAL_RANKS,
        ),
    ],
)
def test_check_evaluate_fails_wrong_answers(answer, stage_title, fragment):
    assert_fails(checks.check_evaluate(ANSWERS / answer), stage_title, fragment)


@SEVERAL_RANKS
def test_check_evaluate_says_which_images_overlap_without_naming_a_sampler_never_used():
    result = checks.check_evaluate(ANSWERS / "practice_evaluate_edges_overlap.py")
    assert_fails(result, SPLITTING, "1 image(s) went through the model more than once")
    assert "DistributedSampler" not in result.happened, str(result)


@pytest.mark.skipif(devices.plan().backend == "nccl", reason="judged on real GPUs there")
def test_check_evaluate_fails_counts_reduced_on_the_cpu_where_gpus_run_nccl():
    # right on this machine (gloo takes CPU tensors); given a stand-in GPU per rank, the
    # tensor all-reduced is still made on the CPU
    result = checks.check_evaluate(ANSWERS / "practice_evaluate_counts_on_the_cpu.py")
    assert_fails(result, CONNECTING, "the tensor handed to all_reduce at line 17 was on the CPU")


def test_check_evaluate_passes_a_right_answer():
    assert checks.check_evaluate(ANSWERS / "practice_evaluate_slices.py")


# -- 14, exercise 1: parameters without a gradient -------------------------------------
def unused_before_backward(model, loss):
    return [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]


def unused_with_frozen(model, loss):
    loss.backward()
    return [name for name, p in model.named_parameters() if p.grad is None]


def unused_zero_gradients(model, loss):
    loss.backward()
    return [name for name, p in model.named_parameters() if p.grad.abs().sum() == 0]


def unused_right(model, loss):
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [p for _, p in named], allow_unused=True)
    return {name for (name, _), grad in zip(named, grads, strict=True) if grad is None}


def unused_positions(model, loss):
    # another style: positions among the trainable parameters (the indices DDP's error
    # also prints), found with torch.autograd.grad instead of backward
    trainable = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, trainable, allow_unused=True)
    return [i for i, g in enumerate(grads) if g is None]


def unused_without_clearing(model, loss):
    # right on a fresh model; gradients left by an earlier backward hide the unused ones
    loss.backward()
    return [name for name, p in model.named_parameters() if p.requires_grad and p.grad is None]


@pytest.mark.parametrize(
    ("answer", "fragment"),
    [
        (unused_without_clearing, "still held gradients from an earlier backward"),
        (unused_before_backward, "was loss.backward() called"),
        (unused_with_frozen, "never train (requires_grad=False)"),
        (unused_zero_gradients, "AttributeError"),
        # the right parameters, as positions: the message says names are compared
        (unused_positions, "positions, not names: the check compares names"),
    ],
)
def test_check_unused_fails_wrong_answers(answer, fragment):
    assert_fails(checks.check_unused(answer), SYNCING, fragment)


def test_check_unused_never_passes_an_empty_answer_when_ddp_named_nothing(monkeypatch):
    from ddp_lesson.exercises.checks import debugging

    # a torch whose error the check cannot read: nothing expected, so nothing may pass
    monkeypatch.setattr(debugging.base, "launch_probe", lambda *a: ([{"named": [[], []]}], None))
    result = checks.check_unused(lambda model, loss: [])
    assert result.status == checks.FAILED, str(result)
    assert "DDP's error named none" in result.happened, str(result)


def test_check_unused_says_positions_are_the_right_parameters_without_naming_them():
    result = checks.check_unused(unused_positions)
    assert "they are the right parameters, counted in the parameters that train" in (
        result.happened
    ), str(result)
    assert "p.grad is None]" not in str(result), "the first try does not show the line"


def test_check_unused_passes_a_right_answer():
    result = checks.check_unused(unused_right)
    assert result and "aux.weight" in str(result), str(result)


# -- messages that say only what the run showed --------------------------------------
def answer_function(file: str, function: str):
    """The function ``function`` of ``file``, an answer file in tests/exercise_answers."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(Path(file).stem, ANSWERS / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, function)


def test_check_unused_says_an_empty_list_holds_no_names():
    result = checks.check_unused(answer_function("msg4_unused_zero_sum.py", "params_without_grad"))
    assert_fails(result, SYNCING, "returned []: no names at all")
    assert "what marks a parameter the loss did not use?" in str(result), str(result)
    assert "none of these is a parameter's name" not in str(result), str(result)


@SEVERAL_RANKS
def test_check_process_group_says_the_ranks_may_meet_at_other_ports():
    result = checks.check_process_group(ANSWERS / "msg4_pg_port_per_rank.py")
    assert_fails(result, CONNECTING, "may be meeting at different addresses or ports")
    assert "not every rank reached init_process_group" not in str(result), str(result)
    assert "msg4_pg_port_per_rank.py, line 10 (`os.environ.update(" in result.fix, result.fix


@SEVERAL_RANKS
def test_check_evaluate_names_the_rank_that_returned_none():
    result = checks.check_evaluate(ANSWERS / "msg4_evaluate_rank0_returns.py")
    assert_fails(result, CONNECTING, "rank 1's evaluate returned None")
    assert "TypeError" not in str(result) and "the line the error names" not in str(result)


def test_check_checkpoint_says_what_the_file_holds_and_what_load_returned():
    result = checks.check_checkpoint(ANSWERS / "msg4_checkpoint_next_epoch_twice.py")
    assert_fails(result, SYNCING, "load_checkpoint returned 2, from a checkpoint written after")
    assert "whose 'epoch' entry is 1" in result.happened, str(result)
    assert "the one after the saved one" not in str(result), str(result)
    assert "return state" not in str(result), "the first try does not show the line"


def test_check_seeds_says_which_call_drew_other_noise_without_a_cause():
    result = checks.check_seeds(ANSWERS / "msg4_seeds_generator_kept.py")
    assert_fails(result, SPLITTING, "make_loader was called twice with the same arguments")
    assert "never from the time" not in str(result), str(result)


@SEVERAL_RANKS
def test_check_accumulate_gives_the_step_it_saw_without_a_cause():
    result = checks.check_accumulate(ANSWERS / "msg4_accumulate_by_images.py")
    assert_fails(result, SYNCING, "times too small, with 4 micro-batches on each of")
    assert "number of ranks" not in str(result), str(result)


def test_a_rank_stopped_while_it_connected_is_read_as_ranks_not_meeting():
    from ddp_lesson import launch
    from ddp_lesson.exercises.checks import stage_workers

    # under load, the rank that looks for the group elsewhere may be stopped mid-connect
    error = launch.LaunchError(
        "rank 1 raised torch.distributed.DistNetworkError: Interrupted system call\n"
        "  at exercise_answers/msg4_pg_port_per_rank.py, line 11, in ddp_setup: "
        "dist.init_process_group("
    )
    error.rank = 1
    path = ANSWERS / "msg4_pg_port_per_rank.py"
    result = stage_workers._not_met("check_process_group", path, devices.plan(), error)
    assert result is not None and "may be meeting at different addresses or ports" in result.fix
    assert "rank 1 was still trying to reach the group when it was stopped" in result.happened


def test_check_evaluate_names_an_accuracy_no_image_of_the_call_went_into(tmp_path):
    # a copy, so the number it remembers lands in a folder of its own
    answer = tmp_path / "remembered.py"
    answer.write_text((ANSWERS / "practice_evaluate_remembered.py").read_text())
    result = checks.check_evaluate(answer)
    assert_fails(result, SPLITTING, "no rank gave the model any of them, yet evaluate returned")
    assert "where does the number it returns come from" in result.fix, str(result)
