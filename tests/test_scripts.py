"""The scripts a learner copies (``scripts/``): plain PyTorch, each a small diff of the last.

``single_device.py`` is where the course starts, ``ddp_template.py`` the
template it becomes under torchrun, ``ddp_spawn.py`` the DDP script the core
path builds (``mp.spawn``), ``ddp_train.py`` the take-away of
``06_full_script`` (``torchrun`` or ``mp.spawn``, a checkpoint to resume
from). Each runs for real here, as ``python FILE`` and under ``torchrun
--standalone --nproc-per-node=2`` (the course's bounded versions of both);
so do their edges: a bad argument refused before any process starts, a
checkpoint that cannot be used, one with nothing left to train, rank 0
alone deciding where a run resumes, and a signal to the parent alone.
"""

from __future__ import annotations

import ast
import os
import runpy
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
from waiting import wait_until

from ddp_lesson import launch

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
ORDER = ["single_device", "ddp_template", "ddp_spawn", "ddp_train"]
TRAIN = SCRIPTS / "ddp_train.py"

pytestmark = pytest.mark.usefixtures("no_leftovers")


def rank0_log(output: str) -> list[str]:
    return [
        line
        for line in output.splitlines()
        if line.startswith(("epoch ", "test accuracy", "resuming from"))
        or line.endswith(": nothing left to train")
    ]


@pytest.fixture
def started_by_scripts():
    """The processes that a script of ``scripts/`` started while the test ran.

    A watcher looks every 50 ms at the test's descendants whose command line
    names a file of ``scripts/``, and keeps the pids of their children: a
    rank lives for seconds (it imports torch), so none goes unseen.
    """
    seen: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        me = psutil.Process()
        while not done.wait(0.05):
            try:
                for process in me.children(recursive=True):
                    if str(SCRIPTS) in " ".join(process.cmdline()):
                        seen.update(p.pid for p in process.children(recursive=True))
            except psutil.Error:  # a process ended while it was looked at
                continue

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    yield seen
    done.set()
    watcher.join()


def refused(script: Path, *args: object) -> tuple[str, str]:
    """Run ``python script args``, which must fail; return its message and its output."""
    with pytest.raises(launch.LaunchError) as failed:
        # a refusal comes before any process starts: the bound only stops a hang
        launch.run_script(script, *args, timeout_s=60)
    return str(failed.value), failed.value.output


def saved_checkpoint(path: Path, epoch: int) -> None:
    """Write a checkpoint as ``ddp_train.py`` does, of its untrained network, after ``epoch``."""
    import torch

    network = runpy.run_path(str(TRAIN))["network"]  # defines the functions, runs nothing
    model = network()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}
    torch.save(state, path)


def functions(name: str) -> dict[str, str]:
    """Each top-level function of a script, without its docstring, as source."""
    found = {}
    for node in ast.parse((SCRIPTS / f"{name}.py").read_text()).body:
        if isinstance(node, ast.FunctionDef):
            if ast.get_docstring(node) is not None:
                node.body = node.body[1:]
            found[node.name] = ast.unparse(node)
    return found


def test_the_folder_holds_the_four_scripts_and_nothing_else():
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
    assert resumed[0] == f"resuming from {checkpoint} at epoch 1", resumed
    assert [line[:13] for line in resumed[1:]] == ["epoch 1: last", "test accuracy"], resumed


USAGE_ERROR = "expected a whole number of 1 or more, got"


@pytest.mark.parametrize(
    ("name", "args", "error"),
    [
        ("ddp_train", ["--epochs", "0"], f"argument --epochs: {USAGE_ERROR} '0'"),
        ("ddp_train", ["--epochs", "-1"], f"argument --epochs: {USAGE_ERROR} '-1'"),
        ("ddp_train", ["--epochs", "abc"], f"argument --epochs: {USAGE_ERROR} 'abc'"),
        ("ddp_train", ["--batch-size", "0"], f"argument --batch-size: {USAGE_ERROR} '0'"),
        ("ddp_train", ["--nprocs", "0"], f"argument --nprocs: {USAGE_ERROR} '0'"),
        ("ddp_spawn", ["--epochs", "0"], f"argument --epochs: {USAGE_ERROR} '0'"),
        ("ddp_spawn", ["--epochs", "abc"], f"argument --epochs: {USAGE_ERROR} 'abc'"),
        ("ddp_spawn", ["--batch-size", "-3"], f"argument --batch-size: {USAGE_ERROR} '-3'"),
    ],
)
def test_a_bad_number_is_one_line_before_any_process_starts(
    name, args, error, tmp_path, started_by_scripts
):
    if name == "ddp_train":  # a checkpoint of its own, never one in the current folder
        args = [*args, "--checkpoint", tmp_path / "checkpoint.pt"]
    message, output = refused(SCRIPTS / f"{name}.py", *args)
    assert "exited with code 2" in message, message
    # argparse's usage, then one line that says what is wrong
    lines = [line for line in output.splitlines() if not line.startswith(("usage:", " "))]
    assert lines == [f"{name}.py: error: {error}"], output
    assert not started_by_scripts, "the script started processes before it refused"


def unwritable_folder(tmp_path: Path) -> Path:
    """A folder no file can be written in, for this user (root writes past permissions)."""
    if os.geteuid() == 0:
        return Path("/sys")  # sysfs: even root creates no file there
    folder = tmp_path / "read-only"
    folder.mkdir(mode=0o555)
    return folder


