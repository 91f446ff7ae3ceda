"""The helper package of the ddp-lesson course, grouped by who uses it.

What the lesson's workers import (they run in every rank):
``devices`` (the one device policy), ``reports`` (what ranks send back),
``data``, ``models``; and, for the course's own rank-side code, ``group``
(joining a launch's process group as the lesson's ``ddp_setup`` does).
``warm`` is all of that imported at once: what a launch's warm server
imports before it forks ranks (outside ``launch``, whose import would
bring torch in before the server turns its garbage collector off).

Shared by everything: ``stages`` (the one table of the lesson's stages),
``sources`` (the workers' source as the notebooks write it), ``validate``.

Sub-packages, one per audience:
``launch`` (starting and supervising every process: lesson cells, checks,
views, the doctor, whole scripts, ``torchrun``), ``views`` (interactive
views and pictures of real runs), ``exercises`` (checks, their rank-side
probes, the exercise generator), ``doctor`` (diagnoses a DDP script), and
``bench`` (how fast DDP trains here).

Importing any of them starts no thread and installs no hook.
"""

__all__ = [
    "bench",
    "data",
    "devices",
    "doctor",
    "exercises",
    "group",
    "launch",
    "models",
    "reports",
    "sources",
    "stages",
    "validate",
    "views",
]
