"""What `14_debugging` measures in `workers/debug_job.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

from ddp_lesson.reports import send_report


def report(rank, port, total):
    send_report(rank, port=port, total=total.item())
