"""What `18_stopping_and_resizing` measures in `workers/elastic_job.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
The launch reads the epochs done to know when a node may join or leave.
"""

from ddp_lesson.reports import send_progress, send_report


def record(rank, epoch, epochs, world_size):
    """Say that ``epoch`` is done; at the last one, report the world it ended in."""
    send_progress(rank, epoch + 1, epochs)
    if epoch + 1 == epochs:
        send_report(rank, world_size=world_size)
