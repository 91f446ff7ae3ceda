"""The exercises: checks that run a learner's code for real, and the notebooks they live in.

:mod:`.checks` (the ``check_*`` functions an exercise cell calls),
:mod:`.probes` (what those checks run in every rank around the learner's
code), :mod:`.generate` (``exercises/`` generated from ``solutions/``;
``python -m ddp_lesson.exercises``).
"""
