"""The DDP doctor: names the stage of a learner's DDP script that is at fault, and the line.

In a notebook: ``print(doctor.diagnose("workers/my_script.py"))``. In a
terminal: ``ddp-doctor my_script.py`` (or ``python -m ddp_lesson doctor``).
It starts a file as it is written to be started, which running it shows
(a script as Python, following the processes it starts; under
``torchrun`` one that needs torchrun's variables; ``main(rank,
world_size, ...)`` called in processes of its own), and judges each
stage by what the processes did. Its parts: :mod:`.read` (the code, read
without running it), :mod:`.run`, :mod:`.start`, :mod:`.start_follow`
and :mod:`.probe` (a short real run, started in each launch
style and recorded in every process, as :mod:`.record` defines),
:mod:`.judge` (the verdicts), :mod:`.verdict` (what a diagnosis holds and
how it prints), :mod:`.cli`.
"""

from __future__ import annotations

from .cli import main
from .diagnose import TIMEOUT_S, diagnose
from .verdict import FAULT, NOT_CHECKED, OK, Diagnosis, StageVerdict

__all__ = [
    "FAULT",
    "NOT_CHECKED",
    "OK",
    "TIMEOUT_S",
    "Diagnosis",
    "StageVerdict",
    "diagnose",
    "main",
]
