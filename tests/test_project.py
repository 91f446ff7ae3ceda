"""Checks on the project itself: set-up commands, dependency lists, notebooks."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10 (below requires-python): pip's tomli
    from pip._vendor import tomli as tomllib

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
    assert "make test" in ci, ".ci/run must run the README's test command"


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _conda_pip(name: str) -> tuple[dict, list[str]]:
    env = yaml.safe_load((ROOT / name).read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    return env, pip


def test_conda_files_match_pyproject():
    project = _project()
    env, pip = _conda_pip("environment.yml")
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    assert "pip" in conda
    python = next(d for d in conda if d.startswith("python="))
    low = project["requires-python"].split(",")[0].removeprefix(">=")
    assert python == f"python={low}", "the conda file's Python is the lowest supported one"
    assert "--constraint constraints.txt" in pip and "-e ." in pip
    assert set(pip) - {"-e .", "--constraint constraints.txt"} == set(project["dependencies"])

    env_test, pip_test = _conda_pip("environment-test.yml")
    assert env_test["name"] == env["name"]
    assert "--constraint constraints.txt" in pip_test
    wanted = set(project["optional-dependencies"]["test"])
    assert set(pip_test) - {"--constraint constraints.txt"} == wanted


def _constraints() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, sep, version = line.partition("==")
            assert sep and version, f"constraints.txt pins exact versions: {line!r}"
            pins[name.strip().lower()] = version.strip()
    return pins


def test_constraints_pin_what_the_compared_outputs_depend_on():
    from packaging.requirements import Requirement

    pins = _constraints()
    assert {"numpy", "scikit-learn", "ipywidgets"} <= set(pins)
    assert "torch" not in pins, "torch is pinned once, in pyproject.toml"
    project = _project()
    for dep in project["dependencies"] + project["optional-dependencies"]["test"]:
        requirement = Requirement(dep)
        if requirement.name.lower() in pins:
            version = pins[requirement.name.lower()]
            assert requirement.specifier.contains(version), (
                f"constraints.txt pins {requirement.name}=={version}, outside pyproject's {dep}"
            )


def test_this_environment_follows_the_constraints():
    from importlib.metadata import version

    for name, pinned in _constraints().items():
        assert version(name) == pinned, (
            f"{name} {version(name)} is installed, constraints.txt pins {pinned}: "
            "the notebooks' compared outputs were made with the pinned version; "
            "reinstall with: make install-test (or pip install -c constraints.txt -e '.[test]')"
        )


def test_makefile_installs_both_layers_with_the_constraints():
    makefile = (ROOT / "Makefile").read_text()
    assert "$(PIP) install --constraint $(CONSTRAINTS) -e ." in makefile
    assert "$(PIP) install --constraint $(CONSTRAINTS) -r $(VENV)/test-requirements.txt" in makefile
    assert "CONSTRAINTS := constraints.txt" in makefile
    assert "tools/install_torch.py" in makefile


def test_torch_is_pinned_to_one_release():
    deps = _project()["dependencies"]
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


def test_ddp_setup_is_written_where_it_is_taught_and_imported_after():
    """03 writes ddp_setup, 08 its torchrun form; later workers import 03's, unchanged."""
    import inspect

    from ddp_lesson import group

    written = {}
    for path in LESSONS:
        for cell in cells(path):
            source = "".join(cell["source"])
            if source.startswith("%%writefile") and "def ddp_setup(" in source:
                written[source.split()[1]] = source
    assert sorted(written) == [
        "workers/stage_03.py", "workers/stage_08.py", "workers/stage_09.py",
    ], sorted(written)  # fmt: skip
    taught = re.search(r"def ddp_setup\(rank.*?    return device\n", written["workers/stage_03.py"],
                       re.S)[0]  # fmt: skip
    assert taught == inspect.getsource(group.ddp_setup), "03's ddp_setup and group's differ"


