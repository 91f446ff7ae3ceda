"""The scripts a learner copies (``scripts/``): plain PyTorch, each a small diff of the last.

``single_device.py`` is where the course starts, ``ddp_spawn.py`` the DDP
script the core path builds (``mp.spawn``), ``ddp_train.py`` the take-away
of ``06_full_script`` (``torchrun`` or ``mp.spawn``, a checkpoint to resume
from). Each runs for real here, as ``python FILE`` and under ``torchrun
--standalone --nproc-per-node=2`` (the course's bounded versions of both),
and 06's ``%%writefile workers/ddp_train.py`` must write exactly the file.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from ddp_lesson import launch, sources

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
ORDER = ["single_device", "ddp_spawn", "ddp_train"]
NOTEBOOK = sources.NOTEBOOKS / "06_full_script.ipynb"

pytestmark = pytest.mark.usefixtures("no_leftovers")


def rank0_log(output: str) -> list[str]:
    return [
        line
        for line in output.splitlines()
        if line.startswith(("epoch ", "test accuracy", "resumed from"))
    ]


def functions(name: str) -> dict[str, str]:
    """Each top-level function of a script, without its docstring, as source."""
    found = {}
    for node in ast.parse((SCRIPTS / f"{name}.py").read_text()).body:
        if isinstance(node, ast.FunctionDef):
            if ast.get_docstring(node) is not None:
                node.body = node.body[1:]
            found[node.name] = ast.unparse(node)
    return found


def test_the_folder_holds_the_three_scripts_and_nothing_else():
    assert sorted(p.stem for p in SCRIPTS.iterdir()) == sorted(ORDER)


@pytest.mark.parametrize("name", ORDER)
def test_a_script_needs_only_pytorch_scikit_learn_and_the_standard_library(name):
    modules = set()
    for node in ast.walk(ast.parse((SCRIPTS / f"{name}.py").read_text())):
        if isinstance(node, ast.Import):
            modules |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            modules.add((node.module or "").split(".")[0])
    assert modules - set(sys.stdlib_module_names) == {"torch", "sklearn"}


def test_the_scripts_share_their_data_and_model_word_for_word():
    first = functions(ORDER[0])
    for name in ORDER[1:]:
        for shared in ("digits", "network"):
            assert functions(name)[shared] == first[shared], f"{name}.py: {shared}() drifted"


@pytest.mark.parametrize("name", ["ddp_spawn", "ddp_train"])
def test_a_ddp_script_pauses_right_after_releasing_the_group(name):
    """A torch workaround (03_process_group): a gloo thread still frees the last collective.

    Without the pause the process aborted now and then at exit, as Python
    stopped that thread while it waited for Python's lock
    (``tools/exit_soak.py`` counts how runs end).
    """
    code = [
        line.strip()
        for line in (SCRIPTS / f"{name}.py").read_text().splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    released = [i for i, line in enumerate(code) if line.endswith("destroy_process_group()")]
    assert len(released) == 1, released
    assert code[released[0] + 1] == "time.sleep(0.05)", code[released[0] + 1]


def test_06_writes_exactly_the_committed_take_away_script():
    written = sources.writefile_cells(NOTEBOOK)["workers/ddp_train.py"]
    assert written.rstrip("\n") == (SCRIPTS / "ddp_train.py").read_text().rstrip("\n"), (
        "06_full_script's %%writefile workers/ddp_train.py and scripts/ddp_train.py differ: "
        "change both"
    )


def test_single_device_trains_alone_and_torchrun_runs_one_copy_per_process():
    alone = rank0_log(launch.run_script(SCRIPTS / "single_device.py", "--epochs", "1"))
    assert [line[:13] for line in alone] == ["epoch 0: last", "test accuracy"], alone
    run = launch.torchrun(SCRIPTS / "single_device.py", "--epochs", "1", nproc_per_node=2)
    copies = rank0_log(run.outputs[0])
    # two processes that never talk: each trains the whole data set and prints it all
    assert sorted(line[:13] for line in copies) == ["epoch 0: last"] * 2 + ["test accuracy"] * 2


def test_ddp_spawn_trains_under_python_and_points_torchrun_to_the_other_script():
    spawned = rank0_log(launch.run_script(SCRIPTS / "ddp_spawn.py", "--epochs", "1"))
    assert [line[:13] for line in spawned] == ["epoch 0: last", "test accuracy"], spawned
    with pytest.raises(launch.LaunchError) as refused:
        launch.torchrun(SCRIPTS / "ddp_spawn.py", "--epochs", "1", nproc_per_node=2)
    assert "run ddp_train.py under torchrun" in str(refused.value) + refused.value.output


def test_takeaway_trains_under_mp_spawn_and_resumes_under_torchrun(tmp_path):
    script = SCRIPTS / "ddp_train.py"
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
