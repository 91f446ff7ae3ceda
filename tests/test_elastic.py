"""torchrun from the course: the lesson's stage-08 and stage-09 workers, launched for real.

The workers come straight from the notebooks' ``%%writefile`` cells, so
these tests check the code a learner reads. Every launch is bounded and
must leave nothing running (``no_leftovers``).
"""

from __future__ import annotations

import json
import socket
import sys
import time

import pytest
import torch
import torch.multiprocessing as mp
from torch.utils.data.distributed import DistributedSampler

from ddp_lesson import data, launch, reports, sources
from ddp_lesson.exercises import checks
from ddp_lesson.launch import elastic
from ddp_lesson.views import plots

pytestmark = pytest.mark.usefixtures("no_leftovers")

TRAIN_SIZE = 1438


@pytest.fixture
def workers(tmp_path, monkeypatch):
    """The notebooks' stage-08 and stage-09 files (and the SLURM script) in a scratch folder."""
    folder = tmp_path / "workers"
    folder.mkdir()
    for stage in ("08", "09"):
        (folder / f"stage_{stage}.py").write_text(sources.worker_source(stage))
    slurm = sources.writefile_cells(sources.NOTEBOOKS / "09_checkpoints.ipynb")
    (folder / "stage_09.slurm").write_text(slurm["workers/stage_09.slurm"])
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # mp.spawn's ranks import workers.stage_09
    yield folder
    for name in [m for m in sys.modules if m.split(".")[0] == "workers"]:
        del sys.modules[name]  # this test's package must not shadow a later test's


def expected_shard(rank: int, world_size: int, epoch: int) -> list[int]:
    sampler = DistributedSampler(
        data.digits("train"), num_replicas=world_size, rank=rank, shuffle=True, seed=0
    )
    sampler.set_epoch(epoch)
    return list(sampler)


def test_two_simulated_nodes_make_four_ranks_that_train_one_model(workers, listening):
    run = elastic.torchrun(
        "workers/stage_08.py", "--epochs", "2", nproc_per_node=2, nnodes=2, timeout_s=180
    )
    assert [r["rank"] for r in run.reports] == [0, 1, 2, 3]
    assert [r["local_rank"] for r in run.reports] == [0, 1, 0, 1]
    assert [r["node"] for r in run.reports] == [0, 0, 1, 1]
    shards = [r["indices"] for r in run.reports]
    # each rank iterated exactly what DistributedSampler gives global rank r of 4 (last epoch)
    assert shards == [expected_shard(r, 4, epoch=1) for r in range(4)]
    assert set().union(*shards) == set(range(TRAIN_SIZE))  # every image, on one node or the other
    handed_out = sum(len(s) for s in shards)
    assert handed_out == 1440  # padded up to a multiple of 4: two images twice, no more
    assert len(data.padding_of(shards, TRAIN_SIZE)["repeated"]) == handed_out - TRAIN_SIZE
    assert reports.max_abs_difference([r["params"] for r in run.reports]) == 0.0
    assert run.commands[0] == run.commands[1]  # every node runs the same command
    assert "--rdzv-endpoint=127.0.0.1:" in run.commands[0]
    assert listening and listening <= {"127.0.0.1"}, listening


def spawn_stage_09(worker, epochs: int, checkpoint: str, crash_after: int = -1) -> list[dict]:
    with launch.bounded(2, timeout_s=120) as run:
        mp.spawn(
            worker.main,
            args=(2, run.port, epochs, checkpoint, crash_after),
            nprocs=2,
        )
    return run.reports


def test_killed_after_epoch_k_resumes_to_the_uninterrupted_model(workers, tmp_path):
    import workers.stage_09 as worker

    full = spawn_stage_09(worker, 3, str(tmp_path / "full.pt"))
    crashed = str(tmp_path / "crashed.pt")
    with pytest.raises(launch.LaunchError, match="rank 1 was killed by SIGKILL"):
        spawn_stage_09(worker, 3, crashed, crash_after=0)
    assert torch.load(crashed)["epoch"] == 0  # what survived the kill
    resumed = spawn_stage_09(worker, 3, crashed)
    assert [r["resumed_at"] for r in resumed] == [1, 1]
    assert [r["accuracy"] for r in resumed] == [r["accuracy"] for r in full]
    gap = reports.max_abs_difference([r["params"] for r in full + resumed])
    assert gap == 0.0
    # and the check can fail: one epoch fewer is a different model
    shorter = spawn_stage_09(worker, 2, str(tmp_path / "short.pt"))
    assert reports.max_abs_difference([r["params"] for r in full + shorter]) > 0


