"""What `17_comm_and_memory` measures in `workers/zero_state.py`: not part of a DDP script.

The optimiser state a rank holds is the tensors its own optimiser keeps:
``optimizer.state`` for a plain optimiser, and for a
``ZeroRedundancyOptimizer`` the state of the local optimiser it wraps
(``optimizer.optim``), which covers only the parameters this rank owns.
The worker imports this module in one line, so the learner reads DDP only.
"""

import torch

from ddp_lesson.models import flat_parameters
from ddp_lesson.reports import send_report

runs = []


def state_bytes(optimizer):
    """Bytes of every tensor in the optimiser state this rank holds."""
    local = getattr(optimizer, "optim", optimizer)  # ZeRO's own optimiser
    return sum(t.numel() * t.element_size() for s in local.state.values()
               for t in s.values() if torch.is_tensor(t))


def owned(optimizer):
    """Parameters (tensors, elements) this rank's optimiser updates."""
    local = getattr(optimizer, "optim", optimizer)
    params = [p for group in local.param_groups for p in group["params"]]
    return len(params), sum(p.numel() for p in params)


def report(rank, name, model, optimizer):
    """Send the state bytes, what this rank updates, and the weights."""
    tensors, elements = owned(optimizer)
    runs.append({"optimizer": name, "state_bytes": state_bytes(optimizer),
                 "owned_tensors": tensors, "owned_elements": elements,
                 "weights": flat_parameters(model)})
    send_report(rank, runs=runs)
