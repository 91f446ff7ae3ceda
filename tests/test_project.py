"""Checks on the project itself: set-up commands, dependency lists, notebooks."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import tomllib
import yaml

ROOT = Path(__file__).resolve().parent.parent
LESSONS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```(?:bash|sh|console)\n(.*?)```", text, re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip()]


def test_readme_shows_exactly_two_commands_and_ci_runs_the_test_one():
    assert readme_commands() == ["make lab", "make test"]
    ci = [
        line.strip()
        for line in (ROOT / ".ci" / "run").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert ci[-1] == "make test"


def test_environment_yml_matches_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = set(project["dependencies"]) | set(project["optional-dependencies"]["test"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "pip" in conda
    assert any(d.startswith("python=3.") for d in conda)
    assert set(pip) - {"-e ."} == wanted
    assert "-e ." in pip


def test_torch_is_pinned_to_one_release():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert [d for d in deps if d.startswith("torch")] == ["torch==2.13.0"]


def test_lessons_are_numbered_in_syllabus_order():
    stems = [p.stem for p in LESSONS]
    assert stems[:7] == [
        "00_setup",
        "01_why_ddp",
        "02_spawn",
        "03_process_group",
        "04_sampler",
        "05_ddp_wrap",
        "06_full_script",
    ]


def cells(path: Path) -> list[dict]:
    return json.loads(path.read_text())["cells"]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_notebook_is_committed_with_outputs_and_no_stray_errors(path):
    code = [c for c in cells(path) if c["cell_type"] == "code"]
    assert any(c["outputs"] for c in code), "run the notebook and save it with its outputs"
    for cell in code:
        tags = cell.get("metadata", {}).get("tags", [])
        for output in cell["outputs"]:
            if output["output_type"] == "error":
                assert "raises-exception" in tags, "".join(cell["source"])[:80]


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_notebook_code_lines_are_short(path):
    for cell in cells(path):
        if cell["cell_type"] == "code":
            for line in "".join(cell["source"]).splitlines():
                assert len(line) <= 78, f"{path.name}: {line}"


@pytest.mark.parametrize("stage", ["02", "03", "04", "05", "06", "08"])
def test_stage_notebook_writes_its_worker_and_spawns_it(stage):
    path = next(p for p in LESSONS if p.stem.startswith(stage))
    sources = ["".join(c["source"]) for c in cells(path) if c["cell_type"] == "code"]
    writes = [
        i for i, s in enumerate(sources) if s.startswith(f"%%writefile workers/stage_{stage}.py")
    ]
    assert writes, f"{path.name} has no %%writefile cell for workers/stage_{stage}.py"
    launch_cell = next(
        s for s in sources[writes[0] + 1 :] if f"import workers.stage_{stage} as worker" in s
    )
    assert "importlib.reload(worker)" in launch_cell
    assert "with launch.bounded(" in launch_cell
    assert re.search(r"mp\.spawn\(worker\.main, args=\(world_size,", launch_cell)
    assert "nprocs=world_size" in launch_cell


def test_nbval_ignores_only_with_a_reason():
    for path in LESSONS:
        for cell in cells(path):
            lines = "".join(cell["source"]).splitlines()
            for i, line in enumerate(lines):
                if line.strip() == "# NBVAL_IGNORE_OUTPUT":
                    reason = lines[i + 1] if i + 1 < len(lines) else ""
                    assert reason.startswith("# ("), (
                        f"{path.name}: give the reason on the next line"
                    )


def test_generated_workers_are_not_tracked():
    ignore = (ROOT / ".gitignore").read_text()
    assert "notebooks/workers/*" in ignore