def test_torchrun_restarts_a_killed_rank_and_resumes_from_the_checkpoint(
    workers, tmp_path, listening
):
    common = ("workers/stage_09.py", "--epochs", "2")
    full = elastic.torchrun(*common, "--checkpoint", str(tmp_path / "full.pt"))
    assert [r["rank"] for r in full.reports] == [0, 1]
    assert full.commands == [
        "torchrun --standalone --nproc-per-node=2 "
        f"workers/stage_09.py --epochs 2 --checkpoint {tmp_path / 'full.pt'}"
    ]
    restarted = elastic.torchrun(
        *common,
        "--checkpoint",
        str(tmp_path / "elastic.pt"),
        "--crash-after",
        "0",
        max_restarts=1,
        timeout_s=180,
    )
    assert restarted.restarts == [1]
    assert [(r["restarts"], r["resumed_at"]) for r in restarted.reports] == [(1, 1), (1, 1)]
    assert any("will restart worker group" in line for line in restarted.log("FAILED"))
    gap = reports.max_abs_difference([r["params"] for r in full.reports + restarted.reports])
    assert gap == 0.0
    # plain torchrun's stores listen on every interface ('::'); the course's runner binds
    # them to 127.0.0.1, in a first run and after a restart
    assert listening and listening <= {"127.0.0.1"}, listening


def test_a_crash_without_restarts_names_the_rank_and_its_error(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(
        "import os\n"
        "if os.environ['RANK'] == '1':\n"
        "    raise ValueError('rank one gives up')\n"
    )
    with pytest.raises(launch.LaunchError) as caught:
        elastic.torchrun(script, nproc_per_node=2, timeout_s=60)
    message = str(caught.value)
    assert "rank: 1 (local_rank: 1)" in message
    assert "ValueError: rank one gives up" in message
    assert "rank one gives up" in caught.value.output


def test_a_killed_rank_is_named_even_when_torchrun_names_the_rank_it_took_down(tmp_path):
    # torchrun's own report (torch's ChildFailedError) of a run where rank 1 was killed and
    # rank 0 raised at once because its peer vanished: both seen in the same second, and
    # torchrun's root cause is the earliest timestamp, rank 0 on a tie
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    error_file = tmp_path / "error.json"
    error_file.write_text(json.dumps({"message": {
        "message": "RuntimeError: Connection closed by peer",
        "extraInfo": {"py_callstack": "Traceback ...\nRuntimeError: Connection closed by peer",
                      "timestamp": str(int(time.time()) - 1)}}}))
    raised = ProcessFailure(local_rank=0, pid=11, exitcode=1, error_file=str(error_file))
    killed = ProcessFailure(local_rank=1, pid=12, exitcode=-9, error_file=str(tmp_path / "none"))
    report = ChildFailedError("stage_09.py", {0: raised, 1: killed}).format_msg()
    assert "rank      : 0 (local_rank: 0)" in report.split("Root Cause")[1]

    message = elastic.failure_text(elastic.TorchrunRun(["torchrun"], outputs=[report]), [1])
    assert "rank: 1 (local_rank: 1)" in message
    assert "exitcode: -9 (pid: N)" in message and "SIGKILL" in message
    assert "rank: 0" not in message and "Connection closed" not in message
    # without a killed rank, torchrun's root cause and its error stand
    alone = ChildFailedError("stage_09.py", {0: raised}).format_msg()
    message = elastic.failure_text(elastic.TorchrunRun(["torchrun"], outputs=[alone]), [1])
    assert "rank: 0 (local_rank: 0)" in message and "exitcode: 1 (pid: N)" in message


def test_torchrun_past_its_deadline_is_stopped_with_everything_it_started(tmp_path):
    script = tmp_path / "hangs.py"
    script.write_text("import time\ntime.sleep(3600)\n")
    deadline = 10
    started = time.monotonic()
    with pytest.raises(launch.LaunchTimeout, match="did not finish within 10 s"):
        elastic.torchrun(script, nproc_per_node=2, timeout_s=deadline)
    # stopped, not hung: the deadline plus the polite stop's grace, with a
    # margin for a busy machine (a bound on hanging, not a measure of speed)
    bound = deadline + 4 * launch.STOP_GRACE_S + 60
    took = time.monotonic() - started
    assert took < bound, f"torchrun past its {deadline} s deadline took {took:.0f} s to stop"


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"nproc_per_node": 0}, ValueError, "nproc_per_node"),
        ({"nproc_per_node": "2"}, TypeError, "nproc_per_node"),
        ({"nnodes": 0}, ValueError, "nnodes"),
        ({"max_restarts": -1}, ValueError, "max_restarts"),
        ({"nproc_per_node": 50}, ValueError, "more CPU processes than this machine"),
        ({"timeout_s": 0}, ValueError, "timeout_s"),
    ],
)
def test_bad_input_is_refused_before_anything_starts(workers, kwargs, error, words):
    with pytest.raises(error, match=words):
        elastic.torchrun("workers/stage_08.py", **kwargs)


