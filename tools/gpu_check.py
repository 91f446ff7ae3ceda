"""Run every lesson and solution notebook on this machine and compare with the saved outputs.

Made for a GPU machine, where the notebooks take the NCCL path the committed
outputs (made on CPUs with gloo) never exercised; it runs anywhere. Each
notebook runs on a copy, in a folder of its own under ``--out`` (with its
``workers/`` package), so nothing committed changes. Each code cell's new
outputs are compared with the saved ones by nbval's rules, using nbval's own
functions: the same markers (``# NBVAL_IGNORE_OUTPUT``, ``# NBVAL_SKIP``,
the ``raises-exception`` tag), the same sanitising patterns
(``tests/nbval_sanitize.cfg``), the same output fields skipped (images,
widget model ids, metadata) and streams merged the same way.

    make gpu-check                                  # every notebook
    .venv/bin/python tools/gpu_check.py notebooks/00_setup.ipynb --out /tmp/check

The report (``<out>/report.md``) says what ran on which device and backend,
which cells differ and how, and every error. Exit status: 0 when every cell
matches, 1 when a cell differs or fails.
"""

from __future__ import annotations

import argparse
import copy
import difflib
import json
import platform
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbval.kernel import CURRENT_ENV_KERNEL_NAME, NbvalKernelspecManager
from nbval.plugin import (
    coalesce_streams,
    find_comment_markers,
    find_metadata_tags,
    get_sanitize_patterns,
)

ROOT = Path(__file__).resolve().parent.parent
SANITIZE = ROOT / "tests" / "nbval_sanitize.cfg"
#: Output fields nbval leaves out of its comparison (nbval.plugin.IPyNbFile).
SKIP_COMPARE = {
    "metadata",
    "traceback",
    "prompt_number",
    "output_type",
    "name",
    "execution_count",
    "application/vnd.jupyter.widget-view+json",
    "image/png",
    "image/jpeg",
}
CELL_TIMEOUT = 300  # seconds, as --nbval-cell-timeout in pyproject.toml


@dataclass
class CellResult:
    number: int  # nbval's numbering: the code cells, from 0
    first_line: str
    problem: str  # "differs", "error" or "not run"
    detail: str


@dataclass
class NotebookResult:
    path: Path
    seconds: float = 0.0
    cells: int = 0
    compared: int = 0
    problems: list[CellResult] = field(default_factory=list)
    failure: str = ""  # the run itself could not finish (kernel died, timeout)


def options(cell) -> dict:
    """nbval's options for a code cell: its tags, then its comment markers."""
    found = dict(find_metadata_tags(cell.metadata))
    found.update(dict(find_comment_markers(cell.source)))
    found.setdefault("check", True)
    return found


def sanitize(text, patterns: list[tuple[str, str]]):
    """Apply nbval's sanitising patterns to a string (other values unchanged)."""
    import re

    if not isinstance(text, str):
        return text
    for regex, replace in patterns:
        text = re.sub(regex, replace, text)
    return text


def flatten(outputs, patterns) -> dict[str, list]:
    """Outputs keyed as nbval compares them: stream names and MIME types, sanitised."""
    flat: dict[str, list] = {}
    for output in coalesce_streams(copy.deepcopy(outputs)):
        if output.get("output_type") == "stream":
            flat.setdefault(output["name"], []).append(sanitize(output["text"], patterns))
            continue
        for key, value in output.items():
            if key in SKIP_COMPARE:
                continue
            if key == "data":
                for mime, data in value.items():
                    if mime not in SKIP_COMPARE:
                        flat.setdefault(mime, []).append(sanitize(data, patterns))
            else:
                flat.setdefault(key, []).append(sanitize(value, patterns))
    return flat


def difference(saved, new, patterns) -> str:
    """How ``new`` outputs differ from the ``saved`` ones, nbval's way; "" when they match."""
    want, got = flatten(saved, patterns), flatten(new, patterns)
    if set(want) != set(got):
        missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
        return f"output fields missing: {missing or 'none'}; unexpected: {extra or 'none'}"
    for key in want:
        if len(want[key]) != len(got[key]):
            return f"{key}: {len(want[key])} saved outputs, {len(got[key])} now"
        for old, now in zip(want[key], got[key], strict=True):
            if old != now:
                old_text = old if isinstance(old, str) else json.dumps(old, indent=1)
                now_text = now if isinstance(now, str) else json.dumps(now, indent=1)
                diff = difflib.unified_diff(
                    old_text.splitlines(), now_text.splitlines(), "saved", "now", lineterm="", n=1
                )
                return f"{key}:\n" + "\n".join(list(diff)[:40])
    return ""


def error_text(outputs) -> str:
    for output in outputs:
        if output.get("output_type") == "error":
            return f"{output['ename']}: {output['evalue']}"[:500]
    return ""


