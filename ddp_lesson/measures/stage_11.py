"""What `11_inside_ddp` measures in `workers/stage_11.py`: not part of a DDP script.

The worker imports this module in one line, so the learner reads DDP only.
"""

import time

import torch
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch.utils._python_dispatch import TorchDispatchMode

from ddp_lesson.models import flat_parameters
from ddp_lesson.reports import send_report

log = []  # one entry per training step, filled by the hooks below


def stamp(device):
    """Now: the CPU's clock, or an event in the GPU's own queue of work."""
    if device.type == "cuda":
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event
    return time.perf_counter()


def seconds(start, end):
    if isinstance(start, float):
        return end - start
    end.synchronize()
    return start.elapsed_time(end) / 1000


class AllReduces(TorchDispatchMode):
    """Sees every all-reduce a step starts (DDP's too) and when it ends."""

    def __init__(self, step, device):
        super().__init__()
        self.step, self.device = step, device

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        begun = stamp(self.device)
        out = func(*args, **(kwargs or {}))
        if func.__name__ == "allreduce_.default":
            ended = []  # filled by the handle when the all-reduce completes
            work = torch._C._distributed_c10d.Work.unbox(out[1])
            if work is None:  # no handle (NCCL with one rank): already done
                ended.append(stamp(self.device))
                noted = torch.futures.Future()
                noted.set_result(None)
            else:
                noted = work.get_future().then(
                    lambda _: ended.append(stamp(self.device)))
            size = sum(t.numel() * t.element_size() for t in args[0])
            self.step["all_reduces"].append((begun, noted, ended, size))
        return out


def record(model, device, steps):
    watched = {1, 2, steps}  # these steps are watched; the others timed

    def step_starts(*_):
        step = {"start": stamp(device), "ready": {}, "all_reduces": []}
        if len(log) + 1 in watched:
            step["watch"] = AllReduces(step, device)
            step["watch"].__enter__()
        log.append(step)

    def backward_starts(_gradient):
        log[-1]["backward"] = stamp(device)

    def output_made(_module, _inputs, output):
        output.register_hook(backward_starts)

    def ready(name):
        log[-1]["ready"][name] = stamp(device)

    def step_ends(*_):
        log[-1]["end"] = stamp(device)
        if "watch" in log[-1]:
            log[-1]["watch"].__exit__(None, None, None)

    model.register_forward_pre_hook(step_starts)
    model.register_forward_hook(output_made)
    for name, param in model.named_parameters():  # before any other hook
        param.register_post_accumulate_grad_hook(
            lambda _, name=name: ready(name))
    register_optimizer_step_post_hook(step_ends)


def timeline(step):
    """A watched step's moments, in seconds after the step began."""
    def at(moment):
        return seconds(step["start"], moment)

    for _, noted, _, _ in step["all_reduces"]:
        noted.wait()  # until the handle has noted when its all-reduce ended
    clock = step["start"] if isinstance(step["start"], float) else None
    return {
        "origin": clock,  # the CPU clock, the same in every process here
        "backward": at(step["backward"]),
        "ready": {name: at(moment) for name, moment in step["ready"].items()},
        "all_reduces": [(at(begun), at(ended[0]), size)
                        for begun, _, ended, size in step["all_reduces"]],
        "end": at(step["end"]),
    }


def report(rank, device, model):
    send_report(
        rank, device=str(device), params=flat_parameters(model),
        all_reduces={n: len(step["all_reduces"])
                     for n, step in enumerate(log, 1) if "watch" in step},
        step_s=[seconds(step["start"], step["end"])
                for step in log if "watch" not in step],
        timeline=timeline(log[-1]))
