"""What the notebooks show: interactive views of real runs, and pictures of what ranks reported.

Views (each in its own module, all built on :mod:`.base`):
:class:`RankAssignment` (which process gets which rank and device),
:class:`SamplerExplorer` (which rank gets which index, from the real
``DistributedSampler``), :class:`GradientSync` (gradients and parameters
across ranks with and without DDP), :class:`OverlapTimeline` (gradients
ready and all-reduces running on the ranks' own clocks), :class:`Quiz`,
and :func:`progress`
(a live bar per rank). :mod:`.plots` draws matplotlib pictures;
:mod:`.runs` is what the views' launches run in every rank.
"""

from __future__ import annotations

from . import plots
from .base import ProgressBars, parse_whole, progress
from .inside import OverlapTimeline
from .quiz import Quiz
from .ranks import RankAssignment
from .sampler import SamplerExplorer, partition_html
from .sync import GradientSync

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
]
