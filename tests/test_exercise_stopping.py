"""18_stopping_and_resizing's exercise: ``stop_everywhere`` judged by where each rank would stop.

Right answers in other styles pass; answers that decide on one rank's
flag, on rank 0's, on every flag at once, that call the collective only
when their own flag is up, or that stop at a step written in by hand
fail, each with what the run showed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ddp_lesson import devices
from ddp_lesson.exercises import checks
from ddp_lesson.exercises.checks import answers
from ddp_lesson.stages import stage

ANSWERS = Path(__file__).resolve().parent / "exercise_answers"
CONNECTING = stage("process_group").title
SEVERAL = pytest.mark.skipif(devices.plan().world_size < 2, reason="needs two ranks or more")
ON_CPU = pytest.mark.skipif(devices.plan().backend == "nccl", reason="judged on real GPUs there")

pytestmark = pytest.mark.usefixtures("no_leftovers")


@pytest.fixture(autouse=True)
def fresh_tries():
    answers.forget()
    yield
    answers.forget()


@pytest.mark.parametrize(
    "name",
    [
        "stop_right_gathered",
        "stop_right_summed",
        # the device asked of the group (get_backend, current_device), not handed in
        "stop_right_device_from_backend",
        # made beside a tensor on the device (its .device), then multiplied
        "stop_right_like_the_device_of",
    ],
)
def test_right_answers_pass(name):
    result = checks.check_stop_together(str(ANSWERS / f"{name}.py"))
    assert result.status == checks.PASSED, str(result)


@SEVERAL
@pytest.mark.parametrize(
    ("name", "fragment"),
    [
        ("stop_own_flag_only", "rank 0 would never stop"),
        ("stop_rank0_decides", "every rank would never stop"),
        ("stop_every_flag_needed", "every rank would never stop"),
        ("stop_collective_when_up", "left the group"),
        ("stop_typed_in", "every rank would stop at step 0"),  # right in case 1 only
        ("stop_exactly_one_vote", "every rank would never stop"),  # two flags at once
    ],
)
def test_wrong_answers_fail_with_what_the_run_showed(name, fragment):
    result = checks.check_stop_together(str(ANSWERS / f"{name}.py"))
    assert result.status == checks.FAILED and result.stage == CONNECTING, str(result)
    assert fragment in result.happened, str(result)
    again = checks.check_stop_together(str(ANSWERS / f"{name}.py"))
    assert (again.expected, again.happened) == (result.expected, result.happened)


@ON_CPU
def test_a_flag_made_on_the_cpu_fails_with_the_line_that_hands_it_to_nccl():
    # gloo takes a CPU tensor, so the plain run passes; given a stand-in GPU per rank, the
    # flag is still made on the CPU, which NCCL refuses
    result = checks.check_stop_together(str(ANSWERS / "stop_flag_on_the_cpu.py"))
    assert result.status == checks.FAILED and result.stage == CONNECTING, str(result)
    assert "the tensor handed to all_reduce at line 8 was on the CPU" in result.happened


def test_the_stub_is_not_attempted(tmp_path):
    stub = tmp_path / "stub.py"
    stub.write_text(
        "def stop_everywhere(stop_here, device):\n"
        '    """True on every rank as soon as any rank\'s stop_here is True."""\n'
        "    # YOUR CODE HERE\n"
        '    raise NotImplementedError("your code here")\n'
    )
    assert checks.check_stop_together(str(stub)).status == checks.NOT_ATTEMPTED
