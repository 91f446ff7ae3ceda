"""What the whole-script check runs around a learner's ``main`` to compare it with the reference.

``06_full_script``'s conversion is judged by the doctor stage by stage; what
the doctor does not judge, this probe measures by running the learner's
``main(rank, world_size, port, epochs)`` in warm ranks:

* :func:`training` records the first :data:`STEPS` optimiser steps of every
  rank: whether the optimiser holds the parameters of the model DDP wraps,
  the gradients it steps with, and the reference's gradients at the same
  weights on the same batch (the single-device script's loss, each rank's
  batch, averaged over the ranks, as DDP's all-reduce does); and which
  lines of the script printed or logged, on which rank;
* :func:`after_error` makes the first optimiser step raise (an error the
  learner's code did not cause, as a failing batch would) and reports
  whether the group was still there once ``main`` had ended.

Both use torch's own global hooks (``register_module_forward_pre_hook``,
``register_optimizer_step_pre_hook``/``post_hook``), removed when the run
ends; :func:`training` also wraps, through :mod:`ddp_lesson.launch.torch_hooks`,
``DistributedSampler.__iter__`` (to count epochs) and ``F.cross_entropy`` (to
keep the labels of a batch whose images it cannot look up).
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import sys
from typing import TypedDict

import torch

from ...launch import torch_hooks
from ...reports import send_typed, sends
from ...sources import load

#: Optimiser steps recorded per rank.
STEPS = 2


class StepRecord(TypedDict):
    """One optimiser step of one rank, as :func:`training` saw it."""

    held: int  # how many of the wrapped model's parameter tensors the optimiser holds
    wrapped: int  # how many parameter tensors the model DDP wraps has
    grads: torch.Tensor | None  # the gradients of the wrapped model when the step began
    reference: torch.Tensor | None  # this rank's reference gradient (None: batch unknown)


class TrainingReport(TypedDict):
    """What :func:`training` sends."""

    rank: int
    steps: list[StepRecord]
    said: list[tuple[int, str]]  # (line of the script, text) for each line printed or logged
    passes: int  # the most passes over one DistributedSampler: the epochs main trained


class ErrorReport(TypedDict):
    """What :func:`after_error` sends."""

    rank: int
    raised: bool  # the injected error reached the probe (main did not swallow it)
    released: bool  # no group was left once main had ended


class Injected(RuntimeError):
    """The error :func:`after_error` raises inside the learner's training loop."""


def _labels_by_image() -> dict[bytes, int]:
    from ...data import digits

    features, labels = digits("train").tensors
    found: dict[bytes, int] = {}
    for row, label in zip(features.reshape(len(features), -1), labels, strict=True):
        found.setdefault(row.numpy().tobytes(), int(label))
    return found


def _flat_grads(parameters: list[torch.nn.Parameter]) -> torch.Tensor:
    return torch.cat(
        [
            (p.grad if p.grad is not None else torch.zeros_like(p)).detach().reshape(-1).cpu()
            for p in parameters
        ]
    )


class _Watch:
    """The global hooks of one run: the last DDP forward, and each optimiser step."""

    def __init__(self, inject: bool) -> None:
        self.inject = inject
        self.labels = _labels_by_image()
        self.last: tuple[torch.nn.Module, torch.nn.Module, torch.Tensor] | None = None
        self.target: torch.Tensor | None = None  # the last loss's labels (_note_targets)
        self.steps: list[StepRecord] = []
        self.handles: list = []

    def __enter__(self) -> _Watch:
        from torch.nn.modules.module import register_module_forward_pre_hook
        from torch.optim.optimizer import (
            register_optimizer_step_post_hook,
            register_optimizer_step_pre_hook,
        )

        self.handles = [
            register_module_forward_pre_hook(self._forward),
            register_optimizer_step_pre_hook(self._before_step),
            register_optimizer_step_post_hook(self._after_step),
        ]
        return self

    def __exit__(self, *exc) -> None:
        for handle in self.handles:
            handle.remove()

    def _forward(self, module, inputs) -> None:
        from torch.nn.parallel import DistributedDataParallel

        if not isinstance(module, DistributedDataParallel) or len(self.steps) >= STEPS:
            return
        if inputs and isinstance(inputs[0], torch.Tensor) and torch.is_grad_enabled():
            # the wrapper, its weights as they are at this forward, and the batch it is given
            self.last = (module, copy.deepcopy(module.module), inputs[0].detach().clone())
            self.target = None  # (this batch's labels come with its loss)

    def _before_step(self, optimizer, args, kwargs) -> None:
        if len(self.steps) >= STEPS:
            return
        if self.last is None:
            return  # no DDP forward yet: the doctor judges a model that is never wrapped
        wrapper, before, features = self.last
        params = list(wrapper.module.parameters())
        held = {id(p) for group in optimizer.param_groups for p in group["params"]}
        self.steps.append(
            StepRecord(
                held=sum(id(p) in held for p in params),
                wrapped=len(params),
                grads=_flat_grads(params) if params else None,
                reference=self._reference(before, features),
            )
        )

    def _reference(self, before: torch.nn.Module, features: torch.Tensor) -> torch.Tensor | None:
        """The single-device loss's gradient at ``before``'s weights, on this batch."""
        import torch.nn.functional as F

        rows = features.reshape(len(features), -1).cpu().float()
        labels = [self.labels.get(row.numpy().tobytes()) for row in rows]
        if any(label is None for label in labels):
            # images that are not the training set's rows: the labels the loss was given
            if self.target is None or self.target.shape != (len(features),):
                return None  # no reference to compare
            labels = self.target.tolist()
        with torch.enable_grad():
            before.zero_grad(set_to_none=True)
            loss = F.cross_entropy(before(features), torch.tensor(labels, device=features.device))
            loss.backward()
        return _flat_grads(list(before.parameters()))

    def _after_step(self, optimizer, args, kwargs) -> None:
        if self.inject:
            self.inject = False
            raise Injected("an error raised by the check after an optimizer step")