@pytest.mark.parametrize("where", ["missing", "read-only", "a file"])
def test_a_checkpoint_folder_that_takes_no_file_is_one_line_before_any_process_starts(
    where, tmp_path, started_by_scripts
):
    folder = {
        "missing": tmp_path / "missing",
        "read-only": unwritable_folder(tmp_path),
        "a file": tmp_path / "file",
    }[where]
    (tmp_path / "file").write_text("not a folder\n")
    checkpoint = folder / "checkpoint.pt"
    message, output = refused(TRAIN, "--epochs", "1", "--checkpoint", checkpoint)
    assert "exited with code 2" in message, message
    lines = [line for line in output.splitlines() if not line.startswith(("usage:", " "))]
    assert len(lines) == 1, output
    assert lines[0].startswith(
        f"ddp_train.py: error: --checkpoint {checkpoint}: cannot write in {folder} ("
    ), lines
    assert lines[0].endswith("): create it or pick another folder"), lines
    assert not started_by_scripts, "the script started processes before it refused"


@pytest.mark.parametrize("damage", ["cut short", "not torch.save's", "another network's"])
def test_a_checkpoint_that_cannot_be_used_is_one_line_naming_it(
    damage, tmp_path, started_by_scripts
):
    import torch

    checkpoint = tmp_path / "checkpoint.pt"
    saved_checkpoint(checkpoint, epoch=0)
    whole = checkpoint.read_bytes()
    if damage == "cut short":  # a copy that stopped half way
        checkpoint.write_bytes(whole[: len(whole) // 2])
    elif damage == "not torch.save's":
        checkpoint.write_bytes(b"\x00\x01 not a checkpoint " * 100)
    else:  # the same keys, another model's weights
        other = torch.nn.Linear(64, 10)
        state = {"model": other.state_dict(), "optimizer": {}, "epoch": 3}
        torch.save(state, checkpoint)
    message, output = refused(TRAIN, "--epochs", "2", "--checkpoint", checkpoint)
    assert "exited with code 1" in message, message
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith(f"cannot resume from {checkpoint}: "), lines
    assert lines[0].endswith("; delete it or pass another --checkpoint"), lines
    assert not started_by_scripts, "the script started processes before it refused"


def test_a_finished_checkpoint_trains_nothing_and_says_so(tmp_path):
    checkpoint = tmp_path / "checkpoint.pt"
    saved_checkpoint(checkpoint, epoch=1)  # epochs 0 and 1 are done
    before = checkpoint.read_bytes()
    log = rank0_log(
        launch.run_script(TRAIN, "--epochs", "2", "--checkpoint", checkpoint, timeout_s=240)
    )
    # no epoch trained: the saved network is tested as it is
    assert log[0] == f"{checkpoint} is at epoch 2 of 2: nothing left to train", log
    assert [line[:13] for line in log[1:]] == ["test accuracy"], log
    assert checkpoint.read_bytes() == before, "the checkpoint changed, yet nothing was trained"


#: ddp_train.py, with each rank in a folder of its own (rank0/, rank1/): two
#: machines of a cluster, without a shared folder, started in the same path.
OWN_FOLDERS = f"""
import os, runpy, sys
os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "rank" + os.environ["RANK"]))
sys.argv[0] = {str(TRAIN)!r}
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def test_rank_0_alone_decides_where_a_run_resumes(tmp_path):
    """Rank 1 sees no checkpoint where rank 0 sees one: both still resume at epoch 1.

    Were each rank to read the file itself, rank 1 would train an epoch more
    than rank 0 and wait for ever in a collective rank 0 never joins.
    """
    for rank in (0, 1):
        (tmp_path / f"rank{rank}").mkdir()
    saved_checkpoint(tmp_path / "rank0" / "checkpoint.pt", epoch=0)
    script = tmp_path / "own_folders.py"
    script.write_text(OWN_FOLDERS)
    run = launch.torchrun(
        script, "--epochs", "2", "--checkpoint", "checkpoint.pt", nproc_per_node=2, timeout_s=240
    )
    log = rank0_log(run.outputs[0])
    assert log[0] == "resuming from checkpoint.pt at epoch 1", log
    assert [line[:13] for line in log[1:]] == ["epoch 1: last", "test accuracy"], log
    assert not any((tmp_path / "rank1").iterdir()), "rank 1 wrote a checkpoint: only rank 0 may"


@pytest.mark.parametrize("name", ["ddp_train", "ddp_spawn"])
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_to_the_parent_alone_stops_every_rank(name, signum, tmp_path):
    """``kill -INT PARENT`` (or a process manager's SIGTERM) stops the ranks, not only the parent.

    The script runs as a learner starts it, ``python FILE``, in a session of
    its own so that the signal reaches the parent alone, never its group.
    """
    log = tmp_path / "output.txt"
    command = [sys.executable, str(SCRIPTS / f"{name}.py"), "--epochs", "1000"]
    if name == "ddp_train":
        command += ["--checkpoint", str(tmp_path / "checkpoint.pt")]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # the ranks' lines reach the file at once
    with open(log, "wb") as out:
        parent = subprocess.Popen(
            command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=env
        )
    try:
        # the ranks train once rank 0 has printed its first epoch
        wait_until(lambda: "epoch 0:" in log.read_text(), 180, "the ranks' first epoch")
        ranks = psutil.Process(parent.pid).children(recursive=True)
        os.kill(parent.pid, signum)

        def running() -> list[psutil.Process]:
            alive = []
            for process in ranks:
                try:
                    if process.status() != psutil.STATUS_ZOMBIE:
                        alive.append(process)
                except psutil.NoSuchProcess:
                    pass
            return alive

        wait_until(lambda: not running(), 60, f"every rank to end after {signum.name}")
        assert parent.wait(timeout=60) != 0, log.read_text()
        assert f"{signum.name}: stopped every rank" in log.read_text(), log.read_text()
    finally:
        try:
            os.killpg(parent.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        parent.wait(timeout=60)
