"""What `07_mistakes` measures in `workers/mistake_none.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

from ddp_lesson.models import flat_parameters
from ddp_lesson.reports import send_report, watch_indices

seen = []  # the indices of each epoch, filled as the loop runs


def record(rank, train_loader, epochs):
    watch_indices(train_loader, seen)


def report(rank, world_size, device, model, accuracy):
    send_report(rank, device=str(device), seen=seen, accuracy=accuracy,
                params=flat_parameters(model))
