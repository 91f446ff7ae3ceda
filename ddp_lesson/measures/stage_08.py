"""What `08_torchrun` measures in `workers/stage_08.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
It records as stage 06 does (progress bars, the indices of each epoch) and
reports what torchrun adds: the local rank and the node.
"""

import os

from ddp_lesson.measures.stage_06 import record, seen
from ddp_lesson.models import flat_parameters
from ddp_lesson.reports import send_report

__all__ = ["record", "report"]


def report(rank, device, model, accuracy):
    send_report(rank, local_rank=int(os.environ["LOCAL_RANK"]),
                node=int(os.environ.get("GROUP_RANK", 0)),
                device=str(device), samples_seen=sum(map(len, seen)),
                indices=seen[-1], accuracy=accuracy,
                params=flat_parameters(model))
