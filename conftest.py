"""What every pytest run of this repository sets first, whatever it collects.

It sits at the top so that it also applies when a single notebook is run
(``pytest notebooks/07_mistakes.ipynb``), to the exercise notebooks and to
every pytest-xdist worker, whichever files it is given; tests/conftest.py
holds the tests' own helpers.
"""

import contextlib
import fcntl
import functools
import json
import multiprocessing
import multiprocessing.util
import os
import shutil
import tempfile
import time
from pathlib import Path

import pytest

#: The vector instructions every run of the tests may use, at most. The committed
#: outputs were made with AVX2 kernels (``make notebooks`` sets the same);
#: on a CPU with AVX-512, torch, MKL and oneDNN would otherwise pick kernels
#: that round some last printed digits differently. Set before any kernel,
#: forkserver or rank starts, so all of them inherit it.
SAME_DIGITS = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
#: A test run starts more processes than the machine has cores (three workers, each
#: with a notebook's kernel and its ranks). An OpenMP thread of torch that has
#: finished its share of an operation would spin, waiting for the next one, on a
#: core another process needs; passive, it sleeps until woken. What is computed
#: is the same. On a 2-core machine, four notebooks (01, 05, 10, 12 on three workers)
#: took a median 50.6 core-seconds instead of 57.2; in the whole suite the gain is
#: smaller than the spread between runs.
WAIT_ASLEEP = {"OMP_WAIT_POLICY": "PASSIVE"}
for _name, _value in {**SAME_DIGITS, **WAIT_ASLEEP}.items():
    os.environ.setdefault(_name, _value)

#: The name of each run's temporary folder begins with this.
RUN_PREFIX = "ddp-lesson-tests-"

#: What may stay in the temporary folder: torch's own reusable compile cache.
KEPT = ("torchinductor_",)


def pytest_configure(config):
    """Give the run its own empty temporary folder and the benchmark's quick settings.

    Set here, before anything is collected, so that every notebook's kernel
    (nbval starts one per notebook, whatever ran before it on this worker),
    its warm server and its ranks inherit them. pytest's own tmp_path folders
    go in one folder of this run, removed when it ends: by default pytest
    keeps the last three runs' folders in the temporary folder, and the
    course promises to leave that folder as it found it.
    """
    if config.option.basetemp is None:
        config.option.basetemp = tempfile.mkdtemp(prefix="ddp-lesson-pytest-")
        config.stash[_OWN_BASETEMP] = config.option.basetemp
    if config.option.write_durations and not hasattr(config, "workerinput"):
        config.pluginmanager.register(DurationRecorder(config.option.write_durations))
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        # pytest-xdist's controller: it hands the files out in the order its
        # workers collected them (longest_first), not by number of tests
        config.option.loadscopereorder = False
        return  # its workers set up their own
    # This process's multiprocessing folder stays where it was (removed when
    # it exits); everything started from here on uses the run's folder.
    multiprocessing.util.get_temp_dir()
    # A pytest run inside a test (tests/test_world_sizes.py) puts its folder beside the
    # outer run's, not inside it: the paths of the warm servers' sockets must stay short.
    outer = Path(tempfile.gettempdir())
    beside = outer.parent if outer.name.startswith(RUN_PREFIX) else None
    folder = Path(tempfile.mkdtemp(prefix=RUN_PREFIX, dir=beside))
    # the benchmark's quick settings: 10_performance's measuring cells only
    # show that their code runs (their saved outputs come from a full run)
    settings = {"TMPDIR": str(folder), "DDP_LESSON_BENCH_QUICK": "1"}
    config.stash[_SAVED_ENV] = {key: os.environ.get(key) for key in settings}
    config.stash[_RUN_FOLDER] = folder
    os.environ.update(settings)
    tempfile.tempdir = None  # this process too


def pytest_addoption(parser):
    parser.addoption(
        "--write-durations", metavar="PATH", default=None,
        help="write how long each file's tests took to PATH (make durations: tests/durations.txt)",
    )  # fmt: skip


def pytest_unconfigure(config):
    saved = config.stash.get(_SAVED_ENV, {})
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    tempfile.tempdir = None
    for own in (config.stash.get(_OWN_BASETEMP, None), config.stash.get(_RUN_FOLDER, None)):
        if own:
            shutil.rmtree(own, ignore_errors=True)


_OWN_BASETEMP = pytest.StashKey[str]()
_SAVED_ENV = pytest.StashKey[dict]()
_RUN_FOLDER = pytest.StashKey[Path]()


def litter(folder: Path) -> list[str]:
    """What is left in ``folder`` but torch's compile cache."""
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith(KEPT))


#: For each name left in the run's folder, the test after which it was first seen.
_LEFT_BY = pytest.StashKey[dict]()


_BEFORE = pytest.StashKey[set]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    folder = item.config.stash.get(_RUN_FOLDER, None)
    item.stash[_BEFORE] = set(litter(folder)) if folder else set()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """Note which test each new entry of the run's folder appeared after (for the check below)."""
    yield
    folder = item.config.stash.get(_RUN_FOLDER, None)
    if folder:
        seen = item.config.stash.setdefault(_LEFT_BY, {})
        for name in set(litter(folder)) - item.stash.get(_BEFORE, set()):
            seen.setdefault(name, item.nodeid)


