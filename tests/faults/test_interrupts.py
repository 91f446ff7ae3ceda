"""A kernel's first launch interrupted at any moment, and the cell run again at once.

The stop button sends SIGINT to the kernel's whole process group: the
kernel, the warm server it starts for its first launch (while that imports
torch) and the ranks forked from it. Each case starts a kernel, runs a
lesson cell (``launch.bounded`` around ``mp.spawn``, as 05 does) and
interrupts it at one moment of its first launch, read from the kernel's
processes: while the warm server starts, while it imports torch, while the
ranks start, while they train. The cell must show one line
(``LaunchInterrupted``), no traceback of the course's processes, and the
same cell run again at once must work and leave nothing running.

``python tests/faults/test_interrupts.py N`` runs N interrupts at moments
spread over the same phases and prints the counts.
"""

from __future__ import annotations

import os
import queue
import re
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Seconds a kernel may take to start, and a cell to run, on a busy machine.
KERNEL_START_S, CELL_S = 120, 240

SETUP = f"""
import importlib, sys
sys.path.insert(0, {str(ROOT)!r})
sys.dont_write_bytecode = True
import torch
import torch.multiprocessing as mp
from ddp_lesson import launch
"""

CELL = """
import interrupted_worker as worker
importlib.reload(worker)
with launch.bounded(2, timeout_s=120) as run:
    mp.spawn(worker.main, args=(2, run.port), nprocs=2)
print("reports:", len(run.reports))
"""

#: A lesson worker that trains for a few seconds: a group, DDP, a loader.
WORKER = '''
import os
import time

import torch
import torch.nn.functional as F
from torch.distributed import ReduceOp, all_reduce, destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP

from ddp_lesson.models import NeuralNetwork
from ddp_lesson.reports import send_report


def main(rank, world_size, port):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        model = DDP(NeuralNetwork())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        ends = time.monotonic() + 3
        steps = 0
        going = torch.ones(1)
        while going.item():  # (every rank takes as many steps as the others)
            features, labels = torch.randn(32, 64), torch.randint(0, 10, (32,))
            loss = F.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
            going = torch.tensor([float(time.monotonic() < ends or steps < 5)])
            all_reduce(going, op=ReduceOp.MIN)
        send_report(rank, steps=steps)
    finally:
        destroy_process_group()
'''

#: Where a traceback of the course's processes would show: its frames, Python's header.
COURSE_TRACEBACK = re.compile(r"Traceback|File \"|ddp_lesson/|forkserver|EOFError")


class Kernel:
    """A Jupyter kernel in ``folder``, driven as JupyterLab drives it."""

    def __init__(self, folder: Path):
        from jupyter_client import KernelManager

        self.manager = KernelManager(kernel_name="python3")
        # Under pytest a kernel shows only what Python writes, not what its
        # processes write to its file descriptors; a learner's kernel shows both.
        env = {k: v for k, v in os.environ.items() if k != "PYTEST_CURRENT_TEST"}
        self.manager.start_kernel(cwd=str(folder), env=env)
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=KERNEL_START_S)
        self.pid = self.manager.provisioner.process.pid

    def run(self, code: str, interrupt_when=None) -> tuple[str, list[str], bool]:
        """Run ``code``, interrupted once ``interrupt_when(kernel)`` is true.

        Returns the text the cell showed, its errors, and whether the
        interrupt was sent before the cell ended.
        """
        msg_id = self.client.execute(code)
        started, sent = time.monotonic(), interrupt_when is None
        shown, errors = [], []
        while True:
            if not sent and interrupt_when(self):
                self.manager.interrupt_kernel()
                sent = True
            try:
                msg = self.client.get_iopub_msg(timeout=0.02)
            except queue.Empty:
                assert time.monotonic() - started < CELL_S, f"cell ran past {CELL_S} s:\n{shown}"
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream":
                shown.append(content["text"])
            elif kind == "error":
                errors.append(f"{content['ename']}: {content['evalue']}")
                shown.extend(content["traceback"])
            elif kind == "status" and content["execution_state"] == "idle":
                text = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(shown))
                return text, errors, sent and interrupt_when is not None

    def processes(self) -> tuple[list[psutil.Process], list[psutil.Process]]:
        """The kernel's warm servers and the ranks forked from them."""
        try:
            children = psutil.Process(self.pid).children()
        except psutil.Error:
            return [], []
        servers, ranks = [], []
        for child in children:
            try:
                if "multiprocessing.forkserver" in " ".join(child.cmdline()):
                    servers.append(child)
                    ranks += child.children()
            except psutil.Error:
                pass
        return servers, ranks

    def shut_down(self) -> None:
        """Shut the kernel down and wait until its processes are gone."""
        below = psutil.Process(self.pid).children(recursive=True)
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)
        _, alive = psutil.wait_procs(below, timeout=30)
        for proc in alive:
            proc.kill()
        assert not alive, f"the kernel left {[p.cmdline() for p in alive]} running"


