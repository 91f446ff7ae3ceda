"""What `12_batches` measures in `workers/real_accumulate.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import time

from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from ddp_lesson.models import flat_parameters
from ddp_lesson.reports import send_report

calls, runs = [], []  # floats in each bucket all-reduced


def count_all_reduces(group, bucket):
    calls.append(bucket.buffer().numel())
    return default_hooks.allreduce_hook(group, bucket)  # DDP's own


def record(model):
    calls.clear()
    model.register_comm_hook(None, count_all_reduces)
    runs.append({"started": time.perf_counter()})


def report(rank, model):
    runs[-1].update(seconds=time.perf_counter() - runs[-1].pop("started"),
                    all_reduces=len(calls), floats=sum(calls),
                    params=flat_parameters(model))
    send_report(rank, runs=runs)
