"""The exercises' checks: each runs the learner's code for real and explains the outcome.

``from ddp_lesson.exercises import checks`` then ``checks.check_spawn(...)``.
Each topic keeps its checks in a module of this package (:mod:`.stage_workers` for
the lesson's stages 02-06, one module per later notebook); every name
``check_...`` defined in any of them is available here. What all of them
share (the :class:`Result`, running a probe) is in :mod:`.base`.
"""

from __future__ import annotations

import importlib
import pkgutil

from .base import CHECK_TIMEOUT_S, FAILED, NOT_ATTEMPTED, PASSED, Result

_TOPICS = [m.name for m in pkgutil.iter_modules(__path__) if m.name != "base"]


def _checks() -> dict[str, object]:
    found = {}
    for topic in _TOPICS:
        module = importlib.import_module(f"{__name__}.{topic}")
        found.update({n: getattr(module, n) for n in dir(module) if n.startswith("check_")})
    return found


def __getattr__(name: str):
    if name.startswith("check_"):
        found = _checks()
        if name in found:
            return found[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_checks()])


__all__ = ["CHECK_TIMEOUT_S", "FAILED", "NOT_ATTEMPTED", "PASSED", "Result"]
