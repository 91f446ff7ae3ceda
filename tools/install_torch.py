"""Install the torch release the course pins, in the build that suits this machine.

PyPI's torch wheels for Linux carry CUDA: pip adds a dozen ``nvidia-*``
packages, several GB, even where there is no GPU to use them. PyTorch
publishes a CPU-only build of the same release on its own index, a few
hundred MB. This script first asks pip what ``pip install torch==<pin>``
would install with this machine's own pip configuration, and switches to
the CPU index only when

* that plan contains ``nvidia-*`` packages (it is the CUDA build), and
* this machine has no ``nvidia-smi`` (no NVIDIA driver, so CUDA is unusable).

Everywhere else it installs what pip's configuration offers and never asks
PyTorch's index anything: the CUDA build on a GPU machine, PyPI's CPU wheel
on macOS, or a CPU wheel that the machine's pip is already configured with
(a local wheel or a mirror), offline if that is how pip is set up.

Run by the Makefile with the virtual environment's Python::

    .venv/bin/python tools/install_torch.py --build auto --constraints constraints.txt

``--build cpu`` always takes PyTorch's CPU index; ``--build default`` always
takes what pip's configuration offers (on Linux without a GPU: the CUDA build).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from course_meta import ROOT, torch_pin  # noqa: E402

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
#: pip releases before this one may download whole wheels (several GB for
#: torch's CUDA build) just to read their dependencies when planning.
MIN_PIP = (23, 0)
#: Where WSL2 puts the Windows driver's nvidia-smi (not always on PATH).
WSL_NVIDIA_SMI = Path("/usr/lib/wsl/lib/nvidia-smi")


def say(message: str) -> None:
    """Print one line of this script's own narration, set apart from pip's output."""
    print(f"[torch] {message}", flush=True)


class InstallError(Exception):
    """A step failed; the message says what happened and what to do."""


def pip(*args: str, capture: bool = False) -> subprocess.CompletedProcess:
    """Run this interpreter's pip with ``args`` (output shown unless captured)."""
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    return subprocess.run(command, stdout=subprocess.PIPE if capture else None, text=True)


