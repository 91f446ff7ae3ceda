"""The launching process's main file: a notebook, or a file every rank runs again."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def interactive_main() -> bool:
    """True when ``__main__`` is a notebook or a prompt, not a file a new process can import."""
    main = sys.modules.get("__main__")
    return not getattr(main, "__file__", None) or "ipykernel" in str(main.__file__)


def unguarded_line() -> int | None:
    """The line of the main file's top-level code, outside its main guard, that is starting ranks.

    Every rank imports the main file again (both spawn and forkserver start
    methods do), so such a line would start processes in every rank.
    ``None`` when the call comes from a function, from under ``if __name__
    == "__main__":``, or from a notebook.
    """
    import ast

    if interactive_main():
        return None
    path = os.path.abspath(sys.modules["__main__"].__file__)
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename) != path:
        frame = frame.f_back
    if frame is None or frame.f_code.co_name != "<module>":
        return None
    line = frame.f_lineno
    try:
        tree = ast.parse(Path(path).read_text())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.If)
            and "__name__" in ast.unparse(node.test)
            and "__main__" in ast.unparse(node.test)
            and node.lineno <= line <= (node.end_lineno or node.lineno)
        ):
            return None
    return line