#: The most a lesson notebook holds: words of prose and lines of code.
MOST_WORDS, MOST_CODE_LINES = 2000, 400


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_a_lesson_fits_one_sitting(path):
    words = code = 0
    for cell in cells(path):
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            words += len(text.split())
        elif cell["cell_type"] == "code":
            code += len(text.splitlines())
    assert words <= MOST_WORDS, f"{path.name}: {words} words; split it or say less"
    assert code <= MOST_CODE_LINES, f"{path.name}: {code} code lines; split it or show less"


def measuring_lines(source: str) -> list[str]:
    """The lines of a worker that serve only its notebook's measurements.

    The comment and the import from ``ddp_lesson.measures``, a line that ends
    with the comment, and every line that calls or decorates with a name
    that import brought in.
    """
    from ddp_lesson.sources import MEASURES_TAG

    lines = source.splitlines()
    names = set()
    for line in lines:
        found = re.match(r"from ddp_lesson\.measures\.\w+ import (.+)", line)
        if found:
            names |= {name.strip() for name in found[1].split(",")}
    used = re.compile(r"(^|[^\w.])(" + "|".join(map(re.escape, names)) + r")\(|^\s*@(" +
                      "|".join(map(re.escape, names)) + r")\b") if names else None
    return [
        line for line in lines
        if MEASURES_TAG in line or line.startswith("from ddp_lesson.measures.")
        or (used is not None and used.search(line))
    ]  # fmt: skip


def test_what_a_lesson_worker_measures_is_a_few_lines_of_it():
    """At most 5% of the lesson workers' lines serve the notebooks' measurements."""
    total = measuring = 0
    for path in LESSONS:
        for cell in cells(path):
            source = "".join(cell["source"])
            if cell["cell_type"] == "code" and re.match(r"%%writefile workers/\w+\.py", source):
                total += len(source.splitlines())
                measuring += len(measuring_lines(source))
                assert "# ---- what this notebook measures" not in source, (
                    f"{path.name}: move the measuring section to ddp_lesson/measures/"
                )
    assert measuring <= 0.05 * total, f"{measuring} of {total} worker lines measure"


#: A figure in prose: a decimal, a number of three or more digits, or a count
#: of percent, times, milliseconds, seconds or bytes.
FIGURE = re.compile(
    r"(?<![\w.`/#-])(\d+\.\d+|\d{3,}(?:,\d{3})*|\d+(?=\s?(?:%|×|x\b|ms\b|MB\b|KB\b|s\b)))(?!\d|\.\d|,\d)"
)


#: A release named in prose ("torch 2.6", "Python 3.11"): a fact, not a figure of the run.
VERSION = r"\b(?:torch|PyTorch|Python|CUDA|NCCL|release|version)s?\s+\d+(?:\.\d+)+"

#: Cells that tools write (checked by their own --check): the badge, the course map.
GENERATED = ("colab-badge", "course-map")


def facts_not_measured() -> dict[str, str]:
    """Figures prose may quote without a run: sizes computed here, and fixed facts."""
    from ddp_lesson import data

    return {
        str(len(data.digits("train"))): "training images of the digits data set",
        str(len(data.digits("test"))): "test images of the digits data set",
        "29500": "torchrun's default port before it picked a free one",
        "135712": "a PyTorch issue number",
    }