def version_tuple(text: str) -> tuple[int, ...]:
    """``"23.2.1"`` -> ``(23, 2, 1)``; stops at the first part that is not a number.

    >>> version_tuple("24.0rc1")
    (24,)
    """
    parts = []
    for part in text.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def installed(name: str) -> str | None:
    """The version of ``name`` installed for this interpreter, or None."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def has_nvidia_smi() -> bool:
    """Whether an NVIDIA driver's ``nvidia-smi`` is present (on PATH, or WSL2's)."""
    return shutil.which("nvidia-smi") is not None or WSL_NVIDIA_SMI.exists()


def cuda_packages(plan: list[dict]) -> list[str]:
    """The ``nvidia-*`` packages in a pip install plan (``--report``'s install list).

    >>> cuda_packages([{"metadata": {"name": "torch"}},
    ...                {"metadata": {"name": "nvidia-nccl-cu13"}}])
    ['nvidia-nccl-cu13']
    """
    names = [item["metadata"]["name"].lower().replace("_", "-") for item in plan]
    return sorted(n for n in names if n.startswith("nvidia-"))


def choose(build: str, cuda: list[str], gpu: bool) -> tuple[str, str]:
    """Which source to install from, ``"cpu"`` or ``"default"``, and why.

    Args:
        build: what was asked for: ``"auto"``, ``"cpu"`` or ``"default"``.
        cuda: the ``nvidia-*`` packages in pip's plan (empty: not a CUDA build).
        gpu: whether this machine has ``nvidia-smi``.

    >>> choose("auto", ["nvidia-nccl-cu13"], gpu=False)[0]
    'cpu'
    >>> choose("auto", ["nvidia-nccl-cu13"], gpu=True)[0]
    'default'
    >>> choose("auto", [], gpu=False)[0]
    'default'
    """
    if build in ("cpu", "default"):
        return build, f"asked for with TORCH={build}"
    if not cuda:
        return "default", "pip's configuration offers a build without CUDA packages"
    if gpu:
        return "default", "nvidia-smi is present, so the CUDA build can use this machine's GPU"
    return "cpu", (
        f"pip would add {len(cuda)} CUDA packages ({', '.join(cuda[:3])}, ...; several GB) "
        "and this machine has no nvidia-smi, so CUDA could not be used here"
    )


def plan(pin: str, constraints: list[str]) -> list[dict]:
    """What ``pip install torch==<pin>`` would install here, from pip's ``--report``."""
    say(f"asking pip what 'pip install torch=={pin}' would install on this machine ...")
    done = pip(
        "install", "--dry-run", "--ignore-installed", "--quiet", "--report", "-",
        f"torch=={pin}", *constraints, capture=True,
    )  # fmt: skip
    if done.returncode != 0:
        python = ".".join(map(str, sys.version_info[:2]))
        raise InstallError(
            f"pip could not plan 'torch=={pin}' for Python {python} on "
            f"{platform.system()} {platform.machine()} (pip's message is above). "
            f"Either pip cannot reach its package index (check the network or proxy "
            f"settings), or torch {pin} has no wheel for this Python and platform: "
            f"https://pypi.org/project/torch/{pin}/#files lists them; the README's "
            f"'Where the course runs' table says which ones the course was checked on. "
            f"To build the environment with another Python: rm -rf .venv && make lab "
            f"PYTHON=python3.11"
        )
    return json.loads(done.stdout)["install"]


def install_default(pin: str, constraints: list[str]) -> None:
    """Install ``torch==<pin>`` from the indexes pip is configured with."""
    if pip("install", f"torch=={pin}", *constraints).returncode != 0:
        raise InstallError(
            f"pip could not install torch=={pin} (its message is above). If the "
            "network dropped during the download, run the same command again; if pip "
            "found no matching torch, see the README's 'Where the course runs'."
        )


def install_cpu(pin: str, constraints: list[str], index: str) -> None:
    """Install the CPU build of ``torch==<pin>`` from ``index``, then its dependencies."""
    say(f"installing torch=={pin} from {index} (the CPU build, a few hundred MB)")
    done = pip("install", "--no-deps", "--index-url", index, f"torch=={pin}", *constraints)
    if done.returncode != 0:
        raise InstallError(
            f"could not install the CPU build of torch=={pin} from {index} (pip's message "
            "is above). If that address cannot be reached from here, either set "
            "TORCH_CPU_INDEX to a mirror of it (make lab TORCH_CPU_INDEX=URL), or take "
            "the build pip's configuration offers, CUDA included (several GB): make lab "
            "TORCH=default"
        )
    # torch's own dependencies (sympy, networkx, ...) come from pip's usual indexes
    install_default(pin, constraints)


def cuda_build_installed() -> bool:
    """Whether the installed torch depends on ``nvidia-*`` packages (a CUDA build)."""
    requires = metadata.requires("torch") or []
    return any(r.lower().startswith("nvidia-") for r in requires)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", choices=["auto", "cpu", "default"], default="auto")
    parser.add_argument("--constraints", type=Path, help="a pip constraints file to honour")
    parser.add_argument("--cpu-index", default=os.environ.get("TORCH_CPU_INDEX") or CPU_INDEX)
    parser.add_argument("--root", type=Path, default=ROOT, help="the course's checkout")
    args = parser.parse_args(argv)
    pin = torch_pin(args.root)
    constraints = ["--constraint", str(args.constraints)] if args.constraints else []

    have = installed("torch")
    if have is not None and have.split("+")[0] == pin:
        if args.build == "cpu" and cuda_build_installed():
            say(
                f"torch {have} (the CUDA build) is installed already and is kept. For the "
                "CPU build start a new environment: rm -rf .venv && make lab TORCH=cpu"
            )
        else:
            say(f"torch {have} is installed already")
        return 0

    try:
        pip_version = installed("pip") or "0"
        if version_tuple(pip_version) < MIN_PIP:
            say(f"pip {pip_version} is too old to plan without downloading; upgrading pip")
            if pip("install", "--upgrade", "pip>=23.2").returncode != 0:
                raise InstallError(
                    "could not upgrade pip (its message is above); upgrade it by hand: "
                    f"{sys.executable} -m pip install --upgrade pip"
                )
        if args.build == "auto":
            steps = plan(pin, constraints)
            source, why = choose("auto", cuda_packages(steps), has_nvidia_smi())
        else:
            source, why = choose(args.build, [], has_nvidia_smi())
        if source == "cpu":
            say(f"taking the CPU build: {why}. For the CUDA build anyway: make lab TORCH=default")
            install_cpu(pin, constraints, args.cpu_index)
        elif args.build == "auto":
            torch_step = next(s for s in steps if s["metadata"]["name"] == "torch")
            url = torch_step.get("download_info", {}).get("url", "?")
            build = "CUDA build, several GB" if cuda_packages(steps) else "no CUDA packages"
            say(f"installing torch {torch_step['metadata']['version']} ({build}): {why}")
            say(f"from {url}")
            install_default(pin, constraints)
        else:
            say(f"installing torch=={pin} as pip's configuration offers it ({why})")
            install_default(pin, constraints)
    except InstallError as error:
        say(f"FAILED: {error}")
        return 1
    say(f"torch {installed('torch')} installed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
