"""The benchmark: how fast DDP trains on this machine, and where a launch's time goes.

``make bench`` (``bench/run.py``) and ``notebooks/10_performance.ipynb`` use
the same measurements (:mod:`.measure`, run in the launching process);
:mod:`.workers` is what the ranks run. Pictures of the results are in
:mod:`ddp_lesson.views.plots`.
"""

from __future__ import annotations

from .measure import (
    ALLREDUCE_BYTES,
    BATCHES,
    PHASES,
    QUICK_ENV,
    SCALING_BATCHES,
    Others,
    Setup,
    allreduce,
    busy,
    default_setups,
    effort,
    first_launch,
    notebook_times,
    scaling,
    speedups,
    stage_launches,
    startup,
    summarise,
    training,
    unsteady,
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
