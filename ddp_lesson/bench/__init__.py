"""The benchmark: how fast DDP trains on this machine, and where a launch's time goes.

``make bench`` (``bench/run.py``) and ``notebooks/10_performance.ipynb`` use
the same measurements, run in the launching process; each module has one job:

* :mod:`.throughput`: training and ``all_reduce`` speed, timed in real DDP launches;
* :mod:`.launch_times`: how long a launch, a lesson's launch cell and a new
  kernel's first launch take;
* :mod:`.lesson_times`: how long each lesson notebook takes to execute;
* :mod:`.summaries`: medians with their spread, and ratios between setups;
* :mod:`.conditions`: how long to measure, and whether the machine was quiet;
* :mod:`.workers`: what the ranks run.

Every process they start, the launch layer (:mod:`ddp_lesson.launch`) starts
and supervises. Pictures of the results are in :mod:`ddp_lesson.views.plots`.
"""

from __future__ import annotations

from .conditions import QUICK_ENV, Others, busy, effort
from .launch_times import PHASES, first_launch, stage_launches, startup
from .lesson_times import notebook_times
from .summaries import speedups, summarise, unsteady
from .throughput import (
    ALLREDUCE_BYTES,
    BATCHES,
    SCALING_BATCHES,
    Setup,
    allreduce,
    default_setups,
    scaling,
    training,
)
from .workers import Trial

__all__ = [
    "ALLREDUCE_BYTES",
    "BATCHES",
    "PHASES",
    "QUICK_ENV",
    "SCALING_BATCHES",
    "Others",
    "Setup",
    "Trial",
    "allreduce",
    "busy",
    "default_setups",
    "effort",
    "first_launch",
    "notebook_times",
    "scaling",
    "speedups",
    "stage_launches",
    "startup",
    "summarise",
    "training",
    "unsteady",
]
