"""The NCCL path, checked on a machine without GPUs: no host tensor enters a collective.

Every worker the lesson and solution notebooks write runs for real under
the guard of tests/device_guard.py, which refuses a tensor made on the host
(no ``device=``, or ``.cpu()``) in a collective, as NCCL would on GPUs.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from ddp_lesson import launch, sources

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
NOTEBOOKS += sorted((ROOT / "solutions").glob("[0-9][0-9]_*.ipynb"))

#: Calls that exchange tensors between ranks, as they appear in a worker's code.
EXCHANGES = re.compile(
    r"\b(all_reduce|broadcast|all_gather\w*|reduce_scatter\w*|gather|scatter|all_to_all\w*|"
    r"reduce|send|recv|isend|irecv)\("
)

#: Workers that hang on purpose, or cannot run on their own.
SKIPPED = {"stage_03_stuck", "stage_05_cpu_ids", "experiments", "twice"}
#: Workers that fail on purpose, after (or instead of) their exchanges: any
#: error but a host tensor in a collective is what their notebook shows. Ranks
#: that wait for each other stop after WAIT_S instead of their group's own timeout.
WAIT_S = 8
FAIL_ON_PURPOSE = {
    "mistake_collective",  # 07: rank 0 alone calls all_reduce
    "debug_mismatch",  # 14: ranks all-reduce tensors of different shapes
    "real_evaluate_alone",  # 13: rank 0 evaluates alone and meets the next collective
    "real_syncbn",  # 13: SyncBatchNorm refuses a module on the CPU
}


def _stop_file(tmp: Path) -> str:
    (tmp / "stop").touch()  # the job ends at once
    return str(tmp / "stop")


ARGUMENTS = {
    "stage_09": lambda tmp: (1, str(tmp / "checkpoint.pt")),
    "debug_job": lambda tmp: (_stop_file(tmp),),
    "real_batch": lambda tmp: ([(64, 0.1)], 1),  # one setting, one epoch
    "comm_hooks": lambda tmp: (["allreduce", "powerSGD"], 1),  # 17: two hooks, one epoch
    "stop_together": lambda tmp: (True,),  # 18: the flag shared with all_reduce
}
VARIANT = re.compile(r'"workers/\w+\.py",\s*"workers/(\w+)\.py"')


def written_workers(folder: Path) -> list[str]:
    """Write every notebook's worker files (and 07's variants) into ``folder/workers``."""
    workers = folder / "workers"
    workers.mkdir()
    (workers / "__init__.py").write_text("")
    names = []
    for notebook in NOTEBOOKS:
        for target, text in sources.writefile_cells(notebook).items():
            if target.startswith("workers/") and target.endswith(".py"):
                (folder / target).write_text(text)
                names.append(Path(target).stem)
        cells = json.loads(notebook.read_text())["cells"]
        for cell in cells:
            code = "".join(cell["source"])
            if cell["cell_type"] == "code" and "sources.variant(" in code:
                # the cell writes a variant of a worker: run it here, quietly
                exec(code.replace('"workers/', f'"{workers}/'),
                     {"sources": sources, "print": lambda *a: None})
                names += VARIANT.findall(code)
    return sorted(set(names))


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gpu_path")
    names = written_workers(folder)
    sys.path.insert(0, str(folder))
    yield folder, names
    sys.path.remove(str(folder))
    for name in [m for m in sys.modules if m == "workers" or m.startswith("workers.")]:
        del sys.modules[name]


def exchanging(folder: Path, names: list[str]) -> list[str]:
    """The workers whose own code calls a collective, and that can run on their own."""
    found = []
    for name in names:
        text = (folder / "workers" / f"{name}.py").read_text()
        code = text + "".join(  # what the worker imports to measure exchanges too
            (ROOT / "ddp_lesson" / "measures" / f"{module}.py").read_text()
            for module in re.findall(r"^from ddp_lesson\.measures\.(\w+) import", text, re.M)
        )
        if name not in SKIPPED and "def main(rank, world_size, port" in text:
            if EXCHANGES.search(code):
                found.append(name)
    return found


def test_every_worker_that_exchanges_tensors_keeps_them_on_its_device(
    workers, no_leftovers, monkeypatch
):
    folder, names = workers
    monkeypatch.chdir(folder)  # what the workers save (checkpoints/...) stays in the test's folder
    chosen = exchanging(folder, names)
    assert len(chosen) >= 4, chosen  # stage_03, its bracket, 07's evaluation and log ...
    failures = {}
    for name in chosen:
        extra = ARGUMENTS.get(name, lambda tmp: ())(folder)
        try:
            with launch.bounded(2, timeout_s=60) as run:
                if name in FAIL_ON_PURPOSE:
                    given = (2, run.port, WAIT_S, f"workers.{name}", *extra)
                    mp.spawn(device_guard_main(waiting=True), args=given, nprocs=2)
                else:
                    given = (2, run.port, f"workers.{name}", *extra)
                    mp.spawn(device_guard_main(), args=given, nprocs=2)
        except launch.LaunchError as error:
            if "made on the host" in str(error) or name not in FAIL_ON_PURPOSE:
                failures[name] = str(error).splitlines()[0]
    assert not failures, '\n'.join(f'{k}: {v[:300]}' for k, v in failures.items())


def device_guard_main(*, waiting: bool = False):
    import device_guard

    return device_guard.main_waiting_at_most if waiting else device_guard.main


def test_the_guard_refuses_a_host_tensor_in_a_collective(tmp_path, no_leftovers):
    # The bug 07 once had: a counter made without device= summed over ranks.
    package = tmp_path / "planted"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "host_counts.py").write_text(
        "import torch\n"
        "from torch.distributed import all_reduce, destroy_process_group\n"
        "from ddp_lesson import group\n\n\n"
        "def main(rank, world_size, port):\n"
        "    device = group.join(rank, world_size, port)\n"
        "    try:\n"
        "        moved = torch.ones(2).to(device)  # moved: fine\n"
        "        all_reduce(moved)\n"
        "        counts = torch.zeros(2)  # the bug: no device=\n"
        "        counts += 1\n"
        "        all_reduce(counts)\n"
        "    finally:\n"
        "        destroy_process_group()\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        with pytest.raises(launch.LaunchError) as raised:
            with launch.bounded(2, timeout_s=60) as run:
                mp.spawn(
                    device_guard_main(), args=(2, run.port, "planted.host_counts"), nprocs=2
                )
    finally:
        sys.path.remove(str(tmp_path))
    message = str(raised.value)
    assert "torch.zeros(...) without device=" in message
    assert "entered all_reduce()" in message and "host_counts.py, line 13" in message