def test_a_missing_worker_says_which_cell_writes_it(tmp_path):
    with pytest.raises(FileNotFoundError, match="run the %%writefile cell"):
        elastic.torchrun(tmp_path / "stage_08.py")


def test_a_loopback_store_refuses_a_busy_port_so_torchrun_joins_as_a_client():
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        with pytest.raises(RuntimeError, match="cannot listen on 127.0.0.1"):
            elastic.LoopbackTCPStore("127.0.0.1", holder.getsockname()[1], 1, True)


def test_simulated_nodes_get_their_own_gpus_or_none(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    envs, gpus, note = elastic._node_devices(2, 2)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["0,1", "2,3"]
    assert gpus == 4 and "own GPUs" in note
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    envs, gpus, note = elastic._node_devices(2, 2)
    assert [e["CUDA_VISIBLE_DEVICES"] for e in envs] == ["", ""]
    assert gpus == 0 and "CPU processes" in note
    assert elastic._node_devices(1, 1) == ([{}], 1, "")


def test_the_slurm_script_starts_the_worker_with_arguments_it_accepts(workers):
    import workers.stage_09 as worker

    result = checks.check_slurm(
        workers / "stage_09.slurm", "workers/stage_09.py", worker.arguments
    )
    assert result, result
    summary = result.note
    assert "nodes: 2, one torchrun on each" in summary
    assert "each rank runs: workers/stage_09.py --epochs 10 --checkpoint" in summary


@pytest.mark.parametrize(
    ("old", "new", "words"),
    [
        ("workers/stage_09.py", "workers/stage_08.py", "not workers/stage_09.py"),
        ("--epochs 10", "--epochs 10 --lr 0.1", "rejects its arguments"),
        ("--ntasks-per-node=1", "--ntasks-per-node=4", "would start 4 torchruns on each node"),
        ("--nproc-per-node=gpu", "--nproc-per-node=2", "not one rank per GPU"),
        ("srun torchrun", "torchrun", "first node only"),
        ('--nnodes="$SLURM_NNODES"', "--nnodes=3", "not the allocation's --nodes"),
        ("export TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1", "", "can wait for ever"),
    ],
)
def test_a_slurm_script_that_disagrees_with_the_worker_is_refused(workers, old, new, words):
    import workers.stage_09 as worker

    path = workers / "stage_09.slurm"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    result = checks.check_slurm(path, "workers/stage_09.py", worker.arguments)
    assert not result
    assert result.stage == "starting processes"
    assert words in result.happened


def test_stage_diff_comes_from_the_notebooks():
    diff = sources.diff("06", "08")
    assert "+def ddp_setup():" in diff
    assert "-from ddp_lesson.group import ddp_setup  # 03_process_group's, word for word" in diff
    with pytest.raises(ValueError, match="two digits"):
        sources.worker_source("6")
    with pytest.raises(LookupError, match="writes workers/stage_07.py"):
        sources.worker_source("07")


def test_the_shards_picture_marks_padding_on_every_rank_that_got_it():
    shards = [[0, 2, 4], [1, 3, 0]]  # index 0 twice: padding
    rows = [
        {"rank": r, "node": r, "local_rank": 0, "indices": shard} for r, shard in enumerate(shards)
    ]
    fig = plots.shards_picture(rows, 5)
    red = [c for c in fig.axes[0].collections if tuple(c.get_color()[0][:3]) == (1.0, 0.0, 0.0)]
    assert [len(c.get_segments()) for c in red] == [1, 1]
    with pytest.raises(ValueError, match="lack them"):
        plots.shards_picture([{"rank": 0}], 5)


def test_a_torchrun_worker_runs_as_python_u_runs_it_forked_warm(
    tmp_path, short_tempdir, monkeypatch
):
    # torchrun's workers are forked from its agent's warm server (torch imported once)
    # and must still see what `python -u FILE ARGS` gives a fresh worker. The launch's
    # folder goes in a short temporary folder: a deep one starts fresh workers (below).
    # Rank 1 is killed, and rank 0 raises as soon as its peer is gone; torchrun looks
    # only every 3 s here, so it finds both failed and must name the killed rank.
    flags = elastic._flags
    monkeypatch.setattr(elastic, "_flags", lambda *a: [*flags(*a), "--monitor-interval=3"])
    script = tmp_path / "worker.py"
    script.write_text(
        "import os, sys, time\n"
        "warm = 'multiprocessing.forkserver' in open(f'/proc/{os.getppid()}/cmdline').read()\n"
        "import torch\n"
        "from torch.distributed import destroy_process_group\n\n"
        "def ended(pid):\n"
        "    try:\n"
        "        return open(f'/proc/{pid}/stat').read().split()[2] in 'ZX'\n"
        "    except FileNotFoundError:\n"
        "        return True\n\n"
        "if __name__ == '__main__':\n"
        "    rank = os.environ['RANK']\n"
        "    # one write a line: unbuffered, the two ranks' print() pieces interleave\n"
        "    first, file = sys.path[0] == "
        f"{str(tmp_path)!r}, __file__ == {str(script)!r}\n"
        "    sys.stdout.write(f'rank {rank} argv {sys.argv[1:]} first {first} file {file}\\n')\n"
        "    pauses = destroy_process_group.__code__.co_name == 'pausing'\n"
        "    sys.stdout.write(f'rank {rank} warm {warm} threads {torch.get_num_threads()} "
        "pauses {pauses}\\n')\n"
        f"    said, dying = {str(tmp_path / 'rank0-said')!r}, {str(tmp_path / 'rank1-pid')!r}\n"
        "    if rank == '0':\n"
        "        open(said, 'w').close()\n"
        "        while not os.path.exists(dying) or not open(dying).read():\n"
        "            time.sleep(0.01)\n"
        "        while not ended(int(open(dying).read())):\n"
        "            time.sleep(0.01)\n"
        "        raise RuntimeError('my peer vanished')  # what a collective says then\n"
        "    while not os.path.exists(said):  # rank 1, once rank 0 has printed\n"
        "        time.sleep(0.05)\n"
        "    print('rank 1 says this before it dies')  # no flush: unbuffered, as -u\n"
        "    with open(dying + '.partial', 'w') as out:\n"
        "        out.write(str(os.getpid()))\n"
        "    os.replace(dying + '.partial', dying)\n"
        "    os.kill(os.getpid(), 9)\n"
    )
    with pytest.raises(launch.LaunchError) as raised:
        elastic.torchrun(script, "--flag", "2", nproc_per_node=2, timeout_s=120)
    said = raised.value.output
    for rank in (0, 1):
        assert f"rank {rank} argv ['--flag', '2'] first True file True" in said, said
        assert f"rank {rank} warm True threads 1 pauses True" in said, said
    assert "rank 1 says this before it dies" in said, said
    message = str(raised.value)
    assert "exitcode: -9" in message and "rank: 1" in message, message
    assert "rank: 0" not in message and "peer vanished" not in message, message


def test_a_torchrun_in_a_temporary_folder_too_deep_for_a_socket_starts_fresh_workers(
    tmp_path, deep_tempdir
):
    script = tmp_path / "worker.py"
    script.write_text(
        "import os\n"
        "parent = open(f'/proc/{os.getppid()}/cmdline').read()\n"
        "warm = 'multiprocessing.forkserver' in parent\n"
        "print(f\"rank {os.environ['RANK']} forked warm {warm}\")  # one string: no interleaving\n"
    )
    run = elastic.torchrun(script, nproc_per_node=2, timeout_s=120)  # before: AF_UNIX path too long
    said = run.outputs[0]
    assert "rank 0 forked warm False" in said and "rank 1 forked warm False" in said, said
