"""What `17_comm_and_memory` measures in `workers/comm_hooks.py`: not part of a DDP script.

The bytes each training step sends are counted where they leave: every
``torch.distributed.all_reduce`` call of the rank (the communication hooks
call it, PowerSGD from callbacks after the hook returns) adds its tensor's
size in bytes to a running total. :func:`watch` installs that count, through
:mod:`ddp_lesson.launch.torch_hooks`, the one module that wraps torch's
functions; it counts and calls the function unchanged. The worker imports
this module in one line, so the learner reads DDP only.
"""

import torch
import torch.nn.functional as F

from ddp_lesson.data import digits
from ddp_lesson.launch import torch_hooks
from ddp_lesson.reports import send_report

sent = [0]  # bytes handed to all_reduce in this process so far
steps, losses, runs = [], [], []


def counting(all_reduce):
    """``all_reduce`` that first adds the bytes of the tensor it is given to ``sent``."""

    def all_reduce_counted(tensor, *args, **kwargs):
        sent[0] += tensor.numel() * tensor.element_size()
        return all_reduce(tensor, *args, **kwargs)

    return all_reduce_counted


def watch(model):
    """Start a new run: count, from now on, the bytes this rank all-reduces."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    torch_hooks.wrap(torch_hooks.point((c10d, dist), "all_reduce"), counting)
    steps.clear()
    losses.clear()
    sent[0] = 0


def record(loss):
    """Note one step: the bytes sent since the last step, and its loss."""
    steps.append(sent[0] - sum(steps))
    losses.append(float(loss.detach()))


def accuracy(model):
    """The share of the test images the model classifies right."""
    features, labels = digits("test")[:]
    with torch.no_grad():
        return float((model(features).argmax(1) == labels).float().mean())


def report(rank, hook, model):
    """Send what the run with ``hook`` measured (or why it could not run)."""
    if isinstance(model, Exception):
        runs.append({"hook": hook, "refused": str(model).splitlines()[0]})
    else:
        last = len(losses) // 4 or 1  # the final quarter of the steps
        runs.append({"hook": hook, "first_step_bytes": steps[0],
                     "last_step_bytes": steps[-1], "bytes": sum(steps),
                     "steps": len(steps),
                     "final_loss": sum(losses[-last:]) / last,
                     "accuracy": accuracy(model.module),
                     "test_loss": test_loss(model.module)})
    send_report(rank, runs=runs)


def test_loss(model):
    """The mean cross-entropy of the model on the test images."""
    features, labels = digits("test")[:]
    with torch.no_grad():
        return float(F.cross_entropy(model(features), labels))
