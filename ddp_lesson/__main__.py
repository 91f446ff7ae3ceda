"""Command line: ``python -m ddp_lesson doctor PATH [--world-size N] [--timeout S] [--json]``."""

from __future__ import annotations

import sys

USAGE = (
    "usage: python -m ddp_lesson doctor PATH [--world-size N] [--timeout S] [--json] "
    "[-- ARGS...]\n"
    "  doctor   name the stage (and line) of a DDP script that is at fault"
)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0 if argv else 2
    if argv[0] != "doctor":
        print(f"unknown command {argv[0]!r}: the only command is doctor\n{USAGE}")
        return 2
    from . import doctor

    return doctor.main(argv[1:])


def doctor_command() -> int:
    """The ``ddp-doctor PATH ...`` console command: the same as ``python -m ddp_lesson doctor``."""
    return main(["doctor", *sys.argv[1:]])


if __name__ == "__main__":
    sys.exit(main())
