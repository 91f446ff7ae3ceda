"""Where a rank's code changes its wrapped parameters outside the optimiser's steps.

DDP keeps the ranks' parameters equal only through its own steps: an edit made
after ``optimizer.step()`` on some ranks only (a weight decay applied by rank 0,
a layer initialised again, a copy into ``model.module``) parts them for good.
The trail (:func:`.probe_model.note_trail`) shows *that* they parted; this
module finds *where*. From each step's end (:func:`watch`) until the next
forward through DDP or the next step (:func:`stop`), every line of the
learner's file run in the function that stepped, or in a function of the
learner's that it calls, is followed by a look at the sum of the wrapped
parameters; a line after which it changed is recorded (``record.edits``,
with the learner's line that called its function).

The lines run since the last step are kept too (``record.path``): a rank that
stopped stepping before its partners shows there the line it left its loop at.

Only the learner's own functions are followed (not torch's, not a
``Dataset.__getitem__`` that a DataLoader calls), and only until the next
forward, so the cost is a sum of the parameters for each of a few lines per step.
"""

from __future__ import annotations

import sys

import torch

from .probe_state import caller_line, is_learner, process_state, thread_local

#: Edits a rank records (the first explains a parting; a few more show a pattern).
EDITS_KEPT = 8

#: Lines of the learner's a rank keeps from after its last step (where it left its loop).
PATH_KEPT = 40


def _total(params: list[torch.Tensor]) -> float:
    with torch.no_grad():
        return float(sum(p.detach().double().sum() for p in params))


def _followed(frame) -> bool:
    """A frame of the learner's called by the learner's code: directly, or through one
    frame between (a decorator such as ``@torch.no_grad()``). A ``Dataset.__getitem__``
    lies deeper, under the DataLoader's frames, and is not followed."""
    if not is_learner(frame.f_code.co_filename):
        return False
    above = frame.f_back
    for _ in range(2):
        if above is None:
            return False
        if is_learner(above.f_code.co_filename):
            return True
        above = above.f_back
    return False


def watch(params: list[torch.Tensor]) -> None:
    """After an optimiser step (or the wrap): follow the learner's lines until :func:`stop`.

    The lines run are kept as ``record.path`` (the last step's, once the rank has
    stopped stepping: where it left its loop); the parameters are summed after each
    while fewer than :data:`EDITS_KEPT` edits are recorded.
    """
    record = process_state["record"]
    if record is None or not params:
        return
    record.path = []
    state = {"total": _total(params), "last": {}, "steps": len(record.trail)}
    thread_local.edits = state

    def line(frame, event, arg):
        if thread_local.__dict__.get("edits") is not state:
            return None  # stopped: this frame is no longer followed
        if event in ("line", "return"):
            if event == "line" and len(record.path) < PATH_KEPT:
                record.path.append(frame.f_lineno)
            done = state["last"].get(id(frame)) if event == "line" else frame.f_lineno
            if done is not None and len(record.edits) < EDITS_KEPT:
                total = _total(params)
                if total != state["total"]:
                    state["total"] = total
                    _note(record, done, caller_line(frame), state["steps"])
            state["last"][id(frame)] = frame.f_lineno
        return line

    def call(frame, event, arg):
        return line if _followed(frame) else None

    frame = sys._getframe(1)
    while frame is not None:  # the learner's frames now running: their next lines too
        if is_learner(frame.f_code.co_filename):
            frame.f_trace = line
            state["last"][id(frame)] = frame.f_lineno
        frame = frame.f_back
    sys.settrace(call)


def _note(record, line: int, caller: int | None, steps: int) -> None:
    edit = {"line": line, "caller": caller, "after_step": steps}
    if record.edits and record.edits[-1] == edit:
        return  # the same line again (a loop over the parameters)
    record.edits.append(edit)


def stop() -> None:
    """Stop following lines (the next forward, or the next step, has begun)."""
    if thread_local.__dict__.pop("edits", None) is not None:
        sys.settrace(None)
