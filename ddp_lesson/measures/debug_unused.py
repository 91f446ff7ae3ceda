"""What `14_debugging` measures in `workers/debug_unused.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import time

from ddp_lesson.reports import send_report

ticks, runs = [], []


def record(rank, step):
    ticks.append(time.perf_counter())
    send_report(rank, steps_started=step + 1, runs=runs)


def report(rank, model):
    ticks.append(time.perf_counter())
    gaps = sorted(b - a for a, b in zip(ticks[2:], ticks[3:], strict=False))  # warm steps
    logged = model._get_ddp_logging_data()  # what DDP itself recorded
    aux = model.module.aux
    runs.append({"step_ms": 1000 * gaps[len(gaps) // 2],
                 "unused_bytes": logged.get("unused_parameter_size", 0),
                 "aux_has_grad": None if aux is None
                 else aux.weight.grad is not None})
    ticks.clear()
    send_report(rank, runs=runs)