@pytest.mark.parametrize("path", LESSONS, ids=lambda p: p.stem)
def test_figures_in_the_prose_come_from_the_run(path):
    """A figure the prose quotes appears in the notebook's saved outputs or code."""
    run = ""
    for cell in cells(path):
        if cell["cell_type"] == "code":
            run += "".join(cell["source"])
            for output in cell["outputs"]:
                run += "".join(output.get("text", ""))
                run += "".join(output.get("data", {}).get("text/plain", ""))
    known = facts_not_measured()
    for cell in cells(path):
        if cell["cell_type"] != "markdown" or cell.get("id", "").startswith(GENERATED):
            continue  # the course map's figures are computed by tools/course_map.py
        prose = re.sub(r"`[^`]*`|\]\([^)]*\)|" + VERSION, " ", "".join(cell["source"]))
        for figure in FIGURE.findall(prose):
            plain = figure.replace(",", "")
            assert figure in run or plain in run or plain in known, (
                f"{path.name}: the prose quotes {figure}, which no output of this "
                "notebook shows: print it from the run, or drop it"
            )


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


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_installs_each_layer_once(tmp_path):
    """`make lab` after `make test` installs nothing; `make test` after it adds the extras."""
    for name in ("Makefile", "pyproject.toml", "constraints.txt", "tools/install_torch.py"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    venv_bin = tmp_path / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").write_text("#!/bin/sh\n")
    (venv_bin / "python").chmod(0o755)
    names = ("pyproject.toml", "constraints.txt", "tools/install_torch.py")
    sources = [tmp_path / n for n in names]
    lab, test = tmp_path / ".venv" / ".installed-lab", tmp_path / ".venv" / ".installed-test"

    def make(*args: str) -> subprocess.CompletedProcess:
        # make's messages in English, and no "Entering directory" when make runs the tests
        env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL")}
        env["LC_ALL"] = "C"
        command = ["make", "--no-print-directory", "-n", *args]
        return subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)

    def stamp(path: Path, age: int) -> None:
        path.touch()
        os.utime(path, (1_000_000 - age, 1_000_000 - age))

    for source in sources:
        stamp(source, 300)
    plan = make("install").stdout
    assert "tools/install_torch.py" in plan and "-e ." in plan and "test-requirements" not in plan

    stamp(lab, 200)
    assert "tools/install_torch.py" not in make("install").stdout
    plan = make("install-test").stdout
    assert "test-requirements.txt" in plan and "tools/install_torch.py" not in plan
    assert " -e ." not in plan

    stamp(test, 100)
    for target in ("install", "install-test"):
        assert "Nothing to be done" in make(target).stdout, target

    stamp(tmp_path / "pyproject.toml", 50)  # a changed dependency list: both layers again
    plan = make("install-test").stdout
    assert "tools/install_torch.py" in plan and "test-requirements.txt" in plan


#: A plugin that prints, for each notebook collected, whether nbval compares its outputs.
SPY = '''
import pytest

@pytest.hookimpl(trylast=True)
def pytest_collectstart(collector):
    if collector.path.suffix == ".ipynb":
        print("COMPARES", collector.path.parent.name, collector.compare_outputs)
'''


def test_one_run_compares_lessons_and_solutions_but_not_exercises(tmp_path):
    # make test is one pytest run (on several workers): the exercise notebooks are
    # in it, executed but not compared, while the lessons and solutions are compared
    (tmp_path / "compare_spy.py").write_text(SPY)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(tmp_path), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("PYTEST_ADDOPTS", None)  # options given to the outer run are not this one's
    notebooks = [f"{folder}/04_sampler.ipynb" for folder in ("notebooks", "solutions", "exercises")]
    said = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-s", "-p", "compare_spy",
         *notebooks],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    ).stdout
    assert "COMPARES notebooks True" in said and "COMPARES solutions True" in said, said
    assert "COMPARES exercises False" in said, said


