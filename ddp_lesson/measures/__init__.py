"""What each lesson notebook measures in its workers, kept out of the code the learner reads.

A lesson worker is the DDP script the notebook teaches, plus the few calls
that send the notebook what it shows (indices seen, weights, timings). Those
calls live here, one module per worker file and named after it: the worker
imports them in one line under the comment ``# what this notebook
measures``, so its own text is the DDP code and little else. Nothing here
changes what the worker's DDP lines do: a module only reads the model, the
loader and the clock, and sends :func:`ddp_lesson.reports.send_report`.
"""
