"""What `09_checkpoints` measures in `workers/stage_09.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import os

from ddp_lesson.models import flat_parameters
from ddp_lesson.reports import send_report, watch_indices

seen = []  # the indices of each epoch, filled as the loop runs
asked = []  # how many epochs this run was asked to reach


def record(rank, train_loader, epochs):
    asked.append(epochs)
    watch_indices(train_loader, seen)


def report(rank, device, model, accuracy):
    restarts = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", 0))
    send_report(rank, resumed_at=asked[0] - len(seen), restarts=restarts,
                accuracy=accuracy, params=flat_parameters(model))
