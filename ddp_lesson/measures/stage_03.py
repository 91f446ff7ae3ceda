"""What `03_process_group` measures in `workers/stage_03.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import torch.distributed as dist

from ddp_lesson.reports import send_report


def report(rank, device, total):
    send_report(rank, device=str(device), rank_in_group=dist.get_rank(),
                size_of_group=dist.get_world_size(),
                backend=dist.get_backend(), total=total.item())
