"""What `04_sampler` measures in `workers/stage_04.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

from ddp_lesson.models import flat_parameters
from ddp_lesson.reports import send_report, watch_indices

seen = []  # the indices of each epoch, filled as the loop runs


def record(rank, train_loader, epochs):
    watch_indices(train_loader, seen)


def report(rank, world_size, device, model):
    send_report(rank, seen=seen, weights=flat_parameters(model))
