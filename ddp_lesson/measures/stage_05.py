"""What `05_ddp_wrap` measures in `workers/stage_05.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

from ddp_lesson.models import flat_gradients, flat_parameters
from ddp_lesson.reports import send_report


def report(rank, device, model, alone):
    send_report(rank, device=str(device), weights=flat_parameters(model),
                own_grad=flat_gradients(alone),
                synced_grad=flat_gradients(model))