@pytest.fixture(scope="session", autouse=True)
def clean_temporary_folder(pytestconfig):
    """At the end of the session nothing may be left in the run's temporary folder.

    Nothing but torch's compile cache: no error files of ranks that raised,
    no launch folders, no forkserver folders of kernels that have gone.
    (The check is made where a test function ran; pytest_unconfigure
    removes the folder in every case.)
    """
    folder = pytestconfig.stash.get(_RUN_FOLDER, None)
    yield folder
    if folder is None:
        return
    # nbval stops each notebook's kernel outright (shutdown_kernel(now=True)),
    # as a learner's killed kernel is stopped; the folder its warm server
    # used is then removed by the next launch, whoever starts it. Do here
    # what that launch would do, once the kernel is gone.
    from ddp_lesson.launch import folders

    deadline = time.monotonic() + 10
    while True:
        folders.remove_stale_folders(folder)
        left = litter(folder)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    seen = pytestconfig.stash.get(_LEFT_BY, {})
    named = [f"{name} (there since {seen.get(name, 'an unknown test')})" for name in left]
    assert not left, f"the tests left these in the temporary folder {folder}: {named}"


#: The port the tutorials fix (``MASTER_PORT = "12355"``). A notebook whose code
#: binds it, and a test marked ``fixed_port`` (one that binds it, or holds it busy on
#: purpose), runs while no other such item runs on any pytest-xdist worker: two at
#: once would find it taken ("EADDRINUSE"). The lock is on this file, which every
#: worker of a checkout shares and which is there before and after the run.
FIXED_PORT = 12355


#: Seconds nbval waits for a kernel's next message once its cell has replied
#: (nbval's own default is 5). The messages normally come at once; on a machine
#: whose cores are busy with other work a gap of seconds happens, and it is not
#: a failure of the notebook. The kernel's start has its own margin, in
#: pyproject.toml's ``--nbval-kernel-startup-timeout``.
NBVAL_OUTPUT_WAIT_S = 60


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.suffix == ".ipynb" and binds_fixed_port(item.path):
            item.add_marker("fixed_port")
        if hasattr(item, "output_timeout"):  # an nbval cell
            item.output_timeout = NBVAL_OUTPUT_WAIT_S
    if hasattr(config, "workerinput"):  # a pytest-xdist worker: see longest_first
        longest_first(items, read_durations(DURATIONS))


@functools.cache
def binds_fixed_port(notebook: Path) -> bool:
    """Whether a code cell of ``notebook`` has the fixed port outside a comment."""
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return any(
        str(FIXED_PORT) in line.split("#", 1)[0]
        for cell in cells if cell["cell_type"] == "code"
        for line in "".join(cell["source"]).splitlines()
    )  # fmt: skip


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Run a ``fixed_port`` item (its fixtures included) while it holds the port's lock."""
    if item.get_closest_marker("fixed_port") is None:
        yield
        return
    with open(__file__, "rb") as shared, contextlib.ExitStack() as held:
        fcntl.flock(shared, fcntl.LOCK_EX)  # waits while another worker's item has it
        held.callback(fcntl.flock, shared, fcntl.LOCK_UN)
        yield


#: How long each file's tests took in one measured run: ``SECONDS PATH`` lines.
DURATIONS = Path(__file__).resolve().parent / "tests" / "durations.txt"


def read_durations(path: Path) -> dict[str, float]:
    """The figures in ``path`` (``{}`` if it is missing); ``#`` lines are comments."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    found = {}
    for line in text.splitlines():
        seconds, _, name = line.partition(" ")
        with contextlib.suppress(ValueError):
            if not line.startswith("#") and name.strip():
                found[name.strip()] = float(seconds)
    return found


def longest_first(items: list, seconds: dict[str, float]) -> None:
    """Order ``items`` file by file, the files that took longest first.

    ``make test`` hands whole files to its pytest-xdist workers (a
    notebook's cells share one kernel), in the order the workers collected
    them. A run that handed out long files last ended with one worker busy
    and the others idle; pytest-xdist's own order (by number of tests per
    file) does exactly that to the files that take longest per test (a
    browser test, a check that waits out a deadline). The figures only
    order the files: a file they do not know yet is placed as one of median
    length, and the order within a file is kept.
    """
    known = sorted(seconds.values())
    median = known[len(known) // 2] if known else 0.0
    items.sort(key=lambda item: -seconds.get(item.nodeid.split("::", 1)[0], median))


class DurationRecorder:
    """``--write-durations PATH``: writes how long each file's tests took (setup, call, teardown).

    Registered in the process that sees every test's report: pytest-xdist's
    controller, or pytest itself without workers.
    """

    def __init__(self, path: str):
        self.path = Path(path)
        self.seconds: dict[str, float] = {}

    def pytest_runtest_logreport(self, report):
        name = report.nodeid.split("::", 1)[0]
        self.seconds[name] = self.seconds.get(name, 0.0) + report.duration

    def pytest_sessionfinish(self, session):
        if not self.seconds:
            return
        lines = sorted(self.seconds.items(), key=lambda pair: -pair[1])
        self.path.write_text(
            "# Seconds each file's tests took in one `make test` run (setup, call and\n"
            "# teardown). Only the order in which the test workers are handed the files\n"
            "# depends on it (conftest.py's longest_first); `make durations` rewrites it.\n"
            + "".join(f"{seconds:.1f} {name}\n" for name, seconds in lines),
            encoding="utf-8",
        )


EXERCISES = Path(__file__).resolve().parent / "exercises"


def pytest_collectstart(collector):
    """Run the exercise notebooks top to bottom without comparing their outputs.

    They are the lessons with their answers cut out: what a learner sees in
    them depends on what the learner writes, so there is nothing to compare
    (as ``--nbval-lax`` does, for their files only). The lessons and
    solutions in the same run are still compared cell by cell.
    """
    if collector.path.suffix == ".ipynb" and EXERCISES in collector.path.parents:
        collector.compare_outputs = False
