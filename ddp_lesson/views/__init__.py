"""What the notebooks show: interactive views of real runs, and pictures of what ranks reported.

Views (each in its own module, all built on :mod:`.base`):
:class:`RankAssignment` (which process gets which rank and device),
:class:`SamplerExplorer` (which rank gets which index, from the real
``DistributedSampler``), :class:`GradientSync` (gradients and parameters
across ranks with and without DDP), :class:`OverlapTimeline` (gradients
ready and all-reduces running on the ranks' own clocks), :class:`Quiz`,
and :func:`progress`
(a live bar per rank) and :func:`reveal` (a result kept folded until a
prediction is made). :mod:`.plots` draws matplotlib pictures;
:mod:`.runs` is what the views' launches run in every rank.

Each name is imported when it is first used (``views.SamplerExplorer``,
``from ddp_lesson.views import plots``), not with the package: a rank
running a view's function imports :mod:`.runs` and this package, and
nothing of matplotlib, ipywidgets or IPython, whose imports would cost
it CPU time at every launch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

#: Each public name and the module of this package that defines it.
_HOME = {
    "GradientSync": "sync",
    "OverlapTimeline": "inside",
    "ProgressBars": "base",
    "Quiz": "quiz",
    "RankAssignment": "rank_assignment",
    "SamplerExplorer": "sampler",
    "parse_whole": "base",
    "partition_html": "sampler",
    "plots": None,  # a module
    "progress": "base",
    "reveal": "base",
}

__all__ = [
    "GradientSync",
    "OverlapTimeline",
    "ProgressBars",
    "Quiz",
    "RankAssignment",
    "SamplerExplorer",
    "parse_whole",
    "partition_html",
    "plots",
    "progress",
    "reveal",
]

if TYPE_CHECKING:  # what editors and type checkers see
    from . import plots
    from .base import ProgressBars, parse_whole, progress, reveal
    from .inside import OverlapTimeline
    from .quiz import Quiz
    from .rank_assignment import RankAssignment
    from .sampler import SamplerExplorer, partition_html
    from .sync import GradientSync


def __getattr__(name: str) -> object:
    """Import a public name on its first use.

    >>> import ddp_lesson.views as views
    >>> sorted(_HOME) == sorted(__all__) and views.Quiz.__module__
    'ddp_lesson.views.quiz'
    """
    if name not in _HOME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    home = _HOME[name]
    value = (
        importlib.import_module(f".{name}", __name__)
        if home is None
        else getattr(importlib.import_module(f".{home}", __name__), name)
    )
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
