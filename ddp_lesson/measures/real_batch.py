"""What `12_batches` measures in `workers/real_batch.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import torch
import torch.distributed as dist

from ddp_lesson.reports import send_report

sums, steps, runs = {}, {}, []  # per epoch: [loss x images, images]


def record(epoch, loss, images):
    sums.setdefault(epoch, [0.0, 0])
    sums[epoch][0] += loss.item() * images
    sums[epoch][1] += images
    steps[epoch] = steps.get(epoch, 0) + 1


def report(rank, world_size, device):
    totals = torch.tensor(list(sums.values()), device=device)
    dist.all_reduce(totals)  # add up every rank's sums
    runs.append({"steps": steps[0],
                 "loss": (totals[:, 0] / totals[:, 1]).tolist()})
    sums.clear()
    steps.clear()
    send_report(rank, runs=runs)
