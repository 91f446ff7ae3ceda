"""The doctor, on one planted-fault script per mistake of the lesson, a correct one, and bad input.

Every planted script marks the line that owns its fault with a
``# planted: <stage>`` comment; the doctor must name exactly that stage and
that line, and nothing else. Each diagnosis is a real, bounded run of the
script's processes, and no process may be left behind (``no_leftovers``).
A diagnosis takes seconds, so one diagnosis serves every check about its
script (``diagnosed``); the command line is run only where the command line
itself is under test, on input that is answered before torch is imported.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch

from ddp_lesson import devices, doctor
from ddp_lesson.doctor import judge
from ddp_lesson.doctor import read as doctor_read
from ddp_lesson.doctor.record import ProcessRecord
from ddp_lesson.doctor.run import Outcome
from ddp_lesson.stages import KEYS

SCRIPTS = Path(__file__).resolve().parent / "scripts"
ROOT = SCRIPTS.parents[2]
PLANTED = sorted(
    p.stem for p in SCRIPTS.glob("*.py") if "# planted:" in p.read_text()
)

pytestmark = pytest.mark.usefixtures("no_leftovers")


def planted(path: Path) -> tuple[str, int]:
    """The stage and line a planted script marks as owning its fault."""
    for number, text in enumerate(path.read_text().splitlines(), 1):
        match = re.search(r"# planted: (\w+)", text)
        if match:
            return match[1], number
    raise AssertionError(f"{path.name} has no '# planted:' marker")


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ddp_lesson", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


_diagnosed: dict[tuple, tuple[doctor.Diagnosis, float]] = {}


def diagnosed(name: str, *args: str) -> tuple[doctor.Diagnosis, float]:
    """The diagnosis of ``scripts/<name>.py`` (run once), and the seconds it took."""
    key = (name, args)
    if key not in _diagnosed:
        started = time.monotonic()
        result = doctor.diagnose(SCRIPTS / f"{name}.py", 2, args=args)
        _diagnosed[key] = result, time.monotonic() - started
    return _diagnosed[key]


def test_every_mistake_in_the_issue_has_a_planted_script():
    stages = {planted(SCRIPTS / f"{name}.py")[0] for name in PLANTED}
    assert stages == set(KEYS)
    assert len(PLANTED) >= 10


@pytest.mark.parametrize("name", PLANTED)
def test_names_exactly_the_planted_stage_and_line(name):
    stage, line = planted(SCRIPTS / f"{name}.py")
    result, _ = diagnosed(name)
    assert not result.problem, result.problem
    assert result.faults == [stage], str(result)
    assert result.stages[stage].line == line, str(result)
    assert "run: " in result.stages[stage].evidence, "the run must show the fault: " + str(
        result
    )
    assert result.failure is None, str(result)
    assert not result.ok and result.exit_code == 1


@pytest.mark.fixed_port
def test_the_correct_script_passes_every_stage_with_its_fixed_port_busy(listening):
    """correct.py sets MASTER_PORT=12355: hold that port, and watch every listening socket."""
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 12355))
        holder.listen()
    except OSError:
        pass  # already busy: that is the case under test anyway
    try:
        result, _ = diagnosed("correct")
    finally:
        holder.close()
    assert result.ok and result.exit_code == 0, str(result)
    assert result.completed
    assert [s.status for s in result.stages.values()] == [doctor.OK] * 5, str(result)
    assert result.launch.startswith("python correct.py"), result.launch
    seen = set(listening)
    assert seen and seen <= {"127.0.0.1"}, seen


def test_a_gpu_only_script_passes_and_says_what_ran_instead():
    result, _ = diagnosed("lesson_gpu")
    assert [s.status for s in result.stages.values()] == [doctor.OK] * 5, str(result)
    if devices.gpus_for(2):
        pytest.skip("this machine has a GPU for each rank: the script ran as written")
    here = "no GPU here" if not torch.cuda.is_available() else "not one for each of the 2 ranks"
    said = [n for n in result.notes if "stand-in" in n]
    assert len(said) == 1, result.notes  # said once, plainly
    assert said[0].startswith(here), said
    assert "GPU branch ran with CPU stand-ins for cuda:0 and cuda:1 (nccl ran as gloo)" in said[0]
    # nowhere else are the stand-ins named as if they were the machine's GPUs
    others = [s.evidence for s in result.stages.values()] + [result.launch]
    others += [n for n in result.notes if n is not said[0]]
    assert not any("cuda:" in text or "nccl" in text for text in others), str(result)


def test_a_worker_file_is_started_by_the_doctor_with_its_args():
    result, _ = diagnosed("worker_only", "3", "0")
    assert result.ok, str(result)
    assert "3 epochs" in result.stages["data_division"].evidence
    assert result.launch == "main(rank, 2, 3, 0) in 2 processes started by the doctor"


def test_a_hanging_worker_ends_by_its_deadline_and_is_no_success(tmp_path):
    script = tmp_path / "hangs.py"
    text = (SCRIPTS / "worker_only.py").read_text()
    assert "    try:\n        train(epochs)\n" in text
    script.write_text(
        text.replace("    try:\n        train(epochs)\n", "    try:\n        time.sleep(3600)\n")
        .replace("import gc\n", "import gc\nimport time\n")
    )
    _, healthy_s = diagnosed("worker_only", "3", "0")
    deadline = round(healthy_s + 2)  # long enough to join the group, on this machine now
    started = time.monotonic()
    result = doctor.diagnose(script, 2, timeout_s=deadline, args=("3", "0"))
    took = time.monotonic() - started
    assert took < deadline + 15, f"took {took:.1f} s for a deadline of {deadline} s"
    assert result.stages["process_group"].status == doctor.OK, str(result)
    assert result.stages["teardown"].status == doctor.NOT_CHECKED
    sleep_line = script.read_text().splitlines().index("        time.sleep(3600)") + 1
    for said in (result.stages["teardown"].evidence, result.failure.evidence):
        assert f"deadline of {deadline} s" in said, said
        assert re.findall(r"line (\d+)", said) in ([], [str(sleep_line)]), said
    assert result.exit_code == 1 and not result.completed


def test_ranks_stopped_at_the_deadline_are_not_blamed_for_raising():
    # What the probe records when the deadline stops a rank mid-sleep: the
    # interruption is the doctor's doing, so the deadline is the reason given.
    reading = doctor_read.read(SCRIPTS / "worker_only.py")
    error = {"type": "KeyboardInterrupt", "message": "", "line": 44, "stage": None,
             "time": 1.0, "interrupted": True, "call": False, "import": False}  # fmt: skip
    stopped = Outcome(ranks=[ProcessRecord(0, error=error), ProcessRecord(1, error=error)],
                      timed_out=True, timeout_s=9)  # fmt: skip
    reason = judge.why_not_run(stopped, reading)
    assert reason.startswith("the run did not finish within its deadline of 9 s"), reason
    assert "line 44" in reason and "raised" not in reason
    crashed = Outcome(ranks=[ProcessRecord(0, error={**error, "interrupted": False})])
    assert judge.why_not_run(crashed, reading) == "a rank raised KeyboardInterrupt at line 44"


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("syntax_error", ["does not parse", "line 2", "fix that line"]),
        ("no_main", ["no main(rank, world_size", "define main"]),
        ("does_not_exist", ["does not exist"]),
        ("a_directory", ["is a directory", "not a Python file"]),
        ("binary", ["is not Python source", "binary"]),
    ],
)
def test_bad_input_gets_one_line_naming_the_fix(name, words, tmp_path):
    path = SCRIPTS / f"{name}.py"
    if name == "syntax_error":  # written here: a file that does not parse fails the lint
        path = tmp_path / "syntax_error.py"
        path.write_text("def main(rank, world_size):\n    print(rank\n\nmain(0, 1)\n")
    elif name == "a_directory":
        path = tmp_path
    elif name == "binary":
        path = tmp_path / "binary.py"
        path.write_bytes(bytes(range(256)))
    result = cli(str(path))
    assert result.returncode == 2
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    assert "line None" not in lines[0]
    for word in words:
        assert word in lines[0], lines[0]


#: Out-of-range values of each numeric option, and the range its message must state.
OUT_OF_RANGE = {
    "--timeout": (["1e308", "1e20", "inf", "nan", "1e-300", "0", "-1", "soon"],
                  "between 1 and 86400 seconds"),
    "--world-size": (["0", "-3", "10000", "abc", "2.5"], "between 1 and "),
}  # fmt: skip


@pytest.mark.parametrize(
    ("option", "value"),
    [(option, value) for option, (values, _) in OUT_OF_RANGE.items() for value in values],
)
def test_an_option_out_of_range_gets_one_line_stating_the_range(option, value):
    result = cli(str(SCRIPTS / "correct.py"), option, value)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout
    line = lines[0]
    assert line.startswith(f"doctor: {option} must be"), line
    assert OUT_OF_RANGE[option][1] in line, line
    try:  # the value as the message quotes it: the number read, or the text typed
        said = f"{float(value):g}" if option == "--timeout" else str(int(value))
    except ValueError:
        said = repr(value)
    assert f"got {said}: " in line, line
    assert f"pass e.g. {option} " in line, line  # the fix, as one would type it


def test_diagnose_refuses_what_the_command_line_refuses():
    for world_size, timeout_s in [(2, 1e308), (2, 1e-300), (2, float("nan")), (2, 0), (0, 60),
                                  (-3, 60), (10_000, 60)]:  # fmt: skip
        with pytest.raises(ValueError, match=r"must be between 1 and") as caught:
            doctor.diagnose(SCRIPTS / "correct.py", world_size, timeout_s=timeout_s)
        assert "pass e.g. timeout_s=" in str(caught.value) or "pass e.g. world_size=" in str(
            caught.value
        )
    with pytest.raises(ValueError, match="device_count"):
        doctor.diagnose(SCRIPTS / "correct.py", 0)
    for world_size, timeout_s in [("two", 60), (2.0, 60), (2, "soon")]:
        with pytest.raises(TypeError, match=r"must be a (whole )?number between 1 and"):
            doctor.diagnose(SCRIPTS / "correct.py", world_size, timeout_s=timeout_s)


def test_a_crash_at_import_is_one_line_naming_the_fix():
    result = doctor.diagnose(SCRIPTS / "crash_at_import.py", 2)
    assert result.exit_code == 2
    said = str(result)
    assert len(said.splitlines()) == 1, said
    for word in ["crashed before any process", "KeyError", "line 5"]:
        assert word in said, said


def test_a_spawn_outside_the_main_guard_is_named_without_running(tmp_path):
    """The command line, its JSON and its exit code, on a file the doctor judges unrun."""
    source = (SCRIPTS / "correct.py").read_text()
    assert 'if __name__ == "__main__":' in source
    path = tmp_path / "unguarded.py"
    path.write_text(source.replace('if __name__ == "__main__":', "if True:"))
    line = next(n for n, t in enumerate(source.splitlines(), 1) if "mp.spawn(" in t)
    result = cli(str(path), "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert list(report["stages"]) == list(KEYS)
    for stage in report["stages"].values():
        assert set(stage) == {"status", "evidence", "line"}
    stages = report["stages"]
    assert stages["spawning"]["status"] == "FAULT"
    assert stages["spawning"]["line"] == line
    assert 'under `if __name__ == "__main__":`' in stages["spawning"]["evidence"]
    assert [s["status"] for s in stages.values()][1:] == ["NOT CHECKED"] * 4
    assert report["exit_code"] == 1 and report["failure"] is None


def test_json_of_a_run_with_a_fault():
    result, _ = diagnosed("no_destroy")
    report = json.loads(result.to_json())
    assert list(report["stages"]) == list(KEYS)
    for stage in report["stages"].values():
        assert set(stage) == {"status", "evidence", "line"}
        assert stage["status"] in ("OK", "FAULT", "NOT CHECKED")
    assert report["stages"]["teardown"]["status"] == "FAULT"
    assert report["stages"]["teardown"]["line"] == planted(SCRIPTS / "no_destroy.py")[1]
    assert report["exit_code"] == 1 and report["failure"] is None and not report["ok"]
    assert report["launch"].startswith("python no_destroy.py")


# -- the static read alone (no processes) ------------------------------------------------
def read_source(tmp_path, source: str) -> doctor_read.Reading:
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(source))
    return doctor_read.read(path)


def test_read_follows_a_name_to_the_world_size(tmp_path):
    reading = read_source(
        tmp_path,
        """
        import torch, torch.multiprocessing as mp
        def main(rank, world_size):
            pass
        if __name__ == "__main__":
            n = torch.cuda.device_count()
            world_size = n
            mp.spawn(main, args=(world_size,), nprocs=n)
        """,
    )
    assert reading.mode == "script"
    assert reading.findings == []


def test_read_accepts_a_collective_called_on_both_branches(tmp_path):
    reading = read_source(
        tmp_path,
        """
        import torch.distributed as dist
        def main(rank, world_size, t):
            if rank == 0:
                t += 1
                dist.broadcast(t, src=0)
            else:
                dist.broadcast(t, src=0)
            if rank == 0:
                dist.send(t, dst=1)
        """,
    )
    assert reading.mode == "worker"
    assert reading.findings == []


def test_read_flags_a_collective_on_one_branch(tmp_path):
    reading = read_source(
        tmp_path,
        """
        import torch.distributed as dist
        def main(rank, world_size, t):
            if rank != 0:
                dist.barrier()
        """,
    )
    assert [(f.stage, f.line) for f in reading.findings] == [("process_group", 5)]


def test_read_flags_a_device_chosen_as_a_constant(tmp_path):
    reading = read_source(
        tmp_path,
        """
        import torch
        def main(rank, world_size):
            device = torch.device("cuda:0")
            model = torch.nn.Linear(2, 2).to(device)
            model = torch.nn.parallel.DistributedDataParallel(model)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        """,
    )
    # the line that chose the device owns the fix
    assert [(f.stage, f.line) for f in reading.findings] == [("model_wrapping", 4)]


def test_read_tells_the_three_launch_styles_apart(tmp_path):
    torchrun = read_source(
        tmp_path,
        """
        import torch.distributed as dist
        def main():
            dist.init_process_group("gloo")
            dist.destroy_process_group()
        if __name__ == "__main__":
            main()
        """,
    )
    # a script is run as Python first: the run, not the read, sends it to torchrun
    assert torchrun.mode == "script" and torchrun.reads_torchrun and not torchrun.problem
    worker = read_source(tmp_path, "def main(rank, world_size):\n    pass\n")
    assert worker.mode == "worker"
    unguarded = read_source(
        tmp_path,
        """
        from multiprocessing import Process
        def main(rank, world_size):
            pass
        ranks = [Process(target=main, args=(r, 2)) for r in range(2)]
        """,
    )
    assert unguarded.mode == "script" and not unguarded.problem  # it starts its processes


def test_read_does_not_ask_for_set_epoch_when_the_sampler_does_not_shuffle(tmp_path):
    source = """
        from torch.utils.data import DataLoader
        from torch.utils.data.distributed import DistributedSampler
        def main(rank, world_size, data, model, optimizer):
            loader = DataLoader(data, sampler=DistributedSampler(data, shuffle=SHUFFLE))
            for epoch in range(3):
                for x in loader:
                    model(x).sum().backward()
        """
    off = read_source(tmp_path, source.replace("SHUFFLE", "False"))
    assert [f.stage for f in off.findings if f.stage == "data_division"] == []
    on = read_source(tmp_path, source.replace("SHUFFLE", "True"))
    assert [(f.stage, f.line) for f in on.findings] == [("data_division", 6)]


HELD_QUEUE = '''
import multiprocessing
import time

import torch.distributed as dist
import torch.multiprocessing as mp


def wait(rank, inbox):
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29845", rank=rank,
                            world_size=2)
    time.sleep(600)  # never ends: the doctor's deadline stops it


if __name__ == "__main__":
    inbox = multiprocessing.get_context("spawn").Queue()  # (its semaphores)
    mp.spawn(wait, args=(inbox,), nprocs=2)
'''


def test_a_run_the_deadline_stopped_prints_no_warning_of_leaked_semaphores(tmp_path):
    path = tmp_path / "held_queue.py"
    path.write_text(HELD_QUEUE)
    done = cli(str(path), "--world-size", "2", "--timeout", "10")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "did not finish within its deadline" in done.stdout, done.stdout
    assert "leaked semaphore" not in done.stdout + done.stderr, done.stderr


def test_a_report_read_by_a_command_that_stops_early_ends_without_a_traceback(tmp_path):
    # (`ddp-doctor script.py | head`: the reader is gone before the report is written)
    path = tmp_path / "broken.py"
    path.write_text("def main(rank, world_size:\n")
    doctor_run = subprocess.Popen(
        [sys.executable, "-m", "ddp_lesson", "doctor", str(path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    doctor_run.stdout.close()  # the reader stops before reading anything
    _, said = doctor_run.communicate(timeout=120)
    assert doctor_run.returncode == 2, said.decode()
    assert b"BrokenPipeError" not in said and b"Traceback" not in said, said.decode()
