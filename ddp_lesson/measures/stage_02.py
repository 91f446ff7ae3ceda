"""What `02_spawn` measures in `workers/stage_02.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import os

from ddp_lesson.models import flat_parameters
from ddp_lesson.reports import send_report, watch_indices

seen = []  # the indices of each epoch, filled as the loop runs


def record(rank, train_loader, epochs):
    watch_indices(train_loader, seen)


def report(rank, world_size, device, model):
    send_report(rank, world_size=world_size, device=str(device),
                pid=os.getpid(), items=len(seen[0]),
                weights=flat_parameters(model))
