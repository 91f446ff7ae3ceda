"""How the course gets installed: torch's build, the Colab set-up cell, the GPU check.

The fast tests run in every `make test`. Two slow ones build whole fresh
environments (a few minutes each) and run only when asked:

    DDP_LESSON_INSTALL_TESTS=1 .venv/bin/python -m pytest tests/test_install.py -k fresh
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import colab_cells  # noqa: E402
import course_map  # noqa: E402
import course_meta  # noqa: E402
import gpu_check  # noqa: E402
import install_course  # noqa: E402
import install_torch  # noqa: E402

PIN = course_meta.torch_pin()
SLOW = pytest.mark.skipif(
    os.environ.get("DDP_LESSON_INSTALL_TESTS") != "1",
    reason="builds a fresh environment (minutes): set DDP_LESSON_INSTALL_TESTS=1 to run it",
)


def test_tools_doctests():
    import doctest

    for module in (install_torch, install_course, colab_cells):
        assert doctest.testmod(module).failed == 0, module.__name__


# -- choosing torch's build --------------------------------------------------------
CUDA_PLAN = [
    {"metadata": {"name": "torch", "version": PIN}},
    {"metadata": {"name": "nvidia-cudnn-cu13", "version": "9"}},
    {"metadata": {"name": "nvidia_nccl_cu13", "version": "2"}},
    {"metadata": {"name": "sympy", "version": "1"}},
]


def test_cpu_build_only_where_pip_plans_cuda_and_there_is_no_driver():
    cuda = install_torch.cuda_packages(CUDA_PLAN)
    assert cuda == ["nvidia-cudnn-cu13", "nvidia-nccl-cu13"]
    assert install_torch.choose("auto", cuda, gpu=False)[0] == "cpu"
    assert install_torch.choose("auto", cuda, gpu=True)[0] == "default"
    assert install_torch.choose("auto", [], gpu=False)[0] == "default"
    assert install_torch.choose("cpu", [], gpu=True)[0] == "cpu"
    assert install_torch.choose("default", cuda, gpu=False)[0] == "default"
    reason = install_torch.choose("auto", cuda, gpu=False)[1]
    assert "nvidia-smi" in reason and "2 CUDA packages" in reason


def test_torch_pin_is_read_from_pyproject():
    deps = course_meta.pyproject()["project"]["dependencies"]
    assert f"torch=={PIN}" in deps


def _wheel(folder: Path, name: str, version: str, requires: list[str] = ()) -> None:
    """A minimal installable wheel: a package that only records its version."""
    dist = f"{name.replace('-', '_')}-{version}"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    files = {
        f"{name.replace('-', '_')}/__init__.py": f"__version__ = {version!r}\n",
        f"{dist}.dist-info/METADATA": metadata,
        f"{dist}.dist-info/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [*files, f"{dist}.dist-info/RECORD"]
    files[f"{dist}.dist-info/RECORD"] = "".join(f"{f},,\n" for f in record)
    project = folder / name
    project.mkdir(parents=True, exist_ok=True)
    filename = f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(project / filename, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    links = "".join(f'<a href="{p.name}">{p.name}</a>\n' for p in sorted(project.glob("*.whl")))
    (project / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")


@pytest.fixture(scope="module")
def pip_world(tmp_path_factory):
    """A fresh venv and three local indexes standing in for PyPI and PyTorch's CPU index."""
    base = tmp_path_factory.mktemp("pip-world")
    cuda_pypi, plain_pypi, cpu_index = base / "cuda", base / "plain", base / "cpu"
    _wheel(cuda_pypi, "torch", PIN, ["nvidia-fake-cu13"])
    _wheel(cuda_pypi, "nvidia-fake-cu13", "13.0")
    _wheel(plain_pypi, "torch", PIN)
    _wheel(cpu_index, "torch", f"{PIN}+cpu")
    # a venv with this environment's pip copied in: much quicker than ensurepip
    venv.create(base / "venv", with_pip=False)
    site = next((base / "venv" / "lib").glob("python3.*/site-packages"))
    import pip

    source = Path(pip.__file__).parent
    shutil.copytree(source, site / "pip")
    for info in source.parent.glob("pip-*.dist-info"):
        shutil.copytree(info, site / info.name)
    return base


