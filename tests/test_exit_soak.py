"""tools/exit_soak.py: how it counts the ends of runs, and that it leaves nothing running."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent

#: Each run reads and bumps a counter, then ends the way its number says.
SCRIPT = """
import os, subprocess, sys, time
counter, token = sys.argv[1], sys.argv[2]
run = int(open(counter).read()) + 1 if os.path.exists(counter) else 1
open(counter, "w").write(str(run))
if run == 2:
    os.abort()  # SIGABRT
if run == 3:  # what torchrun prints for a rank that aborted, and its own status
    print("terminate called without an active exception", flush=True)
    sys.exit(1)
if run == 4:
    time.sleep(300)  # stopped at the timeout
if run == 5:
    sys.exit(3)
if run == 6:  # a clean end that leaves a process of its own session behind
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)", token],
                     start_new_session=True)
"""


def test_each_way_a_run_ends_is_counted_and_nothing_is_left(tmp_path):
    token = f"exit-soak-{uuid.uuid4().hex}"
    script = tmp_path / "ends.py"
    script.write_text(SCRIPT)
    saved = tmp_path / "saved"
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "exit_soak.py"), "--runs", "6",
         "--launcher", "python", "--timeout", "10", "--any-interface", "--save", str(saved),
         str(script), str(tmp_path / "counter"), token],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 1, done  # not every run ended clean
    last = done.stdout.strip().splitlines()[-1]
    assert "6 runs: 2 clean, 2 abort, 1 hang, 1 other" in last, done.stdout
    assert sorted(p.name for p in saved.iterdir()) == [
        "run0002_abort.log", "run0003_abort.log", "run0004_hang.log", "run0005_other.log",
    ]  # fmt: skip
    left = [p for p in psutil.process_iter(["cmdline"]) if token in (p.info["cmdline"] or [])]
    assert not left, f"processes outlived their runs: {left}"
