"""check_spawn runs the notebook's world-size cell again as on machines with 0 to 3, and 8, GPUs.

A CPU machine shows one case of 02's rule (one process per GPU from two
GPUs up, else two CPU processes); a cell that is wrong on a one-GPU machine
only (``gpus or 2``) must fail here too, and right cells in other shapes,
or cells whose value does not follow the GPU count, must not.
"""

from __future__ import annotations

import os

import pytest
import torch.multiprocessing as mp
from IPython.core.interactiveshell import InteractiveShell

from ddp_lesson import devices
from ddp_lesson.exercises import checks
from ddp_lesson.exercises.checks import answers

pytestmark = [
    pytest.mark.usefixtures("no_leftovers"),
    pytest.mark.skipif(
        bool(os.environ.get(devices.WORLD_SIZE_ENV)), reason="another world size asked for"
    ),
]


def start(main, world_size, port):
    mp.spawn(main, args=(world_size, port), nprocs=world_size)


@pytest.fixture
def notebook():
    """An IPython shell, as a notebook's kernel has: its cells are in its history."""
    answers.forget()
    shell = InteractiveShell.instance()
    shell.run_cell("import torch", store_history=True).raise_error()
    yield shell
    InteractiveShell.clear_instance()
    answers.forget()


def checked(notebook, cell: str):
    notebook.run_cell(cell, store_history=True).raise_error()
    notebook.run_cell("print('another cell')", store_history=True).raise_error()
    return checks.check_spawn(start, notebook.user_ns["world_size"])


@pytest.mark.parametrize(
    "cell",
    [
        "gpus = torch.cuda.device_count()\nworld_size = gpus if gpus >= 2 else 2",
        "world_size = max(2, torch.cuda.device_count())",
        "n_gpus: int = torch.cuda.device_count()\nworld_size = n_gpus if n_gpus > 1 else 2",
        "world_size = 2  # not from the count: this machine's value is judged alone",
    ],
)
def test_a_right_world_size_cell_passes(notebook, cell):
    if devices.plan().world_size != 2 and "= 2  #" in cell:
        pytest.skip("a number written in is right on a CPU machine only")
    result = checked(notebook, cell)
    assert result.status == checks.PASSED, str(result)


@pytest.mark.parametrize(
    ("cell", "said"),
    [
        (
            "gpus = torch.cuda.device_count()\nworld_size = gpus or 2",
            "gave 2, 1, 2, 3, 8: 1 with 1 GPU",
        ),
        ("world_size = 2 if torch.cuda.device_count() < 4 else 4", "gave 2, 2, 2, 2, 4: 2 with 3"),
    ],
)
def test_a_cell_wrong_on_another_machine_fails_with_what_it_gave(notebook, cell, said):
    result = checked(notebook, cell)
    assert result.status == checks.FAILED and result.stage == "starting processes", str(result)
    assert said in result.happened, str(result)


def test_only_what_the_world_size_needs_is_run_again(notebook):
    # the cell also starts something with the world size: that line must not run five more times
    notebook.run_cell("started = []", store_history=True).raise_error()
    cell = (
        "gpus = torch.cuda.device_count()\n"
        "world_size = gpus or 2\n"
        "record = started.append(world_size)"
    )
    result = checked(notebook, cell)
    assert result.status == checks.FAILED, str(result)
    assert notebook.user_ns["started"] == [2]  # the learner's own run, once
