"""The course map: every lesson, its time, what it teaches, what it needs, its exercises.

One table (``LESSONS``) makes three things, so they cannot disagree:

* the map in README.md (between ``<!-- course-map -->`` markers) and in
  ``notebooks/00_setup.ipynb`` (the cell with id ``course-map``);
* a line under each lesson's title: its minutes, core path or deep dive,
  what it needs;
* a last cell in each lesson: its exercise notebook and the next lesson.

Minutes are an estimate from the notebook's own length, so they follow
the notebook when it changes: 150 words of prose and 10 lines of code a
minute (reading code slowly enough to follow it, running each cell
included), rounded to 5. Exercises come on top.

    python tools/course_map.py            # write the map, the lines and the cells
    python tools/course_map.py --check    # exit 1 if any of them is not current
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from colab_cells import dumps, lesson_notebooks, lines, write_or_check  # noqa: E402
from course_meta import ROOT  # noqa: E402

HEAD_ID, NEXT_ID, MAP_ID = "course-map-head", "course-map-next", "course-map"
README_MARKS = ("<!-- course-map -->", "<!-- /course-map -->")

#: Words of prose and lines of code read in a minute.
WORDS_PER_MIN, CODE_LINES_PER_MIN = 150, 10

#: Each lesson: what it teaches (one line), what it needs, on the core path or not.
LESSONS = {
    "00_setup": ("what this machine offers: devices, world size, threads", [], True),
    "01_why_ddp": ("the single-device starting point; four areas, five utilities", ["00"], True),
    "02_spawn": ("`mp.spawn` starts the processes and supplies `rank`", ["01"], True),
    "03_process_group": ("`init_process_group` / `destroy_process_group`; a collective", ["02"],
                         True),
    "04_sampler": ("`DistributedSampler`: a shard per rank, `set_epoch`, padding", ["03"], True),
    "05_ddp_wrap": ("`model.to(device)`, `DDP(...)`; gradients synchronised", ["04"], True),
    "06_full_script": ("the whole DDP script; a `torchrun` template and checklist to convert "
                       "your own", ["05"], True),
    "07_mistakes": ("each common mistake run beside the right script; the doctor", ["06"], False),
    "08_torchrun": ("one script under `mp.spawn` and `torchrun`; local rank; two nodes", ["06"],
                    False),
    "09_checkpoints": ("save on rank 0, barrier, resume; `torchrun` restarts", ["06"], False),
    "10_performance": ("when DDP is faster: all-reduce cost, throughput, knobs", ["06"], False),
    "11_inside_ddp": ("DDP built by hand: broadcast, all-reduce, hooks, buckets", ["06"], False),
    "12_batches": ("the global batch and the learning rate, accumulation with `no_sync()`, "
                   "per-rank seeds", ["06"], False),
    "13_evaluation": ("metrics with `all_reduce`, logging on rank 0, BatchNorm buffers, "
                      "mixed precision", ["06"], False),
    "14_debugging": ("unused parameters, ports in use, stuck ranks, mismatched collectives, "
                     "`@record`", ["06"], False),
    "15_first_week": ("a project's first week: data prepared once, loader workers, clipping, "
                      "metrics that are not sums, `torch.compile`", ["06"], False),
    "16_after_ddp": ("appendix: FSDP2 beside DDP, `DataParallel`, notebook launchers", ["06"],
                     False),
    "17_comm_and_memory": ("bytes and memory: communication hooks (fp16, PowerSGD), activation "
                           "checkpointing with `static_graph`, `ZeroRedundancyOptimizer`",
                           ["06"], False),
    "18_stopping_and_resizing": ("every rank stopping together, `torch.distributed.checkpoint` "
                                 "at another world size, elastic `torchrun`", ["06", "09", "16"],
                                 False),
    "19_uneven_inputs": ("uneven inputs: a stream split by rank and loader worker, `join()`, "
                         "and the optimiser state it leaves unequal", ["06"], False),
}


#: The core path, in order.
CORE = [stem for stem, (_, _, core) in LESSONS.items() if core]


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def minutes(path: Path) -> int:
    """The estimated minutes a learner needs for the lesson at ``path`` (exercises apart)."""
    words = code = 0
    for cell in _cells(path):
        if cell.get("id") in (HEAD_ID, NEXT_ID, MAP_ID, "colab-badge", "course-setup"):
            continue
        if cell.get("metadata", {}).get("jupyter", {}).get("source_hidden"):
            continue  # collapsed plumbing: a learner does not read it
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            words += len(text.split())
        elif cell["cell_type"] == "code":
            code += len(text.splitlines())
    return max(5, 5 * round((words / WORDS_PER_MIN + code / CODE_LINES_PER_MIN) / 5))


def _exercise(stem: str, root: Path) -> str | None:
    return f"exercises/{stem}.ipynb" if (root / "exercises" / f"{stem}.ipynb").exists() else None


def _needs(stem: str) -> str:
    needed = LESSONS[stem][1]
    return ", ".join(f"`{n}`" for n in needed) if needed else "nothing"


def table(root: Path = ROOT, links: str = "") -> str:
    """The map as a markdown table; ``links`` is the path from where it is read to the root."""
    rows = ["| Lesson | Minutes | Part | What it teaches | Needs | Exercises |",
            "|---|---|---|---|---|---|"]
    total = {True: 0, False: 0}
    for path in lesson_notebooks(root):
        topic, _, core = LESSONS[path.stem]
        spent = minutes(path)
        total[core] += spent
        exercise = _exercise(path.stem, root)
        rows.append(
            f"| [`{path.stem}`]({links}notebooks/{path.name}) | {spent} "
            f"| {'core' if core else 'deep dive'} | {topic} | {_needs(path.stem)} "
            f"| {f'[{Path(exercise).name}]({links}{exercise})' if exercise else '-'} |"
        )
    rows.append("")
    rows.append(
        f"The core path ({CORE[0][:2]}-{CORE[-1][:2]}) is about {total[True]} minutes and ends "
        f"with your own script under `torchrun`; the deep dives are optional, in any order, "
        f"about {total[False] / 60:.1f} "
        f"hours more. Minutes are estimated from each notebook's length "
        f"({WORDS_PER_MIN} words of prose or {CODE_LINES_PER_MIN} lines of code a minute), "
        "exercises apart."
    )
    return "\n".join(rows)


def head(path: Path) -> str:
    """The line under a lesson's title."""
    _, needed, core = LESSONS[path.stem]
    part = (
        f"core path, lesson {CORE.index(path.stem) + 1} of {len(CORE)}" if core
        else "deep dive, optional"
    )
    return f"*About {minutes(path)} minutes · {part} · needs: {_needs(path.stem)}.*"


