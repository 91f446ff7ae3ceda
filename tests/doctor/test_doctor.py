"""The doctor, on one planted-fault script per mistake, a correct one, and bad input.

Every planted script marks the line that owns its fault with a
``# planted: <stage>`` comment; the doctor must name exactly that stage and
that line, and nothing else. Each diagnosis is a real, bounded run of the
script's processes, and no process may be left behind (``no_leftovers``).
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

from ddp_lesson import doctor, doctor_read

SCRIPTS = Path(__file__).resolve().parent / "scripts"
ROOT = SCRIPTS.parents[2]
PLANTED = sorted(
    p.stem for p in SCRIPTS.glob("*.py") if "# planted:" in p.read_text()
)
HEALTHY = ["correct", "lesson_gpu"]

pytestmark = pytest.mark.usefixtures("no_leftovers")


def planted(name: str) -> tuple[str, int]:
    """The stage and line a planted script marks as owning its fault."""
    for number, text in enumerate((SCRIPTS / f"{name}.py").read_text().splitlines(), 1):
        match = re.search(r"# planted: (\w+)", text)
        if match:
            return match[1], number
    raise AssertionError(f"{name}.py has no '# planted:' marker")


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ddp_lesson", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


_healthy_s: list[float] = []


def healthy_diagnosis_s() -> float:
    """Seconds a diagnosis of the correct script takes on this machine now (measured once)."""
    if not _healthy_s:
        started = time.monotonic()
        assert doctor.diagnose(SCRIPTS / "correct.py", 2)
        _healthy_s.append(time.monotonic() - started)
    return _healthy_s[0]


def test_every_mistake_in_the_issue_has_a_planted_script():
    stages = {planted(name)[0] for name in PLANTED}
    assert stages == set(doctor.STAGES)
    assert len(PLANTED) >= 10


@pytest.mark.parametrize("name", PLANTED)
def test_names_exactly_the_planted_stage_and_line(name):
    stage, line = planted(name)
    result = doctor.diagnose(SCRIPTS / f"{name}.py", 2)
    assert not result.problem, result.problem
    assert result.faults == [stage], str(result)
    assert result.stages[stage].line == line, str(result)
    assert "run: " in result.stages[stage].evidence, "the run must confirm the code: " + str(
        result
    )
    assert not result.ok


@pytest.mark.parametrize("name", HEALTHY)
def test_a_correct_script_passes_every_stage(name):
    result = doctor.diagnose(SCRIPTS / f"{name}.py", 2)
    assert result.ok, str(result)
    assert [s.status for s in result.stages.values()] == [doctor.OK] * 5, str(result)


def test_a_gpu_only_script_says_what_ran_instead():
    result = doctor.diagnose(SCRIPTS / "lesson_gpu.py", 2)
    if doctor._has_cuda():
        pytest.skip("this machine has CUDA: the script ran as written")
    assert any("no CUDA GPU" in note for note in result.notes)
    assert "cuda:0, cuda:1" in result.stages["model_wrapping"].evidence


def test_a_worker_file_is_spawned_by_the_doctor_with_its_args():
    result = doctor.diagnose(SCRIPTS / "worker_only.py", 2, args=("3", "0"))
    assert result.ok, str(result)
    assert "3 epochs" in result.stages["data_division"].evidence


def test_a_busy_fixed_port_does_not_stop_the_run(listening):
    """The scripts set MASTER_PORT=12355; hold that port, and watch every listening socket."""
    holder = socket.socket()
    try:
        holder.bind(("127.0.0.1", 12355))
        holder.listen()
    except OSError:
        pass  # already busy: that is the case under test anyway
    try:
        result = doctor.diagnose(SCRIPTS / "correct.py", 2)
    finally:
        holder.close()
    assert result.ok, str(result)
    seen = set(listening)
    assert seen and seen <= {"127.0.0.1"}, seen


def test_a_hanging_script_ends_by_its_deadline(tmp_path):
    script = tmp_path / "hangs.py"
    text = (SCRIPTS / "correct.py").read_text()
    script.write_text(
        text.replace(
            "    destroy_process_group()\n", "    time.sleep(3600)\n    destroy_process_group()\n"
        ).replace("import os\n", "import os\nimport time\n")
    )
    # long enough for training to happen first, on this machine as loaded now
    deadline = round(1.5 * healthy_diagnosis_s() + 5)
    bound = deadline + 2 * healthy_diagnosis_s() + 5
    started = time.monotonic()
    result = doctor.diagnose(script, 2, timeout_s=deadline)
    took = time.monotonic() - started
    assert took < bound, f"took {took:.1f} s, bound {bound:.1f} s"
    assert result.stages["data_division"].status == doctor.OK
    assert result.stages["teardown"].status == doctor.NOT_CHECKED
    evidence = result.stages["teardown"].evidence
    assert "deadline" in evidence, evidence
    sleep_line = script.read_text().splitlines().index("    time.sleep(3600)") + 1
    named = re.findall(r"line (\d+)", evidence)
    assert named in ([], [str(sleep_line)]), evidence


def test_ranks_stopped_at_the_deadline_are_not_blamed_for_raising():
    # What the probe records when the deadline stops a rank mid-sleep: the
    # interruption is the doctor's doing, so the deadline is the reason given.
    class LaunchTimeout(Exception):
        pass

    stopped = {"stop": None, "error": {"type": "KeyboardInterrupt", "line": 44, "call": False}}
    reason = doctor._why_not_run([stopped, stopped], None, LaunchTimeout(), 2)
    assert reason.startswith("the run did not finish within its deadline"), reason
    assert "line 44" in reason
    assert "raised" not in reason
    crashed = doctor._why_not_run([stopped], None, None, 2)
    assert crashed == "a rank raised KeyboardInterrupt at line 44"


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("syntax_error", ["does not parse", "line 2", "fix that line"]),
        ("no_main", ["no main(rank, world_size", "define main"]),
        ("crash_at_import", ["crashed before any process", "KeyError", "line 5"]),
        ("does_not_exist", ["does not exist"]),
    ],
)
def test_bad_input_gets_one_line_naming_the_fix(name, words, tmp_path):
    path = SCRIPTS / f"{name}.py"
    if name == "syntax_error":  # written here: a file that does not parse fails the lint
        path = tmp_path / "syntax_error.py"
        path.write_text("def main(rank, world_size):\n    print(rank\n\nmain(0, 1)\n")
    result = cli(str(path))
    assert result.returncode == 2
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    for word in words:
        assert word in lines[0], lines[0]


def test_a_spawn_outside_the_main_guard_is_named_without_running(tmp_path):
    source = (SCRIPTS / "correct.py").read_text()
    assert 'if __name__ == "__main__":' in source
    path = tmp_path / "unguarded.py"
    path.write_text(source.replace('if __name__ == "__main__":', "if True:"))
    line = next(n for n, t in enumerate(source.splitlines(), 1) if "mp.spawn(" in t)
    result = cli(str(path), "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    stages = json.loads(result.stdout)["stages"]
    assert stages["spawning"]["status"] == "FAULT"
    assert stages["spawning"]["line"] == line
    assert 'under `if __name__ == "__main__":`' in stages["spawning"]["evidence"]
    assert [s["status"] for s in stages.values()][1:] == ["NOT CHECKED"] * 4


@pytest.mark.parametrize(("value", "words"), [("0", "nprocs=0"), ("two", "whole number")])
def test_a_bad_world_size_gets_one_line(value, words):
    result = cli(str(SCRIPTS / "correct.py"), "--world-size", value)
    assert result.returncode == 2
    assert len(result.stdout.strip().splitlines()) == 1
    assert words in result.stdout and "--world-size" in result.stdout


def test_json_output_and_exit_code_for_a_fault():
    result = cli(str(SCRIPTS / "no_destroy.py"), "--json")
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert list(report["stages"]) == list(doctor.STAGES)
    for stage in report["stages"].values():
        assert set(stage) == {"status", "evidence", "line"}
        assert stage["status"] in ("OK", "FAULT", "NOT CHECKED")
    assert report["stages"]["teardown"]["status"] == "FAULT"
    assert report["stages"]["teardown"]["line"] == planted("no_destroy")[1]


def test_exit_code_is_zero_for_a_correct_script():
    result = cli(str(SCRIPTS / "correct.py"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count(" OK ") == 5


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
