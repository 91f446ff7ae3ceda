"""What `19_uneven_inputs` measures in `workers/uneven_momentum.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import torch

from ddp_lesson.models import flat_parameters
from ddp_lesson.reports import send_report

first_steps = {}  # epoch -> the weights right after that epoch's first step
steps = {}  # epoch -> how many steps this rank took in it


def record(epoch, model):
    """Count the step; keep the weights after the first step of each epoch."""
    steps[epoch] = steps.get(epoch, 0) + 1
    if steps[epoch] == 1:
        first_steps[epoch] = flat_parameters(model)


def report(rank, model, optimizer):
    """The weights at the end, the optimiser's momentum buffers, and what was recorded."""
    buffers = [optimizer.state[p].get("momentum_buffer") for p in model.parameters()]
    kept = [b.detach().reshape(-1).cpu() for b in buffers if b is not None]
    momentum = torch.cat(kept) if kept else torch.zeros(0)
    send_report(rank, steps=[steps[e] for e in sorted(steps)], first_steps=first_steps,
                params=flat_parameters(model), momentum=momentum)