def tail(path: Path, root: Path = ROOT) -> str:
    """The last cell of a lesson: its exercises and the next lesson."""
    stems = list(LESSONS)
    here = stems.index(path.stem)
    parts = []
    exercise = _exercise(path.stem, root)
    if exercise:
        parts.append(f"Exercises for this lesson: [{exercise}](../{exercise}).")
    if path.stem == CORE[-1]:
        parts.append(
            "That is the end of the core path: `scripts/ddp_template.py` is what it built, and "
            "your own script is next. The deep dives are optional, in any order: "
            + ", ".join(f"[`{s}`]({s}.ipynb)" for s in stems[here + 1:]) + "."
        )
    elif here + 1 < len(stems):
        following = stems[here + 1]
        kind = "" if LESSONS[following][2] else " (a deep dive, optional)"
        parts.append(f"Next: [`{following}`]({following}.ipynb){kind}.")
    else:
        parts.append("This is the last lesson. The course map is in [`00_setup`](00_setup.ipynb).")
    return "## Where next\n\n" + "\n".join(parts)


def _markdown(cell_id: str, text: str) -> dict:
    return {"cell_type": "markdown", "id": cell_id, "metadata": {}, "source": lines(text)}


def updated_notebook(path: Path, root: Path = ROOT) -> str:
    """The text ``path`` should have: with its head line, its last cell (and 00's map)."""
    notebook = json.loads(path.read_text(encoding="utf-8"))
    cells = [c for c in notebook["cells"] if c.get("id") not in (HEAD_ID, NEXT_ID, MAP_ID)]
    title = next(i for i, c in enumerate(cells) if "".join(c["source"]).startswith("# "))
    cells.insert(title + 1, _markdown(HEAD_ID, head(path)))  # (minutes skip these cells)
    if path.stem == "00_setup":
        cells.insert(title + 2, _markdown(MAP_ID, "## The course map\n\n" + table(root, "../")))
    cells.append(_markdown(NEXT_ID, tail(path, root)))
    return dumps({**notebook, "cells": cells})


def updated_readme(root: Path = ROOT) -> str:
    text = (root / "README.md").read_text(encoding="utf-8")
    start, end = README_MARKS
    before, rest = text.split(start, 1)
    _, after = rest.split(end, 1)
    return f"{before}{start}\n{table(root)}\n{end}{after}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if stale")
    parser.add_argument("--root", type=Path, default=ROOT, help="the course's checkout")
    args = parser.parse_args(argv)
    if sorted(LESSONS) != [p.stem for p in lesson_notebooks(args.root)]:
        raise SystemExit("LESSONS in tools/course_map.py must list every lesson notebook")
    targets = [(p, updated_notebook(p, args.root)) for p in lesson_notebooks(args.root)]
    targets.append((args.root / "README.md", updated_readme(args.root)))
    return write_or_check(targets, args.check, "course_map.py")

if __name__ == "__main__":
    sys.exit(main())
