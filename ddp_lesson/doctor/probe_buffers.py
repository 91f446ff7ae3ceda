"""Forwards of a DDP model without gradients that broadcast its buffers, and the ranks that
made them alone.

A DDP model with buffers (running statistics, e.g. BatchNorm's) broadcasts them
from rank 0 at each forward: a collective. An evaluation that only some ranks
run through the DDP model therefore makes collectives the other ranks never
match. :func:`note_quiet_sync` counts those forwards (in
:func:`.probe_model.ddp_forward`) and tells the other ranks through the store;
:func:`quiet_apart` (in :mod:`.probe_group`, for a rank left waiting in a
collective) stops in synchronising the model when the ranks' counts differ.
"""

from __future__ import annotations

import contextlib
import sys

from .probe_state import caller_line, group_key, learner_line, process_state, stop_at_stage


def syncs_buffers(ddp) -> bool:
    """Whether this forward of ``ddp`` broadcasts the module's buffers, a collective."""
    try:
        return bool(ddp._check_sync_bufs_pre_fwd())
    except Exception:  # another torch: its older spelling
        return bool(getattr(ddp, "will_sync_module_buffers", lambda: False)())


def note_quiet_sync() -> None:
    """Count a forward without gradients that broadcasts buffers; tell the other ranks how
    many, and where the first one was (its line and the learner's line that called it)."""
    record, store = process_state["record"], process_state.get("store")
    count = process_state["quiet_syncs"] = process_state.get("quiet_syncs", 0) + 1
    if count == 1:
        process_state["quiet_sync_at"] = (learner_line(3), caller_line(sys._getframe(2)))
    line, caller = process_state["quiet_sync_at"]
    if store is not None and record.claimed_rank is not None:
        with contextlib.suppress(Exception):
            store.set(group_key("quiet", record.claimed_rank), f"{count}:{line}:{caller or ''}")


def quiet_apart(store, size: int, waiting: str) -> None:
    """Stop when the ranks made different numbers of buffer-broadcasting forwards without
    gradients: ``waiting`` says which collective the rank left waiting is in."""
    counts, first = {}, None
    for r in range(size):
        key = group_key("quiet", r)
        count, line, caller = (store.get(key).decode() if store.check([key]) else "0::").split(":")
        counts[r] = int(count)
        if line and first is None:
            first = (int(line), int(caller) if caller else None)
    if len(set(counts.values())) < 2 or first is None:
        return
    line, caller = first
    called = f", called from line {caller}" if caller is not None else ""
    said = ", ".join(f"rank {r}: {n}" for r, n in counts.items())
    stop_at_stage(
        "model_wrapping",
        f"the ranks made different numbers of forward passes without gradients through the "
        f"DDP model ({said}; line {line}{called}): the model has buffers (running "
        "statistics, e.g. BatchNorm's), and each forward of a DDP model broadcasts them from "
        f"rank 0, a collective every rank must join, so the ranks' collectives went out of "
        f"step ({waiting}). Evaluate on every rank, or on one rank through model.module, "
        "whose forward makes no collective",
        caller or line,
    )
