"""What the probe records of training: backward passes, DDP models, optimiser steps.

:func:`.probe.install` wraps ``torch.autograd.backward`` and
``DistributedDataParallel``'s ``__init__`` and ``forward`` with the functions
here, and registers :func:`after_step` after every optimiser step:

* backward passes: the sum of the parameters each of the first ones trains
  (the leaves of its graph, whatever then updates them), which parameters of
  each DDP model got no gradient, and that the current epoch trained. While a
  DDP model exists, a backward pass waits for the other ranks (DDP averages
  gradients), and is marked so;
* ``DistributedDataParallel``: its line, ``device_ids``, the module's device and
  the one it asked for, ``find_unused_parameters`` and ``static_graph``, and the
  error it raised if any. When CUDA stands in for a module that asked for a
  GPU, the GPU-only arguments DDP would refuse are dropped. Forward passes
  count as through DDP or around it (with the learner's line of the first
  one around it);
* optimiser steps: the sums of the parameters and gradients after the first
  steps, evenly spaced parameter values to compare across ranks, and the
  parameters the optimiser trains outside every DDP model.
"""

from __future__ import annotations

import inspect
import sys

import torch

from . import probe_edits
from .probe_buffers import note_quiet_sync, syncs_buffers
from .probe_state import (
    blocking,
    caller_line,
    first_line,
    learner_line,
    note_call_line,
    owned,
    process_state,
    save_record,
    thread_local,
)
from .record import WRAPS_KEPT

#: Optimiser steps (and backward passes) whose parameters are recorded.
STEPS_KEPT = 3

#: Parameter values kept per step, evenly spaced (a large model's are not all sent).
PARAMS_KEPT = 4096


def trained_parameters(tensors) -> list[torch.Tensor]:
    """The parameters a backward pass from ``tensors`` trains: the leaves of its graph."""
    roots = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors or ())
    pending = [t.grad_fn for t in roots if isinstance(t, torch.Tensor) and t.grad_fn]
    seen, leaves = set(), {}
    while pending:
        node = pending.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if isinstance(variable, torch.Tensor):
            leaves.setdefault(id(variable), variable)
        pending.extend(next_node for next_node, _ in node.next_functions)
    return list(leaves.values())


def note_backward(tensors) -> None:
    record = process_state["record"]
    if record is None or len(record.trained) > STEPS_KEPT:
        return
    params = trained_parameters(tensors)
    if not params:
        return
    with torch.no_grad():
        total = float(sum(p.detach().double().sum() for p in params))
    count = sum(p.numel() for p in params)
    record.trained.append({"at": len(record.trained), "sum": total, "count": count})
    process_state["backward_params"] = params


def note_gradients() -> None:
    """After a recorded backward pass: the absolute sum of the gradients it left."""
    params = process_state.pop("backward_params", None)
    record = process_state["record"]
    if params and record is not None and record.trained:
        with torch.no_grad():
            grads = [p.grad.detach().double().abs().sum() for p in params if p.grad is not None]
        record.trained[-1]["grads"] = float(sum(grads))


def note_unused() -> None:
    """After a backward pass: the parameters of each DDP model that got no gradient.

    Only for a model the backward reached: one that got no gradient at all
    was not in this loss (a GAN's generator in the discriminator's step), and
    is judged after a backward that reaches it.
    """
    changed = False
    record = process_state["record"]
    for entry, module in process_state.get("ddp", []):
        if not entry["unused"]:  # (a later backward may leave out what the first used)
            trains = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
            if trains and all(p.grad is None for _, p in trains):
                continue
            unused = [name for name, p in trains if p.grad is None]
            if entry["unused"] is None or unused:
                entry["unused"] = unused
                entry["unused_at"] = len(record.trained) if record is not None else 0
                changed = True
    if changed:
        save_record()


def recorded_backward(original):
    def backward(tensors, *args, **kwargs):
        note_backward(tensors)
        entry = process_state.get("epoch")
        if entry is not None and not entry["trained"]:
            entry["trained"] = True
            save_record()
        if process_state.get("ddp"):  # DDP averages gradients while backward runs
            with blocking("backward", learner_line()):
                result = original(tensors, *args, **kwargs)
        else:
            result = original(tensors, *args, **kwargs)
        note_gradients()
        note_unused()
        note_event("backward")
        return result

    return backward