def _run_install_torch(world: Path, index: str, cpu_index: str, *, gpu: bool, keep=False):
    """Run tools/install_torch.py in the test venv against local indexes; returns (run, torch)."""
    python = world / "venv" / "bin" / "python"
    site = next((world / "venv" / "lib").glob("python3.*/site-packages"))
    if not keep:  # start without torch (quicker than pip uninstall)
        for path in [*site.glob("torch*"), *site.glob("nvidia_fake*")]:
            shutil.rmtree(path)
    bin_dir = world / ("gpu-bin" if gpu else "no-gpu-bin")
    bin_dir.mkdir(exist_ok=True)
    if gpu:
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/bin/sh\nexit 0\n")
        smi.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(
        PATH=f"{bin_dir}:{python.parent}",  # no nvidia-smi of this machine's
        PIP_CONFIG_FILE=os.devnull,  # no pip configuration of this machine's
        PIP_INDEX_URL=(world / index).as_uri(),
        PIP_NO_CACHE_DIR="1",
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    command = [python, ROOT / "tools" / "install_torch.py", "--cpu-index", cpu_index]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    init = site / "torch" / "__init__.py"
    version = init.read_text().split("'")[1] if init.exists() else ""
    return done, version


@pytest.mark.skipif(sys.platform != "linux", reason="the CUDA build question is a Linux one")
def test_install_torch_takes_the_cpu_index_only_when_pip_plans_cuda_without_a_driver(pip_world):
    cpu = (pip_world / "cpu").as_uri()
    nowhere = (pip_world / "no-such-index").as_uri()

    done, version = _run_install_torch(pip_world, "cuda", cpu, gpu=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert version == f"{PIN}+cpu", done.stdout
    assert "taking the CPU build" in done.stdout and "TORCH=default" in done.stdout

    done, version = _run_install_torch(pip_world, "cuda", nowhere, gpu=False, keep=True)
    assert done.returncode == 0 and "installed already" in done.stdout
    assert version == f"{PIN}+cpu"

    done, version = _run_install_torch(pip_world, "cuda", nowhere, gpu=True)
    assert done.returncode == 0, done.stdout + done.stderr
    assert version == PIN and "CUDA build" in done.stdout

    # a build without CUDA packages is taken as offered; the CPU index is never asked
    done, version = _run_install_torch(pip_world, "plain", nowhere, gpu=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert version == PIN and "no CUDA packages" in done.stdout


@pytest.mark.skipif(sys.platform != "linux", reason="the CUDA build question is a Linux one")
def test_install_torch_failure_names_the_way_out(pip_world):
    nowhere = (pip_world / "no-such-index").as_uri()
    done, version = _run_install_torch(pip_world, "cuda", nowhere, gpu=False)
    assert done.returncode == 1 and version == "", done.stdout + done.stderr
    assert "FAILED" in done.stdout
    assert "TORCH=default" in done.stdout and "TORCH_CPU_INDEX" in done.stdout

    done, _ = _run_install_torch(pip_world, "no-such-index", nowhere, gpu=False)
    assert done.returncode == 1
    assert f"https://pypi.org/project/torch/{PIN}/#files" in done.stdout


# -- the Colab badge and set-up cell -----------------------------------------------
LESSONS = colab_cells.lesson_notebooks()


def test_the_course_map_its_head_lines_and_next_links_are_current():
    assert course_map.main(["--check"]) == 0, "run: python tools/course_map.py"
    for path in LESSONS:
        cells = json.loads(path.read_text())["cells"]
        head = "".join(next(c for c in cells if c.get("id") == course_map.HEAD_ID)["source"])
        assert f"About {course_map.minutes(path)} minutes" in head
        assert cells[-1]["id"] == course_map.NEXT_ID, f"{path.name} does not end with its links"
        for link in re.findall(r"\]\(([^)]+\.ipynb)\)", "".join(cells[-1]["source"])):
            assert (path.parent / link).resolve().exists(), f"{path.name}: {link} is missing"
    mapped = (ROOT / "README.md").read_text()
    assert all(f"notebooks/{p.name}" in mapped for p in LESSONS)


def test_every_lesson_has_the_current_badge_and_setup_cell():
    assert LESSONS
    assert colab_cells.main(["--check"]) == 0, "run: python tools/colab_cells.py"
    url = course_meta.repository_url()
    for path in LESSONS:
        cells = json.loads(path.read_text())["cells"]
        assert cells[0]["id"] == colab_cells.BADGE_ID
        badge = "".join(cells[0]["source"])
        assert f"github/{url.removeprefix('https://github.com/')}/blob/" in badge
        assert badge.split(")](")[1].startswith("https://colab.research.google.com/")
        assert f"/notebooks/{path.name})" in badge
        code = [c for c in cells if c["cell_type"] == "code"]
        assert code[0]["id"] == colab_cells.SETUP_ID, f"{path.name}: set-up cell is not first"
        assert code[0]["outputs"] == [] and code[0]["execution_count"] == 1
        assert f'REPO = "{url}"' in "".join(code[0]["source"])
        counts = [c["execution_count"] for c in code if c["execution_count"] is not None]
        assert counts == list(range(1, len(counts) + 1)), f"{path.name}: {counts}"


def test_inserting_the_cells_twice_changes_nothing():
    path = LESSONS[0]
    notebook = json.loads(path.read_text())
    url = course_meta.repository_url()
    badge, setup = colab_cells.badge_source(path.name, url), colab_cells.setup_source(url, PIN)
    once = colab_cells.with_cells(json.loads(json.dumps(notebook)), badge, setup)
    twice = colab_cells.with_cells(json.loads(json.dumps(once)), badge, setup)
    assert colab_cells.dumps(once) == colab_cells.dumps(twice) == path.read_text()


def test_new_notebook_gets_both_cells(tmp_path):
    notebook = {
        "cells": [
            {"cell_type": "markdown", "id": "t", "metadata": {}, "source": ["# 11 · New\n"]},
            {"cell_type": "code", "execution_count": 1, "id": "c", "metadata": {},
             "outputs": [{"output_type": "execute_result", "execution_count": 1,
                          "data": {"text/plain": "2"}, "metadata": {}}],
             "source": ["1 + 1"]},
        ],
        "metadata": {}, "nbformat": 4, "nbformat_minor": 5,
    }  # fmt: skip
    result = colab_cells.with_cells(notebook, "badge", "setup")
    assert [c["id"] for c in result["cells"]] == ["colab-badge", "t", "course-setup", "c"]
    assert result["cells"][3]["execution_count"] == 2
    assert result["cells"][3]["outputs"][0]["execution_count"] == 2


def _setup_source() -> str:
    cells = json.loads(LESSONS[0].read_text())["cells"]
    return "".join(next(c for c in cells if c.get("id") == colab_cells.SETUP_ID)["source"])


def test_setup_cell_does_nothing_where_the_course_is_installed(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _setup_source() + "\nprint(os.getcwd())"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{tmp_path}\n" and done.stderr == ""
    assert list(tmp_path.iterdir()) == []


def test_setup_cell_moves_into_an_earlier_clone_after_a_restart(tmp_path):
    (tmp_path / "ddp-lesson" / "notebooks").mkdir(parents=True)
    done = subprocess.run(
        [sys.executable, "-c", _setup_source() + "\nprint(os.getcwd())"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"{tmp_path / 'ddp-lesson' / 'notebooks'}\n"


def test_course_install_leaves_out_jupyter_and_a_present_torch():
    keep = install_course.dependencies(ROOT, keep_torch=True)
    fresh = install_course.dependencies(ROOT, keep_torch=False)
    names = {install_course.requirement_name(d) for d in keep}
    assert "torch" not in names and "jupyterlab" not in names and "ipykernel" not in names
    assert f"torch=={PIN}" in fresh and "scikit-learn" in names


def _checkout_copy(dest: Path, basetemp: Path) -> Path:
    """This working tree's files (tracked and new, not ignored) in a new git repository."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split("\0")  # fmt: skip
    for name in filter(None, listed):
        source = ROOT / name
        # pytest's temporary folders may lie inside the checkout (--basetemp): never copied
        if source.is_file() and not source.resolve().is_relative_to(basetemp.resolve()):
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    subprocess.run([*git, "init", "-q"], cwd=dest, check=True)
    subprocess.run([*git, "add", "-A"], cwd=dest, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "copy"], cwd=dest, check=True)
    return dest


@SLOW
def test_fresh_setup_cell_clones_installs_and_moves_into_the_notebooks(tmp_path, tmp_path_factory):
    repo = _checkout_copy(tmp_path / "repo", tmp_path_factory.getbasetemp())
    venv.create(tmp_path / "venv", with_pip=True)
    python = tmp_path / "venv" / "bin" / "python"
    work = tmp_path / "colab"
    work.mkdir()
    probe = (
        "\nimport ddp_lesson, torch\nprint('cwd', os.getcwd())\nprint('pkg', ddp_lesson.__file__)"
    )
    env = {**os.environ, "DDP_LESSON_REPO": str(repo)}
    done = subprocess.run(
        [python, "-c", _setup_source() + probe], cwd=work, env=env,
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"cwd {work / 'ddp-lesson' / 'notebooks'}" in done.stdout
    assert f"pkg {work / 'ddp-lesson' / 'ddp_lesson' / '__init__.py'}" in done.stdout
    assert "[torch] torch" in done.stdout and "the course is installed" in done.stdout
    # a new process (a spawned rank, the next kernel) finds the course too
    check = subprocess.run([python, "-c", "import ddp_lesson"], cwd=tmp_path)
    assert check.returncode == 0

    # a machine that already has torch (Colab) keeps it and adds the course
    subprocess.run([python, "-m", "pip", "uninstall", "-q", "-y", "ddp-lesson"], check=True)
    again = tmp_path / "colab-again"
    again.mkdir()
    done = subprocess.run(
        [python, "-c", _setup_source() + probe], cwd=again, env=env,
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "keeping this machine's torch" in done.stdout
    assert f"cwd {again / 'ddp-lesson' / 'notebooks'}" in done.stdout


def _readme_route_without_make() -> list[str]:
    """The indented commands under the README's "Without make", in order."""
    text = (ROOT / "README.md").read_text()
    section = text.split("### Without make\n", 1)[1]
    block = section.split("\n\n    ", 1)[1].split("\n\n", 1)[0]
    return [line.strip() for line in ("    " + block).splitlines()]


def test_readme_route_without_make_uses_the_constraints():
    commands = _readme_route_without_make()
    assert commands[0] == "python3 -m venv .venv"
    assert ".venv/bin/python -m pip install --constraint constraints.txt -e ." in commands
    assert commands[-1] == ".venv/bin/jupyter lab notebooks/00_setup.ipynb"


@SLOW
def test_fresh_venv_without_make_runs_the_setup_notebook(tmp_path, tmp_path_factory):
    """The README's route without make, run as written, then the first notebook."""
    repo = _checkout_copy(tmp_path / "repo", tmp_path_factory.getbasetemp())
    for command in _readme_route_without_make()[:-1]:  # all but opening JupyterLab
        command = command.replace("python3 ", f"{sys.executable} ", 1)
        subprocess.run(command, shell=True, cwd=repo, check=True, timeout=1800)
    bin_dir = repo / ".venv" / "bin"
    out = tmp_path / "00_setup.out.ipynb"
    subprocess.run(
        [bin_dir / "jupyter", "nbconvert", "--to", "notebook", "--execute",
         "notebooks/00_setup.ipynb", "--output", out],
        cwd=repo, check=True, timeout=600,
    )  # fmt: skip
    executed = json.loads(out.read_text())
    text = json.dumps([c.get("outputs") for c in executed["cells"]])
    assert f"torch {PIN}" in text and "backend: gloo" in text
    doctor = subprocess.run([bin_dir / "ddp-doctor", "--help"], capture_output=True, text=True)
    assert doctor.returncode == 0 and "usage" in doctor.stdout.lower()


# -- the notebook check for GPU machines -------------------------------------------
def _notebook(cells: list[tuple[str, list, list]]) -> dict:
    """A notebook whose code cells are (source, saved outputs, tags)."""
    return {
        "cells": [
            {"cell_type": "code", "execution_count": i + 1, "id": f"c{i}",
             "metadata": {"tags": tags}, "outputs": outputs, "source": source}
            for i, (source, outputs, tags) in enumerate(cells)
        ],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                    "language": "python"}},
        "nbformat": 4, "nbformat_minor": 5,
    }  # fmt: skip


def _stdout(text: str) -> list:
    return [{"output_type": "stream", "name": "stdout", "text": text}]


def test_comparison_follows_nbval_rules():
    patterns = gpu_check.get_sanitize_patterns(gpu_check.SANITIZE.read_text())
    import nbformat

    same = nbformat.from_dict(_stdout("a\n") + _stdout("b\n"))
    assert gpu_check.difference(same, nbformat.from_dict(_stdout("a\nb\n")), patterns) == ""
    written = nbformat.from_dict(_stdout("Writing workers/x.py\n"))
    rewritten = nbformat.from_dict(_stdout("Overwriting workers/x.py\n"))
    assert gpu_check.difference(written, rewritten, patterns) == ""
    changed = gpu_check.difference(same, nbformat.from_dict(_stdout("a\nc\n")), patterns)
    assert "-b" in changed and "+c" in changed
    image = [{"output_type": "display_data", "metadata": {},
              "data": {"image/png": "AAAA", "text/plain": "<Figure>"}}]  # fmt: skip
    other = [{"output_type": "display_data", "metadata": {},
              "data": {"image/png": "BBBB", "text/plain": "<Figure>"}}]  # fmt: skip
    image, other = nbformat.from_dict(image), nbformat.from_dict(other)
    assert gpu_check.difference(image, other, patterns) == ""


def test_gpu_check_runs_a_notebook_and_reports_differences(tmp_path):
    """00_setup run by the check: its own cells match; planted cells after them do not."""
    lesson = json.loads((ROOT / "notebooks" / "00_setup.ipynb").read_text())
    own = sum(c["cell_type"] == "code" for c in lesson["cells"])
    error = [{"output_type": "error", "ename": "ValueError", "evalue": "bad", "traceback": []}]
    planted = _notebook([
        ("print(2)", _stdout("3\n"), []),
        ("raise ValueError('bad')", error, ["raises-exception"]),
        ("1 / 0", [], []),
        ("# NBVAL_IGNORE_OUTPUT\n# (a clock)\nprint(4)", _stdout("5\n"), []),
        ("print('Overwriting workers/w.py')", _stdout("Writing workers/w.py\n"), []),
    ])  # fmt: skip
    for cell in planted["cells"]:
        cell["execution_count"] += own
    lesson["cells"] += planted["cells"]
    folder = tmp_path / "notebooks"
    (folder / "workers").mkdir(parents=True)
    (folder / "workers" / "__init__.py").touch()
    (folder / "00_setup.ipynb").write_text(json.dumps(lesson))
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, ROOT / "tools" / "gpu_check.py", folder / "00_setup.ipynb", "--out", out],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    report = (out / "report.md").read_text()
    assert "0 of 1 notebooks match" in report
    assert f"| notebooks/00_setup.ipynb | {own + 5} |" in report
    assert f"### Cell {own} (differs): `print(2)`" in report and "-3" in report and "+2" in report
    assert f"### Cell {own + 2} (error): `1 / 0`" in report and "ZeroDivisionError" in report
    assert report.count("### Cell ") == 2, report  # the lesson's own cells all match
    assert "backends built in: nccl" in report and "torch " in report
    assert (out / "notebooks" / "00_setup" / "00_setup.run.ipynb").exists()
    # nothing committed changed: the notebook ran on a copy in a folder of its own
    assert not (folder / "00_setup.run.ipynb").exists()


# -- files that describe the environment -------------------------------------------
def test_binder_installs_the_cpu_build_and_the_course():
    requirements = (ROOT / "binder" / "requirements.txt").read_text().splitlines()
    lines = [line.strip() for line in requirements if line.strip() and not line.startswith("#")]
    assert f"--extra-index-url {install_torch.CPU_INDEX}" in lines
    assert f"torch=={PIN}+cpu" in lines
    post_build = (ROOT / "binder" / "postBuild").read_text()
    assert post_build.startswith("#!") and os.access(ROOT / "binder" / "postBuild", os.X_OK)
    assert "pip install" in post_build and "--constraint constraints.txt -e ." in post_build
    runtime = (ROOT / "binder" / "runtime.txt").read_text().strip()
    assert runtime.startswith("python-3.")
    minor = int(runtime.split(".")[1])
    low, high = _supported_minors()
    assert low <= minor <= high


def _supported_minors() -> tuple[int, int]:
    spec = course_meta.pyproject()["project"]["requires-python"]
    parts = dict(p.strip().split("3.", 1) for p in spec.split(","))
    return int(parts[">="]), int(parts["<"]) - 1


def test_supported_pythons_agree_across_pyproject_makefile_and_readme():
    low, high = _supported_minors()
    makefile = (ROOT / "Makefile").read_text()
    assert f"(3, {low}) <= sys.version_info[:2] <= (3, {high})" in makefile
    readme = (ROOT / "README.md").read_text()
    for minor in range(low, high + 1):
        assert f"| Linux x86_64 | 3.{minor} |" in readme


def test_readme_links_to_colab_and_binder_from_the_one_repository_url():
    url = course_meta.repository_url()
    path = url.removeprefix("https://github.com/")
    readme = (ROOT / "README.md").read_text()
    binder = f"https://mybinder.org/v2/gh/{path}/HEAD?urlpath=lab/tree/notebooks/00_setup.ipynb"
    colab = f"https://colab.research.google.com/github/{path}/blob/main/notebooks/00_setup.ipynb"
    assert binder in readme and colab in readme


def test_license_is_mit_and_doctor_command_is_a_console_script():
    license_text = (ROOT / "LICENSE").read_text()
    assert license_text.startswith("MIT License")
    assert "WITHOUT WARRANTY OF ANY KIND" in license_text
    scripts = course_meta.pyproject()["project"]["scripts"]
    module, _, function = scripts["ddp-doctor"].partition(":")
    import importlib

    assert callable(getattr(importlib.import_module(module), function))


def test_console_script_help_exits_cleanly():
    script = textwrap.dedent(
        """
        import sys
        from ddp_lesson.__main__ import doctor_command
        sys.argv = ["ddp-doctor", "--help"]
        sys.exit(doctor_command())
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0 and "usage" in done.stdout.lower()
