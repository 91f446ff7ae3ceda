"""What ``git ls-files`` holds: sources, notebooks and text, never a binary or generated file.

A checkpoint a script wrote (``checkpoint.pt``) and a file holding a process
id (``vpid``) were once committed with changes about other things. A
tracked file fails here when it is binary (a NUL byte in its first 8 KiB,
as git itself judges), has a name that something generates (a checkpoint,
a pickle, bytecode, a pid file), or is one ``.gitignore`` says is written
by a run, unless :data:`SHIPPED` lists it with the reason the course ships
it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Binary or generated files the course ships on purpose (a figure, a data
#: set), each with why. None so far: the notebooks embed their figures, and
#: the data comes from scikit-learn.
SHIPPED: dict[str, str] = {}

#: Endings of what runs write: torch.save's checkpoints and their half-written
#: copies, pickles (torch's error files), bytecode, pid files.
GENERATED_SUFFIXES = (".pt", ".pth", ".partial", ".part", ".pickle", ".pkl", ".pyc", ".pyo", ".pid")
GENERATED_NAMES = {"vpid", "nohup.out", ".DS_Store"}
SNIFF_BYTES = 8192


def git(root: Path, *args: str) -> list[str]:
    """``git args`` in ``root``: the NUL-separated paths it prints."""
    result = subprocess.run(
        ["git", *args, "-z"], cwd=root, capture_output=True, text=True, timeout=60, check=True
    )
    return [path for path in result.stdout.split("\0") if path]


def stray_files(root: Path) -> dict[str, str]:
    """Each tracked file of the checkout at ``root`` that should not be, with the reason."""
    stray = {}
    for path in git(root, "ls-files", "--ignored", "--cached", "--exclude-standard"):
        stray[path] = ".gitignore says a run writes it"
    for path in git(root, "ls-files"):
        file = root / path
        if file.name in GENERATED_NAMES or file.name.endswith(GENERATED_SUFFIXES):
            stray[path] = "its name is one that runs generate"
        elif file.is_file() and b"\0" in file.open("rb").read(SNIFF_BYTES):
            stray[path] = "binary: a NUL byte in its first 8 KiB"
    return {path: why for path, why in stray.items() if path not in SHIPPED}


def checkout() -> Path:
    """This repository's root, or a skip where it is not a git checkout (an unpacked copy)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed, so the tracked files cannot be listed")
    inside = subprocess.run(
        ["git", "rev-parse", "--show-toplevel"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if inside.returncode != 0 or Path(inside.stdout.strip()).resolve() != ROOT:
        pytest.skip(f"{ROOT} is not a git checkout (a copy without .git): no tracked files")
    return ROOT


def test_no_tracked_file_is_binary_or_generated():
    stray = stray_files(checkout())
    assert not stray, (
        "tracked files that a run writes, or binary ones: remove them with "
        "`git rm --cached PATH` (and ignore them in .gitignore), or list one the course "
        f"ships in SHIPPED with why: {stray}"
    )


def test_every_shipped_exception_is_still_tracked():
    root = checkout()
    gone = set(SHIPPED) - set(git(root, "ls-files"))
    assert not gone, f"SHIPPED lists files git no longer tracks: remove them from it: {gone}"


def test_the_check_finds_what_was_committed_by_accident(tmp_path):
    """A throwaway repository with the files issue 43 found, and one text file that is fine."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True, timeout=60)
    (tmp_path / "checkpoint.pt").write_bytes(b"PK\x03\x04\0\0 a torch.save zip")
    (tmp_path / "vpid").write_text("22983\n")
    (tmp_path / "figure.bin").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    (tmp_path / "notes.txt").write_text("plain text\n")
    (tmp_path / "run.log").write_text("written by a run\n")
    (tmp_path / ".gitignore").write_text("*.log\n")
    paths = ["checkpoint.pt", "vpid", "figure.bin", "notes.txt", "run.log", ".gitignore"]
    subprocess.run(["git", "add", "--force", *paths], cwd=tmp_path, check=True, timeout=60)
    assert stray_files(tmp_path) == {
        "checkpoint.pt": "its name is one that runs generate",
        "vpid": "its name is one that runs generate",
        "figure.bin": "binary: a NUL byte in its first 8 KiB",
        "run.log": ".gitignore says a run writes it",
    }
