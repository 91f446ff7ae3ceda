"""What `16_after_ddp` measures in `workers/after_fsdp.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import torch
from torch.distributed.tensor import DTensor

from ddp_lesson.reports import send_report

runs = []


def held(tensor):
    """Elements this rank stores: its shard of a DTensor, all of a tensor."""
    if isinstance(tensor, DTensor):
        tensor = tensor.to_local()
    return tensor.numel()


def report(rank, wrapper, model, optimizer):
    params = list(model.parameters())
    state = [t for s in optimizer.state.values() for t in s.values()
             if torch.is_tensor(t) and t.dim() > 0]
    full = [p.full_tensor() if isinstance(p, DTensor) else p for p in params]
    runs.append({"wrapper": wrapper,
                 "params": sum(held(p) for p in params),
                 "grads": sum(held(p.grad) for p in params),
                 "adam_state": sum(held(t) for t in state),
                 "weights": torch.cat([w.detach().reshape(-1).cpu()
                                       for w in full])})
    send_report(rank, runs=runs)
