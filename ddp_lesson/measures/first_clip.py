"""What `15_first_week` measures in `workers/first_clip.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import torch

from ddp_lesson.models import flat_parameters
from ddp_lesson.reports import send_report

own = []  # the gradient's norm after each backward inside no_sync()


def record(model, scaler):
    """The norm of the gradient this rank holds, unscaled, if no all-reduce made it."""
    if model.require_backward_grad_sync:
        return  # outside no_sync(): the norm is the one the script keeps
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    own.append(torch.nn.utils.get_total_norm(grads).item() / scaler.get_scale())


def report(rank, model, norms):
    send_report(rank, own=own, norms=norms, params=flat_parameters(model))