def ddp_init(original):
    def init(self, module, *args, **kwargs):
        record = process_state["record"]
        line = learner_line()
        bound = inspect.signature(original).bind_partial(self, module, *args, **kwargs)
        device_ids = bound.arguments.get("device_ids")
        entry = {
            "line": line,
            "device_ids": None
            if device_ids is None
            else [d if isinstance(d, int) else str(d) for d in device_ids],
            "module_device": str(next(module.parameters()).device)
            if any(True for _ in module.parameters())
            else "none",
            "asked": getattr(module, "_doctor_asked", None),
            "error": None,
            "find_unused": bool(bound.arguments.get("find_unused_parameters", False)),
            "static_graph": bool(bound.arguments.get("static_graph", False)),
            "unused": None,
            "broadcast_buffers": bool(bound.arguments.get("broadcast_buffers", True)),
            "module": id(module),  # the same model wrapped again has the same id
            "after_steps": len(record.steps),  # optimiser steps this rank had made before
        }
        if len(record.ddp) < WRAPS_KEPT:
            record.ddp.append(entry)
        # which parameters DDP keeps in step: an optimiser may train more
        process_state.setdefault("in_ddp", set()).update(id(p) for p in module.parameters())
        if process_state["settings"].stand_in and (entry["asked"] or record.gpu_tensors):
            # The model asked for a GPU (moved there, or built there with device=) and got
            # the CPU from the doctor: drop the GPU-only arguments that DDP would refuse
            # for a CPU module.
            bound.arguments.pop("device_ids", None)
            bound.arguments.pop("output_device", None)
            entry["sync_batchnorm"] = stand_in_batchnorm(module)
        try:
            with owned("model_wrapping"), blocking("DistributedDataParallel", line):
                original(*bound.args, **bound.kwargs)
        except Exception as error:
            entry["error"] = f"{type(error).__name__}: {first_line(error)}"
            save_record()
            raise
        entry["plain"] = plain_tensors(module)
        module.register_forward_pre_hook(count_forward)
        process_state.setdefault("ddp", []).append((entry, module))
        for part in module.modules():  # a load into the model or any part of it
            part.register_load_state_dict_post_hook(note_load)
        note_event("wrap", line)
        probe_edits.watch(wrapped_parameters())  # (an edit before the first forward)
        save_record()

    return init


#: The most plain tensor attributes of a wrapped model a record keeps.
PLAIN_KEPT = 20


def plain_tensors(module: torch.nn.Module) -> list[dict]:
    """The floating-point tensors a model keeps as plain attributes, with their sums.

    Neither parameters nor buffers: DDP copies rank 0's parameters and
    buffers when it wraps the model, and none of these, so ranks that build
    them differently compute with different ones.
    """
    found = []
    for prefix, part in module.named_modules():
        for name, value in vars(part).items():
            if len(found) >= PLAIN_KEPT:
                return found
            plain = isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter)
            if plain and value.is_floating_point() and value.numel() > 1:
                found.append({
                    "name": f"{prefix}.{name}" if prefix else name,
                    "shape": list(value.shape),
                    "sum": float(value.detach().double().sum()),
                })  # fmt: skip
    return found


class StandInBatchNorm(torch.nn.modules.batchnorm._BatchNorm):
    """A SyncBatchNorm on a CPU stand-in for a GPU: plain batch norm over the rank's batch.

    SyncBatchNorm runs on GPUs only, and DDP refuses a CPU module that holds
    one; on the stand-ins its statistics cannot be shared across the ranks
    (the report says so), and the rest of the run can still be checked.
    """

    def _check_input_dim(self, input: torch.Tensor) -> None:
        if input.dim() < 2:
            raise ValueError(f"expected at least 2D input (got {input.dim()}D input)")


def stand_in_batchnorm(module: torch.nn.Module) -> int:
    """Turn the SyncBatchNorm layers of a module on a CPU stand-in into batch norms; how many."""
    layers = [m for m in module.modules() if isinstance(m, torch.nn.SyncBatchNorm)]
    for layer in layers:
        layer.__class__ = StandInBatchNorm
    return len(layers)


