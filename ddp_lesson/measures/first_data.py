"""What `15_first_week` measures in `workers/first_data.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import time

import torch

from ddp_lesson.data import digits
from ddp_lesson.reports import send_report

events = {}  # what this rank did, and when (seconds on the machine's clock)


def record(event):
    events[event] = time.time()


def report(rank, dataset):
    events["read the file"] = time.time()
    expected = digits("train").tensors
    complete = all(torch.equal(saved, made) for saved, made
                   in zip(dataset.tensors, expected, strict=True))
    send_report(rank, events=events, items=len(dataset), complete=complete)
