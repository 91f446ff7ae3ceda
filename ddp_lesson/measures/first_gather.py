"""What `15_first_week` measures in `workers/first_gather.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F

from ddp_lesson.data import digits
from ddp_lesson.reports import send_report


def report(rank, model, median, wrong):
    """Send what the ranks computed together, and what one process computes alone."""
    features, labels = digits("test").tensors
    module = model.module.eval()  # the whole test set, no collective
    device = next(module.parameters()).device
    with torch.no_grad():
        outputs = module(features.to(device)).cpu()
    losses = F.cross_entropy(outputs, labels, reduction="none")
    alone = (outputs.argmax(dim=1) != labels).nonzero().flatten().tolist()
    mine = range(rank, len(labels), dist.get_world_size())
    send_report(rank, median=median, wrong=wrong, misclassified=len(wrong), images=len(mine),
                median_alone=losses.median().item(), wrong_alone=alone)
