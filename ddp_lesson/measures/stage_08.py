"""What `08_torchrun` measures in `workers/stage_08.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import os

from ddp_lesson.models import flat_parameters
from ddp_lesson.reports import send_progress, send_report, watch_indices

seen = []  # the indices of each epoch, filled as the loop runs


def record(rank, train_loader, epochs):
    def done(epoch):  # moves this rank's progress bar below the cell
        send_progress(rank, epoch, epochs)

    watch_indices(train_loader, seen, each_epoch=done)


def report(rank, device, model, accuracy):
    send_report(rank, local_rank=int(os.environ["LOCAL_RANK"]),
                node=int(os.environ.get("GROUP_RANK", 0)),
                device=str(device), samples_seen=sum(map(len, seen)),
                indices=seen[-1], accuracy=accuracy,
                params=flat_parameters(model))
