"""Reports sent by ranks and the tables printed from them."""

import os

import psutil
import torch

from ddp_lesson import reports


def test_reports_round_trip_sorted_by_rank(tmp_path, monkeypatch):
    monkeypatch.setenv(reports.REPORT_DIR_ENV, str(tmp_path))
    reports.send_report(1, device="cpu", grads=torch.arange(3.0))
    reports.send_report(0, device="cpu", grads=torch.zeros(3))
    got = reports.collect(tmp_path)
    assert [r["rank"] for r in got] == [0, 1]
    assert torch.equal(got[1]["grads"], torch.arange(3.0))
    assert not list(tmp_path.glob("*.partial"))


def test_without_a_launch_the_report_is_printed(monkeypatch, capsys):
    monkeypatch.delenv(reports.REPORT_DIR_ENV, raising=False)
    reports.send_report(0, device="cpu")
    assert capsys.readouterr().out.strip() == "[rank 0] {'device': 'cpu'}"


def test_table_rounds_floats_and_aligns_numbers():
    text = reports.table(
        [{"rank": 0, "loss": 0.123456789, "seen": [1, 2]}, {"rank": 10, "loss": 2.0}],
        ["rank", "loss", "seen"],
    )
    assert text.splitlines() == [
        "rank  loss    seen",
        "   0  0.1235  [1, 2]",
        "  10  2.0000  -",
    ]


def test_max_abs_difference():
    a, b = torch.tensor([1.0, -2.0]), torch.tensor([1.5, -2.0])
    assert reports.max_abs_difference([a, b]) == 0.5
    assert reports.max_abs_difference([a]) == 0.0


def test_a_supervised_rank_freezes_its_objects_at_exit_and_no_other_process_does(tmp_path):
    # An atexit handler registered before the import runs after the course's own:
    # it sees what the interpreter's last garbage collections will see.
    import os
    import subprocess
    import sys

    script = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: open(sys.argv[1], 'w').write(str(gc.get_freeze_count())))\n"
        "import ddp_lesson.reports\n"
    )
    frozen = {}
    for supervised in (True, False):
        env = {k: v for k, v in os.environ.items() if k != reports.REPORT_DIR_ENV}
        if supervised:
            env[reports.REPORT_DIR_ENV] = str(tmp_path)
        out = tmp_path / f"frozen-{supervised}.txt"
        subprocess.run([sys.executable, "-c", script, str(out)], env=env, check=True, timeout=120)
        frozen[supervised] = int(out.read_text())
    assert frozen[True] > 10_000, frozen  # torch's objects, skipped by the last collections
    assert frozen[False] == 0, frozen  # a notebook or a test importing reports is left alone


def test_a_process_counts_as_alive_until_it_exits_even_before_it_is_reaped():
    import subprocess
    import sys
    import time

    assert reports._alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while reports._alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE  # nobody waited yet
    assert not reports._alive(child.pid)
    assert child.poll() == 0
    assert not reports._alive(child.pid)  # reaped: no such process