def ddp_forward(original):
    def forward(self, *args, **kwargs):
        if not torch.is_grad_enabled() and syncs_buffers(self):
            note_quiet_sync()
        thread_local.in_ddp = getattr(thread_local, "in_ddp", 0) + 1
        # (False inside no_sync(): the backward of this forward exchanges nothing)
        thread_local.synced = bool(getattr(self, "require_backward_grad_sync", True))
        try:
            return original(self, *args, **kwargs)
        finally:
            thread_local.in_ddp -= 1

    return forward


def ddp_join_hook(original):
    """``DistributedDataParallel.join_hook``: note that the model trains inside ``join()``."""

    def join_hook(self, *args, **kwargs):
        for entry, module in process_state.get("ddp", []):
            if module is getattr(self, "module", None):  # (the list holds the wrapped modules)
                entry["join"] = True
                save_record()
        return original(self, *args, **kwargs)

    return join_hook


def count_forward(module, inputs) -> None:
    in_ddp = getattr(thread_local, "in_ddp", 0)
    if in_ddp:
        probe_edits.stop()
        note_call_line(learner_line(3))  # (with or without gradients: it may broadcast)
    if not torch.is_grad_enabled():
        return
    forwards = process_state["record"].forwards
    if in_ddp:
        forwards["wrapped"] += 1
        note_event("forward", learner_line(3), synced=getattr(thread_local, "synced", True))
    else:
        forwards["raw"] += 1
        if forwards["raw_line"] is None:
            forwards["raw_line"] = learner_line(3)
            forwards["raw_caller"] = caller_line(sys._getframe(3))


def buffers_sum() -> float | None:
    """The sum of the floating buffers (running statistics...) of this rank's DDP models."""
    buffers = [
        b for _, module in process_state.get("ddp", []) for b in module.buffers()
        if b.is_floating_point()
    ]  # fmt: skip
    if not buffers:
        return None
    with torch.no_grad():
        return float(sum(b.detach().double().sum() for b in buffers))


def _outermost(optimizer, starting: bool) -> bool:
    """Whether this step is no other optimiser's inner step (ZeroRedundancyOptimizer steps a
    local optimiser over its shard of the parameters inside its own step).

    ``starting``: called before the step (else after). Steps that raised leave
    their entry behind; a new step of the same optimiser clears it.
    """
    stack = thread_local.__dict__.setdefault("optimizer_steps", [])
    if starting:
        if id(optimizer) in stack:
            del stack[stack.index(id(optimizer)) :]
        stack.append(id(optimizer))
        return len(stack) == 1
    outermost = stack[:1] == [id(optimizer)]
    if stack and stack[-1] == id(optimizer):
        stack.pop()
    return outermost


