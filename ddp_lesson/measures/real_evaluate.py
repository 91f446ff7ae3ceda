"""What `13_evaluation` measures in `workers/real_evaluate.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

from ddp_lesson.reports import send_report


def report(rank, result):
    send_report(rank, result=result)
