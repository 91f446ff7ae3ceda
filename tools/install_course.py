"""Install the course into the running Python where it is missing (Colab, a plain Jupyter).

The set-up cell at the top of each lesson notebook clones the repository and
runs this script when ``ddp_lesson`` cannot be imported. It installs the
course editable (the package reads the notebooks next to it) and, of its
dependencies, everything but JupyterLab: the notebook is already open in a
Jupyter of some kind.

* torch already installed (Colab ships one, built for its GPU driver): it is
  kept, and so is every package already there; only missing packages are
  added. Replacing Colab's torch with the course's pinned release would cost
  minutes of CUDA downloads, could leave Colab's GPU unusable if that build
  does not suit its driver, and would change packages Colab's own tools were
  built against. The course's lessons use torch's public DDP interfaces, so
  they run on Colab's torch; numbers may differ slightly from the saved
  outputs, which were made with the pinned release.
* no torch: as ``make lab`` does, the pinned torch in the build that suits
  this machine (``tools/install_torch.py``), then the other packages at the
  versions in ``constraints.txt``.

    python ddp-lesson/tools/install_course.py
"""

from __future__ import annotations

import re
import subprocess
import sys
from importlib import util
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import install_torch  # noqa: E402
from course_meta import ROOT, pyproject  # noqa: E402

#: Never installed by this script: the notebook already runs in a Jupyter
#: kernel, and replacing the one that runs it could break that Jupyter.
NOT_HERE = {"jupyterlab", "ipykernel"}


def say(message: str) -> None:
    print(f"[course] {message}", flush=True)


def requirement_name(requirement: str) -> str:
    """The project name a requirement string starts with, normalised.

    >>> requirement_name("scikit_learn>=1.4")
    'scikit-learn'
    """
    return re.match(r"[A-Za-z0-9._-]+", requirement).group(0).lower().replace("_", "-")


def dependencies(root: Path, *, keep_torch: bool) -> list[str]:
    """The course's runtime requirements to install here (never JupyterLab)."""
    skip = NOT_HERE | ({"torch"} if keep_torch else set())
    deps = pyproject(root)["project"]["dependencies"]
    return [d for d in deps if requirement_name(d) not in skip]


def pip(*args: str) -> None:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", "install", *args]
    if subprocess.run(command).returncode != 0:
        raise SystemExit(f"[course] FAILED: {' '.join(command)} (pip's message is above)")


def main(root: Path = ROOT) -> int:
    constraints = root / "constraints.txt"
    if util.find_spec("torch") is not None:
        from importlib.metadata import version

        say(f"keeping this machine's torch {version('torch')}; adding what the course lacks")
        pip(*dependencies(root, keep_torch=True))
    else:
        say("no torch here: installing the course's pinned torch and packages")
        status = install_torch.main(["--constraints", str(constraints), "--root", str(root)])
        if status != 0:
            return status
        pip("--constraint", str(constraints), *dependencies(root, keep_torch=False))
    pip("--no-deps", "-e", str(root))
    say(f"the course is installed from {root}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