def root_rules(folder: Path):
    """A copy of the repository's top conftest.py in ``folder``, imported under a name of its own.

    A copy: its lock is its own file, not the one the run's other workers take turns on.
    """
    import importlib.util

    copy = folder / "root_conftest.py"
    shutil.copyfile(ROOT / "conftest.py", copy)
    spec = importlib.util.spec_from_file_location("root_conftest", copy)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_items_on_the_tutorials_fixed_port_take_turns(tmp_path):
    # Two items binding port 12355 at once (on two pytest-xdist workers) would find it
    # taken: a notebook whose code binds it, or a test marked fixed_port, waits its turn.
    import fcntl
    import threading

    rules = root_rules(tmp_path)
    binders = {p.relative_to(ROOT).as_posix() for p in ROOT.glob("*/*.ipynb")
               if rules.binds_fixed_port(p)}  # fmt: skip
    assert {"solutions/06_full_script.ipynb", "exercises/06_full_script.ipynb"} <= binders
    assert "notebooks/06_full_script.ipynb" not in binders  # it names the port in comments only
    for test_file in (ROOT / "tests").rglob("test_*.py"):
        code = [line.split("#", 1)[0] for line in test_file.read_text().splitlines()]
        if any(str(rules.FIXED_PORT) in line for line in code):
            assert any("mark.fixed_port" in line for line in code), test_file

    class Item:
        def __init__(self, marked: bool):
            self.marked = marked

        def get_closest_marker(self, name):
            return name if self.marked and name == "fixed_port" else None

    entered = threading.Event()

    def run_marked():
        protocol = rules.pytest_runtest_protocol(Item(True), None)
        next(protocol)
        entered.set()
        next(protocol, None)  # the item is done: the lock is let go

    with open(rules.__file__, "rb") as other_worker:
        fcntl.flock(other_worker, fcntl.LOCK_EX)  # another worker's item holds it
        next(rules.pytest_runtest_protocol(Item(False), None))  # unmarked: no waiting
        marked = threading.Thread(target=run_marked)
        marked.start()
        assert not entered.wait(0.5), "a marked item ran while another held the port"
        fcntl.flock(other_worker, fcntl.LOCK_UN)
        assert entered.wait(120), "waited 120 s for the marked item to run once the port was free"
    marked.join(120)
    assert not marked.is_alive(), "waited 120 s for the marked item to let the port go"
    with open(rules.__file__, "rb") as after:  # and let go once done
        fcntl.flock(after, fcntl.LOCK_EX | fcntl.LOCK_NB)  # (nobody else locks the copy)


def test_workers_are_handed_the_longest_files_first(tmp_path):
    # make test's workers take whole files in the order they collected them; the
    # files that took longest in a measured run go first, so that no long file is
    # left to the end while the other workers have nothing to do
    rules = root_rules(tmp_path)

    class Item:
        def __init__(self, nodeid: str):
            self.nodeid = nodeid

    items = [Item(n) for n in ("a.py::x", "b.ipynb::Cell 0", "a.py::z", "new.py::w",
                               "b.ipynb::Cell 1", "short.py::v")]  # fmt: skip
    rules.longest_first(items, {"a.py": 2.0, "b.ipynb": 9.0, "short.py": 0.5, "gone.py": 3.0})
    # a file the figures do not know yet goes where a file of median length would
    assert [i.nodeid for i in items] == [
        "b.ipynb::Cell 0", "b.ipynb::Cell 1", "new.py::w", "a.py::x", "a.py::z", "short.py::v"]
    collected = [Item(n) for n in ("z.py::a", "a.py::b", "z.py::c")]
    rules.longest_first(collected, {})  # no figures: the collected order stays
    assert [i.nodeid for i in collected] == ["z.py::a", "a.py::b", "z.py::c"]

    # the recorder sums setup, call and teardown per file; its file reads back the same
    class Report:
        def __init__(self, nodeid: str, duration: float):
            self.nodeid, self.duration = nodeid, duration

    written = tmp_path / "durations.txt"
    recorder = rules.DurationRecorder(str(written))
    for nodeid, seconds in [("a.py::x", 1.0), ("a.py::x", 0.5), ("b.ipynb::Cell 3", 4.0)]:
        recorder.pytest_runtest_logreport(Report(nodeid, seconds))
    recorder.pytest_sessionfinish(None)
    assert rules.read_durations(written) == {"b.ipynb": 4.0, "a.py": 1.5}
    assert rules.read_durations(tmp_path / "missing.txt") == {}

    # the committed figures name files that exist
    listed = rules.read_durations(ROOT / "tests" / "durations.txt")
    assert len(listed) > 50 and all((ROOT / name).is_file() for name in listed), sorted(listed)