def run_notebook(path: Path, out: Path, patterns, timeout: int = CELL_TIMEOUT) -> NotebookResult:
    """Run a copy of ``path`` in a folder of its own under ``out`` and compare its cells."""
    result = NotebookResult(path)
    folder = out / path.parent.name / path.stem
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    shutil.copy(path, folder / path.name)
    workers = path.parent / "workers" / "__init__.py"
    if workers.exists():
        (folder / "workers").mkdir()
        shutil.copy(workers, folder / "workers" / "__init__.py")

    saved = nbformat.read(path, as_version=4)
    run = copy.deepcopy(saved)
    for cell in run.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    manager = KernelManager(
        kernel_name=CURRENT_ENV_KERNEL_NAME, kernel_spec_manager=NbvalKernelspecManager()
    )
    client = NotebookClient(
        run, km=manager, timeout=timeout, allow_errors=True,
        resources={"metadata": {"path": str(folder)}},
    )  # fmt: skip
    started = time.monotonic()
    executed = set()
    client.reset_execution_trackers()
    try:
        # cleanup_kc: stop the kernel and remove its connection file afterwards
        # (nbclient leaves a kernel manager it was handed running otherwise)
        with client.setup_kernel(cleanup_kc=True):
            for index, cell in enumerate(run.cells):
                if cell.cell_type != "code" or options(cell).get("skip"):
                    continue
                client.execute_cell(cell, index)
                executed.add(index)
    except (CellTimeoutError, DeadKernelError, RuntimeError) as error:
        result.failure = f"{type(error).__name__}: {str(error).strip().splitlines()[0][:300]}"
    result.seconds = time.monotonic() - started
    nbformat.write(run, folder / f"{path.stem}.run.ipynb")

    number = -1
    for index, (old, new) in enumerate(zip(saved.cells, run.cells, strict=True)):
        if old.cell_type != "code":
            continue
        number += 1
        result.cells += 1
        opts = options(old)
        if opts.get("skip"):
            continue
        first = old.source.strip().splitlines()[0][:70] if old.source.strip() else ""
        if index not in executed:
            result.problems.append(CellResult(number, first, "not run", result.failure))
            continue
        error = error_text(new.outputs)
        if error and not opts.get("check_exception"):
            result.problems.append(CellResult(number, first, "error", error))
            continue
        # nbval compares only cells that were run when saved, unless told to ignore them
        if not opts.get("check") or old.execution_count is None:
            continue
        result.compared += 1
        diff = difference(old.outputs, new.outputs, patterns)
        if diff:
            result.problems.append(CellResult(number, first, "differs", diff))
    return result


def machine() -> list[str]:
    """What this machine offers the course: Python, torch, devices, backends, the launch plan."""
    import torch
    import torch.distributed as dist

    lines = [
        f"- Python {platform.python_version()} on {platform.system()} {platform.machine()}",
        f"- torch {torch.__version__} (CUDA {torch.version.cuda or 'none'} in this build)",
        f"- CUDA available: {torch.cuda.is_available()}, GPUs: {torch.cuda.device_count()}",
    ]
    for index in range(torch.cuda.device_count()):
        lines.append(f"  - GPU {index}: {torch.cuda.get_device_name(index)}")
    lines.append(
        f"- backends built in: nccl {dist.is_nccl_available()}, gloo {dist.is_gloo_available()}"
    )
    try:
        from ddp_lesson import devices

        plan = devices.plan().describe().strip().splitlines()
        lines.append("- the course's launch plan here (`devices.plan()`):")
        lines += [f"  - {line}" for line in plan]
    except Exception as error:  # the report should still come out
        lines.append(f"- the course's launch plan: could not be read ({error!r})")
    return lines


def report(results: list[NotebookResult], out: Path) -> str:
    """The markdown report: machine, one row per notebook, then each problem."""
    failed = [r for r in results if r.problems or r.failure]
    text = ["# Notebook check", "", "## Machine", "", *machine(), "", "## Notebooks", ""]
    text += ["| notebook | code cells | compared | seconds | result |", "|---|---|---|---|---|"]
    for r in results:
        name = f"{r.path.parent.name}/{r.path.name}"
        verdict = (
            "all outputs match"
            if not (r.problems or r.failure)
            else (
                f"{len(r.problems)} cell(s) with problems" + (" ; run stopped" if r.failure else "")
            )
        )
        text.append(f"| {name} | {r.cells} | {r.compared} | {r.seconds:.0f} | {verdict} |")
    text.append("")
    text.append(
        f"{len(results) - len(failed)} of {len(results)} notebooks match their saved outputs."
    )
    for r in failed:
        text += ["", f"## {r.path.parent.name}/{r.path.name}", ""]
        if r.failure:
            text += [f"The run stopped: {r.failure}", ""]
        for cell in r.problems:
            text += [f"### Cell {cell.number} ({cell.problem}): `{cell.first_line}`", ""]
            text += ["```", cell.detail, "```", ""]
    text += [
        "",
        f"Executed copies: `{out}/<folder>/<notebook>/<notebook>.run.ipynb`. Comparison: "
        "nbval's rules and tests/nbval_sanitize.cfg. On a GPU machine, device names and "
        "numbers that depend on the device legitimately differ from the CPU outputs saved "
        "in the repository; errors and differences elsewhere are what to look at.",
    ]
    return "\n".join(text) + "\n"


def default_notebooks() -> list[Path]:
    found = []
    for folder in ("notebooks", "solutions"):
        found += sorted((ROOT / folder).glob("[0-9][0-9]_*.ipynb"))
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "notebooks", nargs="*", type=Path, help="default: every lesson and solution notebook"
    )
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "gpu-check")
    parser.add_argument("--timeout", type=int, default=CELL_TIMEOUT, help="seconds per cell")
    args = parser.parse_args(argv)
    notebooks = [p.resolve() for p in args.notebooks] or default_notebooks()
    missing = [str(p) for p in notebooks if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")
    patterns = get_sanitize_patterns(SANITIZE.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for path in notebooks:
        print(f"running {path.parent.name}/{path.name} ...", flush=True)
        result = run_notebook(path, args.out, patterns, args.timeout)
        state = "ok" if not (result.problems or result.failure) else "PROBLEMS"
        print(f"  {state} ({result.seconds:.0f} s, {len(result.problems)} cell(s) flagged)")
        results.append(result)
    written = args.out / "report.md"
    written.write_text(report(results, args.out))
    print(f"report: {written}")
    return 1 if any(r.problems or r.failure for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