def _age(proc: psutil.Process) -> float:
    try:
        return time.time() - proc.create_time()
    except psutil.Error:
        return 0.0


#: Moments of a first launch, each read from the kernel's processes.
MOMENTS = {
    "server-starting": lambda k: bool(k.processes()[0]),
    "torch-importing": lambda k: any(_age(s) > 0.5 for s in k.processes()[0]),
    "ranks-starting": lambda k: bool(k.processes()[1]),
    "ranks-training": lambda k: any(_age(r) > 1.5 for r in k.processes()[1]),
}


def after(seconds: float):
    """A moment ``seconds`` after the cell starts."""
    at = time.monotonic() + seconds
    return lambda kernel: time.monotonic() >= at


def interrupt_and_rerun(
    folder: Path, moment: Callable[[], Callable[[Kernel], bool]]
) -> tuple[list[str], bool]:
    """A new kernel, its first launch interrupted at ``moment()``, then run again.

    ``moment`` makes the test of the moment when the cell starts (a delay
    starts then). Returns what went wrong, and whether the interrupt came
    while the cell ran (a delay may outlast the launch).
    """
    (folder / "interrupted_worker.py").write_text(textwrap.dedent(WORKER))
    kernel = Kernel(folder)
    problems = []
    try:
        kernel.run(SETUP)
        first, errors, interrupted = kernel.run(CELL, moment())
        if not interrupted:
            return [], False
        if len(errors) != 1 or not errors[0].startswith("LaunchInterrupted: "):
            problems.append(f"the interrupted cell showed {errors} (want one LaunchInterrupted)")
        if COURSE_TRACEBACK.search(first) or len(first.strip().splitlines()) > 1:
            problems.append(f"the interrupted cell showed more than one line:\n{first}")
        second, errors, _ = kernel.run(CELL)
        if errors or "reports: 2" not in second or COURSE_TRACEBACK.search(second):
            problems.append(f"the re-run failed:\n{second}")
        left, _, _ = kernel.run("print('left:', len(launch.child_processes()))")
        if "left: 0" not in left:
            problems.append(f"processes left running after the re-run: {left}")
    finally:
        kernel.shut_down()
    return problems, True


@pytest.mark.parametrize("moment", MOMENTS, ids=MOMENTS)
def test_an_interrupted_first_launch_leaves_the_next_one_working(tmp_path, moment):
    problems, interrupted = interrupt_and_rerun(tmp_path, lambda: MOMENTS[moment])
    assert interrupted, f"the launch ended before the moment {moment} came"
    assert not problems, "\n".join(problems)


if __name__ == "__main__":  # the Done-when's count: N interrupts at spread moments
    import random
    import tempfile

    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    broken = case = late = 0
    while case < count:
        if case % 2:
            label = list(MOMENTS)[case // 2 % len(MOMENTS)]
            moment = lambda label=label: MOMENTS[label]  # noqa: E731
        else:
            seconds = random.uniform(0.0, 5.0)
            label = f"after {seconds:.2f} s"
            moment = lambda seconds=seconds: after(seconds)  # noqa: E731
        with tempfile.TemporaryDirectory() as folder:
            problems, interrupted = interrupt_and_rerun(Path(folder), moment)
        if not interrupted:  # the launch ended first: not an interrupt, try another moment
            late += 1
            print(f"   {label:16s} (the launch had ended: not counted)", flush=True)
            continue
        case += 1
        broken += bool(problems)
        print(f"{case:2d} {label:16s} {'BROKEN' if problems else 'ok'}", flush=True)
        for problem in problems:
            print(textwrap.indent(problem, "     "), flush=True)
    print(f"{count} interrupts, {broken} broken re-runs or outputs with a course traceback "
          f"({late} moment(s) came after the launch had ended)")
