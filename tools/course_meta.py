"""What the tools read from ``pyproject.toml``: one reader for all of them.

Python 3.11 and newer read TOML with the standard library's ``tomllib``.
Python 3.10 has no ``tomllib``: there ``tomli`` (a test extra) is used when
installed, otherwise the copy of ``tomli`` that pip carries, since every
environment these tools run in has pip.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    try:
        import tomli as tomllib
    except ModuleNotFoundError:
        from pip._vendor import tomli as tomllib


def pyproject(root: Path = ROOT) -> dict:
    """The parsed ``pyproject.toml`` of the checkout at ``root``."""
    return tomllib.loads((Path(root) / "pyproject.toml").read_text(encoding="utf-8"))


def torch_pin(root: Path = ROOT) -> str:
    """The torch release that ``pyproject.toml`` pins exactly, e.g. ``"2.13.0"``."""
    deps = pyproject(root)["project"]["dependencies"]
    pins = [m.group(1) for d in deps if (m := re.fullmatch(r"torch\s*==\s*(\S+)", d))]
    if len(pins) != 1:
        raise SystemExit(
            f"pyproject.toml must pin torch exactly once (torch==X.Y.Z), found {pins}: "
            "the notebooks' compared outputs depend on one torch release"
        )
    return pins[0]


def repository_url(root: Path = ROOT) -> str:
    """The course's repository (``[project.urls] Repository``), without a trailing slash."""
    urls = pyproject(root)["project"].get("urls", {})
    if "Repository" not in urls:
        raise SystemExit(
            'pyproject.toml needs [project.urls] Repository = "https://github.com/..."'
        )
    return urls["Repository"].rstrip("/")


def main(argv: list[str] | None = None) -> int:
    """``python tools/course_meta.py extra NAME``: print that extra's requirements, one a line."""
    import argparse

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("what", choices=["extra"])
    parser.add_argument("name", help="e.g. test")
    args = parser.parse_args(argv)
    extras = pyproject()["project"].get("optional-dependencies", {})
    if args.name not in extras:
        raise SystemExit(f"pyproject.toml has no extra {args.name!r}; it has {sorted(extras)}")
    print("\n".join(extras[args.name]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
