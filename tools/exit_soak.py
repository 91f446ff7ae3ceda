"""Run a script many times as a learner would, and count how its runs end.

Each run starts ``torchrun --standalone --nproc-per-node=2 SCRIPT ARGS`` (or
``python SCRIPT ARGS``, for a script that starts its own processes) in a
fresh temporary folder, which is also its ``TMPDIR``: a checkpoint the script
writes with a relative path, and torchrun's error files, land there and go
away with it. A run that outlives ``--timeout`` is stopped, with every
process it started. Each run ends one of four ways:

* clean: exit status 0 and no sign of an abort in its output;
* abort: exit status 134 or -6 (SIGABRT), or "terminate called",
  "Aborted" or "SIGABRT" in its output (torchrun reports a rank that
  aborted and exits 1 itself);
* hang: stopped at the timeout;
* other: any other failure.

    .venv/bin/python tools/exit_soak.py --runs 50 scripts/ddp_train.py --epochs 1
    .venv/bin/python tools/exit_soak.py --runs 50 --launcher python \\
        scripts/ddp_spawn.py --epochs 1

The last line is the summary: runs, the four counts, and the median
seconds per run. ``--save DIR`` keeps the output of every run that did not
end clean. Exit status: 0 when every run ended clean, 1 otherwise.

Only 127.0.0.1: torch's store servers listen on every network interface,
so each run gets a network namespace of its own (``unshare``), in which the
only interface is its own loopback. Where ``unshare`` is refused, the soak
stops and says so, unless ``--any-interface`` allows ordinary networking.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

OUTCOMES = ("clean", "abort", "hang", "other")
ABORT_CODES = (134, -signal.SIGABRT)
ABORT_WORDS = ("terminate called", "Aborted", "SIGABRT")
PR_SET_CHILD_SUBREAPER = 36

#: Run in the new network namespace: bring its loopback up, then become the command.
LOOPBACK_UP = """
import fcntl, os, socket, struct, sys
layout = "16sH14x"  # struct ifreq: the interface's name, then its flags
with socket.socket() as s:
    got = fcntl.ioctl(s, 0x8913, struct.pack(layout, b"lo", 0))  # SIOCGIFFLAGS
    flags = struct.unpack(layout, got)[1] | 0x1  # IFF_UP
    fcntl.ioctl(s, 0x8914, struct.pack(layout, b"lo", flags))  # SIOCSIFFLAGS
os.execvp(sys.argv[1], sys.argv[1:])
"""


def command(args: argparse.Namespace) -> list[str]:
    """The command a learner would type, with this interpreter as ``python``."""
    script = str(Path(args.script).resolve())
    if args.launcher == "torchrun":
        start = [args.python, "-m", "torch.distributed.run", "--standalone",
                 f"--nproc-per-node={args.nproc_per_node}"]
    else:
        start = [args.python]
    return [*start, script, *args.script_args]


def isolated(cmd: list[str], python: str) -> list[str] | None:
    """``cmd`` in a network namespace of its own, or ``None`` where that is refused."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    wrap = [unshare, "--net"] + ([] if os.geteuid() == 0 else ["--map-root-user"])
    wrap += [python, "-c", LOOPBACK_UP]
    probe = subprocess.run([*wrap, python, "-c", "pass"], capture_output=True)
    return [*wrap, *cmd] if probe.returncode == 0 else None


def outcome(returncode: int | None, output: str) -> str:
    if returncode is None:
        return "hang"
    if returncode in ABORT_CODES or any(word in output for word in ABORT_WORDS):
        return "abort"
    return "clean" if returncode == 0 else "other"


def tally(counts: dict[str, int]) -> str:
    return ", ".join(f"{counts[name]} {name}" for name in OUTCOMES)


def one_run(cmd: list[str], timeout_s: float) -> tuple[str, str, float]:
    """Run ``cmd`` once in a fresh folder: (outcome, output, seconds)."""
    with tempfile.TemporaryDirectory(prefix="exit_soak_") as folder:
        env = dict(os.environ, TMPDIR=folder)
        log = Path(folder) / "output.log"
        started = time.monotonic()
        with open(log, "wb") as out:
            process = subprocess.Popen(cmd, cwd=folder, env=env, stdin=subprocess.DEVNULL,
                                       stdout=out, stderr=subprocess.STDOUT,
                                       start_new_session=True)
            try:
                returncode: int | None = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                returncode = None
            finally:
                stop_all(process)
        seconds = time.monotonic() - started
        output = log.read_text(errors="replace")
    return outcome(returncode, output), output, seconds


def children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if parent == pid:
            found.append(int(stat.parent.name))
    return found


def stop_all(process: subprocess.Popen) -> None:
    """Kill the run's process and every process under it, and reap them.

    torchrun starts each worker in a session of its own, so killing the
    run's process group is not enough; this process is a child subreaper
    (see :func:`main`), so whatever the run left behind became its child.
    """
    if process.poll() is None:  # still running: at the timeout
        todo, tree = [process.pid], [process.pid]
        while todo:
            kids = children(todo.pop())
            tree += kids
            todo += kids
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    process.wait()
    for pid in children(os.getpid()):  # orphans, reparented to this process
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--launcher", choices=("torchrun", "python"), default="torchrun")
    parser.add_argument("--nproc-per-node", type=int, default=2, help="torchrun only")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per run")
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter that runs torchrun or the script")
    parser.add_argument("--save", type=Path, default=None,
                        help="keep the output of each run that did not end clean here")
    parser.add_argument("--any-interface", action="store_true",
                        help="run without a network namespace where unshare is refused")
    parser.add_argument("script")
    parser.add_argument("script_args", nargs=argparse.REMAINDER,
                        help="passed to the script as they are")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    # stopped (SIGTERM): leave through one_run's cleanup, which stops the run
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    # what a run leaves behind becomes this process's child, to be reaped
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    cmd = command(args)
    wrapped = isolated(cmd, args.python)
    if wrapped is None and not args.any_interface:
        sys.exit("exit_soak: unshare --net is refused here, and torch's store servers "
                 "listen on every interface; pass --any-interface to run anyway")
    print("runs:", " ".join(cmd), flush=True)
    counts = dict.fromkeys(OUTCOMES, 0)
    seconds = []
    for run in range(1, args.runs + 1):
        result, output, took = one_run(wrapped or cmd, args.timeout)
        counts[result] += 1
        seconds.append(took)
        if result != "clean":
            print(f"run {run}: {result} after {took:.1f} s", flush=True)
            if args.save is not None:
                args.save.mkdir(parents=True, exist_ok=True)
                (args.save / f"run{run:04d}_{result}.log").write_text(output)
        if run % 10 == 0 and run < args.runs:
            print(f"{run} runs: {tally(counts)}", flush=True)
    print(f"{Path(args.script).name} ({args.launcher}): {args.runs} runs: {tally(counts)}; "
          f"median {statistics.median(seconds):.1f} s per run", flush=True)
    return 0 if counts["clean"] == args.runs else 1


if __name__ == "__main__":
    sys.exit(main())