class _Said(io.TextIOBase):
    """A stdout that notes which line of ``path`` wrote each line of text."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.lines: list[tuple[int, str]] = []

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if text.strip():
            self.lines.append((_caller_line(self.path), text.strip()[:120]))
        return len(text)


def _caller_line(path: str) -> int:
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename == path:
            return frame.f_lineno
        frame = frame.f_back
    return 0


class _Logged(logging.Handler):
    def __init__(self, said: _Said) -> None:
        super().__init__(logging.INFO)
        self.said = said

    def emit(self, record: logging.LogRecord) -> None:
        if record.pathname == self.said.path:
            self.said.lines.append((record.lineno, record.getMessage()[:120]))


@sends(TrainingReport)
def training(rank: int, world_size: int, port: int, path: str, epochs: int) -> None:
    """Run the learner's ``main``; report its first optimiser steps and what it printed."""
    worker = load(path)
    said = _Said(path)
    handler = _Logged(said)
    root = logging.getLogger()
    root.addHandler(handler)
    passes: dict[int, int] = {}
    _count_passes(passes)
    watch = _Watch(inject=False)
    _note_targets(watch)
    try:
        with watch, contextlib.redirect_stdout(said):
            worker.main(rank, world_size, port, epochs)
    finally:
        root.removeHandler(handler)
    most = max(passes.values(), default=0)
    report = TrainingReport(rank=rank, steps=watch.steps, said=said.lines, passes=most)
    send_typed(report)


def _note_targets(watch: _Watch) -> None:
    """Keep, on ``watch``, the labels each cross-entropy loss of this rank is given.

    They are the batch's labels as the learner's loss sees them: the
    reference's, for a batch whose images are not the training set's own
    rows (normalised, say), where :meth:`_Watch._reference` cannot look them up.
    """
    import torch.nn.functional as F

    def make(torch_cross_entropy):
        def cross_entropy(input, target, *args, **kwargs):
            if isinstance(target, torch.Tensor) and not target.is_floating_point():
                watch.target = target.detach().clone()
            return torch_cross_entropy(input, target, *args, **kwargs)

        return cross_entropy

    torch_hooks.wrap(torch_hooks.point(F, "cross_entropy"), make)


def _count_passes(passes: dict[int, int]) -> None:
    """Count, in ``passes`` by sampler, each pass over a DistributedSampler in this rank."""
    from torch.utils.data.distributed import DistributedSampler

    def make(torch_iter):
        def counted(self):
            passes[id(self)] = passes.get(id(self), 0) + 1
            return torch_iter(self)

        return counted

    torch_hooks.wrap(torch_hooks.point(DistributedSampler, "__iter__"), make)


@sends(ErrorReport)
def after_error(rank: int, world_size: int, port: int, path: str, epochs: int) -> None:
    """Run the learner's ``main`` with an error raised after its first optimiser step."""
    import torch.distributed as dist

    worker = load(path)
    raised = False
    try:
        with _Watch(inject=True), contextlib.redirect_stdout(io.StringIO()):
            worker.main(rank, world_size, port, epochs)
    except Injected:
        raised = True
    released = not dist.is_initialized()
    if not released:
        dist.destroy_process_group()  # what main left behind: the probe cleans up
    report = ErrorReport(rank=rank, raised=raised, released=released)
    send_typed(report)
