"""What `06_full_script` measures in `workers/stage_06.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

from ddp_lesson.models import flat_parameters
from ddp_lesson.reports import send_progress, send_report, watch_indices

seen = []  # the indices of each epoch, filled as the loop runs


def record(rank, train_loader, epochs):
    def done(epoch):  # moves this rank's progress bar below the cell
        send_progress(rank, epoch, epochs)

    watch_indices(train_loader, seen, each_epoch=done)


def report(rank, world_size, device, model, accuracy):
    send_report(rank, device=str(device), accuracy=accuracy,
                samples_seen=sum(len(epoch) for epoch in seen),
                params=flat_parameters(model))
