"""What `15_first_week` measures in `workers/first_compile.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import logging

import torch
from torch._dynamo.utils import counters

from ddp_lesson.reports import send_report

# Dynamo warns once per rank that it leaves out DDP's profiler label; the
# warning carries a time and a process id, which would change every run
torch._logging.set_logs(dynamo=logging.ERROR)


def report(rank, losses):
    eager, compiled = losses[False], losses[True]
    difference = max(abs(a - b) for a, b in zip(eager, compiled, strict=True))
    # every graph Dynamo handed to the backend (AOTAutograd, then eager)
    send_report(rank, eager_losses=eager, compiled_losses=compiled,
                difference=difference, graphs=counters["aot_autograd"]["ok"])
