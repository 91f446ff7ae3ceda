"""The take-away script of 06_full_script: plain PyTorch, run for real under both launchers.

The script is read from the notebook's ``%%writefile workers/ddp_train.py``
cell, so the test runs exactly what a learner copies.
"""

from __future__ import annotations

import ast
import sys

import pytest

from ddp_lesson import launch, sources

NOTEBOOK = sources.NOTEBOOKS / "06_full_script.ipynb"

pytestmark = pytest.mark.usefixtures("no_leftovers")


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "ddp_train.py"
    path.write_text(sources.writefile_cells(NOTEBOOK)["workers/ddp_train.py"])
    return path


def rank0_log(output: str) -> list[str]:
    return [
        line
        for line in output.splitlines()
        if line.startswith(("epoch ", "test accuracy", "resumed from"))
    ]


def test_takeaway_needs_only_pytorch_scikit_learn_and_the_standard_library(script):
    modules = set()
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            modules.add((node.module or "").split(".")[0])
    assert modules - set(sys.stdlib_module_names) == {"torch", "sklearn"}


def test_takeaway_trains_under_mp_spawn_and_resumes_under_torchrun(script, tmp_path):
    checkpoint = str(tmp_path / "checkpoint.pt")
    # python ddp_train.py: its own mp.spawn, one process per device, a free port
    spawned = rank0_log(
        launch.run_script(script, "--epochs", "1", "--checkpoint", checkpoint, timeout_s=240)
    )
    assert [line[:13] for line in spawned] == ["epoch 0: last", "test accuracy"], spawned
    # torchrun starts the processes; the checkpoint of epoch 0 is picked up
    run = launch.torchrun(
        script, "--epochs", "2", "--checkpoint", checkpoint, nproc_per_node=2, timeout_s=240
    )
    resumed = rank0_log(run.outputs[0])
    assert resumed[0] == f"resumed from {checkpoint} at epoch 1", resumed
    assert [line[:13] for line in resumed[1:]] == ["epoch 1: last", "test accuracy"], resumed
