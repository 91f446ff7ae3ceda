"""What `13_evaluation` measures in `workers/real_precision.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

from ddp_lesson.models import flat_gradients, flat_parameters
from ddp_lesson.reports import send_report

seen, runs = {}, []


def record(outputs, loss, scaler):
    seen.setdefault("losses", []).append(loss.item())
    seen.update(outputs=str(outputs.dtype), loss=str(loss.dtype))
    if scaler.is_enabled():
        seen["scale"] = scaler.get_scale()


def report(rank, model, precision):
    module = model.module
    runs.append({"precision": precision, **seen,
                 "params": str(next(module.parameters()).dtype),
                 "grads": str(next(module.parameters()).grad.dtype),
                 "flat_grads": flat_gradients(model),
                 "flat_params": flat_parameters(model)})
    seen.clear()
    send_report(rank, runs=runs)
