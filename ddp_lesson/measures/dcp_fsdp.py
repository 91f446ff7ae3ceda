"""What `18_stopping_and_resizing` measures in `workers/dcp_fsdp.py`: not part of a DDP script.

For each rank: how many elements of the model it holds (its shards), and
the whole weights gathered from the shards, so the notebook can compare a
model saved by one world size with the same model loaded by another. The
worker imports this module in one line, so the learner reads DDP only.
"""

import torch
from torch.distributed.tensor import DTensor

from ddp_lesson.measures.after_fsdp import held
from ddp_lesson.reports import send_report


def report(rank, world_size, model):
    """Send this rank's share of the model and the whole weights."""
    params = list(model.parameters())
    full = [p.full_tensor() if isinstance(p, DTensor) else p for p in params]
    send_report(rank, world_size=world_size,
                held=sum(held(p) for p in params),
                weights=torch.cat([w.detach().reshape(-1).cpu()
                                   for w in full]))