def after_step(optimizer, args, kwargs) -> None:
    if not _outermost(optimizer, starting=False):
        return
    record = process_state["record"]
    note_trail("post")
    if process_state.get("ddp"):
        probe_edits.watch(wrapped_parameters())
    if record is None or len(record.steps) >= STEPS_KEPT:
        return
    trained = [p for group in optimizer.param_groups for p in group["params"]]
    params = [p.detach() for p in trained]
    grads = [p.grad for p in trained]
    with torch.no_grad():
        total = float(sum(p.double().sum() for p in params))
        grad_sum = float(sum(g.double().abs().sum() for g in grads if g is not None))
        flat = torch.cat([p.reshape(-1).float().cpu() for p in params])
    in_ddp = process_state.get("in_ddp")
    wrapped = sum(1 for p in trained if id(p) in (in_ddp or ()))
    held = len(trained)
    record.steps.append(
        {"params": total, "grads": grad_sum, "held": held, "wrapped": wrapped,
         "collectives": len(record.collectives), "buffers": buffers_sum()}
    )  # fmt: skip
    note_event("step")
    if in_ddp:  # what the optimiser trains outside every DDP module, by position
        # (by the parameters' own ids: a detached view is a new object)
        record.outside = [
            {"index": i, "shape": list(p.shape), "sum": float(p.detach().double().sum())}
            for i, p in enumerate(trained)
            if id(p) not in in_ddp
        ]
    # evenly spaced values are enough to see two ranks apart, and keep the record small
    record.params = flat[:: max(1, flat.numel() // PARAMS_KEPT)].clone()
    save_record()


# -- the model's timeline: where the ranks' parameters could part ------------------------
#: Events kept per process (the first few steps' worth are enough to find where ranks part).
EVENTS_KEPT = 60


def wrapped_parameters() -> list[torch.Tensor]:
    """The parameters of every DDP model this process made, each once."""
    seen, params = set(), []
    for _, module in process_state.get("ddp", []):
        for p in module.parameters():
            if id(p) not in seen:
                seen.add(id(p))
                params.append(p)
    return params


def note_event(event: str, line: int | None = None, **extra) -> None:
    """Add to the record's ``model_events``: what the DDP models' parameters and gradients were.

    Sums over every wrapped parameter (``params``) and the absolute sums of
    their gradients (``grads``): equal on every rank while DDP keeps them in
    step, so the first event where the ranks' values part says what parted
    them. Only the first steps are kept.
    """
    record = process_state["record"]
    if record is None or not process_state.get("ddp") or len(record.steps) > STEPS_KEPT:
        return
    if len(record.model_events) >= EVENTS_KEPT:
        return
    params = wrapped_parameters()
    with torch.no_grad():
        total = float(sum(p.detach().double().sum() for p in params))
        grads = float(sum(p.grad.double().abs().sum() for p in params if p.grad is not None))
    where = line if line is not None else learner_line(3)
    entry = {"event": event, "line": where, "params": total, "grads": grads}
    record.model_events.append({**entry, **extra})


def note_load(module, incompatible) -> None:
    """After ``load_state_dict`` into a wrapped model (or a part of it): a load event."""
    line = learner_line(3)
    record = process_state["record"]
    events = record.model_events
    if events and events[-1]["event"] == "load" and events[-1]["line"] == line:
        return  # the same call, seen from another part of the model
    note_event("load", line)
    if record.trail and line not in record.trail[-1].get("loads", []):
        record.trail[-1].setdefault("loads", []).append(line)  # (after that step)
    save_record()


def before_step(optimizer, args, kwargs) -> None:
    """Before an optimiser step: a ``before_step`` event with the optimiser's settings."""
    if not _outermost(optimizer, starting=True):
        return
    probe_edits.stop()
    settings = [
        {k: v for k, v in group.items() if isinstance(v, (int, float, tuple, bool))}
        for group in optimizer.param_groups
    ]
    note_event("before_step", learner_line(3), settings=settings)
    note_trail("pre", lr=settings[0].get("lr") if settings else None)


#: Optimiser steps whose parameter sums a rank keeps in its ``trail`` (all of a short run).
TRAIL_KEPT = 400


def recorded_schedule(original):
    """A learning-rate scheduler's ``step``: its line in the learner's file, in the record."""

    def step(self, *args, **kwargs):
        record = process_state["record"]
        line = learner_line()
        own = sys._getframe(1).f_code.co_name in ("_initial_step", "__init__")  # (its making)
        kept = record is not None and len(record.schedules) < TRAIL_KEPT
        if kept and line is not None and not own:
            record.schedules.append(line)
        return original(self, *args, **kwargs)

    return step


def note_trail(when: str, **extra) -> None:
    """Add the sum of the DDP models' parameters to the record's ``trail``, at every step.

    ``"pre"`` (before ``optimizer.step()``) opens a step's entry, ``"post"``
    closes it: ranks that part after the first steps, which ``model_events``
    covers in detail, show here at the step they part.
    """
    record = process_state["record"]
    if record is None or not process_state.get("ddp"):
        return
    if when == "pre" and len(record.trail) >= TRAIL_KEPT:
        return
    if when == "post" and (not record.trail or "post" in record.trail[-1]):
        return
    with torch.no_grad():
        total = float(sum(p.detach().double().sum() for p in wrapped_parameters()))
    if when == "pre":
        record.trail.append({"pre": total, **extra})
    else:
        record.trail[-1]["post"] = total


def recorded_clip(original, what: str, limit_name: str):
    """``clip_grad_norm_``/``clip_grad_value_``, recorded as a ``clip`` event with its limit."""

    def clip(*args, **kwargs):
        result = original(*args, **kwargs)
        limit = kwargs.get(limit_name, args[1] if len(args) > 1 else None)
        try:
            limit = float(limit)
        except (TypeError, ValueError):
            limit = None
        note_event("clip", learner_line(), call=what, limit=limit)
        save_record()
        return result

    return clip


def recorded_clip_norm(original):
    return recorded_clip(original, "clip_grad_norm_", "max_norm")


def recorded_clip_value(original):
    return recorded_clip(original, "clip_grad_value_", "clip_value")
