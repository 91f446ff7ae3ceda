"""Why the ranks' parameters parted: the first event of the model's timeline where they differ.

Each rank records its DDP models' timeline (``ProcessRecord.model_events``):
the wrap, each forward pass through DDP, each backward pass, the moments
before and after each optimiser step, and the loads and clips in between,
each with the sum of the wrapped parameters and of their gradients. DDP
keeps those sums equal on every rank, so the first moment where they differ
says what parted the ranks, and the events just before it say who did it:

* parameters apart before a forward pass: something changed them after the
  last step (or the wrap) on some ranks only (a load, an edit by hand);
* gradients apart before a step, equal after backward: something changed
  them in between on some ranks only (a clip);
* both equal before a step, parameters apart after it: the ranks'
  optimisers differ (their settings, or their state).

Gradients apart right after backward are DDP's averaging not reaching them,
which :mod:`.judge_model` explains from the forward passes and the tensors
outside the module.
"""

from __future__ import annotations

from dataclasses import dataclass

from .judge_evidence import ranks_text
from .record import ProcessRecord

#: The events every rank passes through in the same order while it trains in step.
IN_STEP = ("wrap", "forward", "backward", "before_step", "step")

#: Relative differences up to this count as equal (as :data:`.judge_model.TOLERANCE`).
TOLERANCE = 1e-6


@dataclass(frozen=True)
class Cause:
    """What parted the ranks' parameters, and the learner's line that did it."""

    text: str
    line: int | None


def rank_of(r: ProcessRecord) -> int:
    """The rank a process told the group, else its process number."""
    return r.claimed_rank if r.claimed_rank is not None else r.index


def apart(values: list[float]) -> bool:
    """Whether the ranks' sums differ by more than :data:`TOLERANCE`, relative."""
    return (max(values) - min(values)) / max(1.0, max(abs(v) for v in values)) > TOLERANCE


def changed(before: float, after: float) -> bool:
    """Whether one rank's sum changed between two of its events."""
    return apart([before, after])


def timelines(ranks: list[ProcessRecord]) -> list[list[tuple[int, dict]]]:
    """Each rank's in-step events, with each one's place in the rank's whole timeline."""
    return [[(i, e) for i, e in enumerate(r.model_events) if e["event"] in IN_STEP] for r in ranks]


def first_parting(ranks: list[ProcessRecord]) -> int | None:
    """The index of the first in-step event where the ranks' sums differ, if any."""
    lines = timelines(ranks)
    for k in range(min(len(t) for t in lines)):
        events = [t[k][1] for t in lines]
        if len({e["event"] for e in events}) > 1:
            return None  # the ranks did different things: nothing to compare by position
        if apart([e["params"] for e in events]):
            return k
        if events[0]["event"] in ("backward", "before_step") and apart(
            [e["grads"] for e in events]
        ):
            if not _kept_local(t[: k + 1] for t in lines):
                return k
    return None


def _kept_local(lines) -> bool:
    """Whether each rank's last event is a backward of a forward inside ``no_sync()``.

    Its gradients stay on its rank on purpose (an accumulation's micro-batch):
    apart, they part nothing until a step takes them (``before_step``)."""
    for line in lines:
        if len(line) < 2 or line[-1][1]["event"] != "backward":
            return False
        if line[-2][1]["event"] != "forward" or line[-2][1].get("synced", True):
            return False
    return True


def between(rank: ProcessRecord, start: int, end: int, event: str) -> list[dict]:
    """The rank's ``event`` entries after its timeline's place ``start`` and before ``end``."""
    return [e for e in rank.model_events[start + 1 : end] if e["event"] == event]


def parting_cause(ranks: list[ProcessRecord]) -> Cause | None:
    """Why the ranks' parameters parted, as their timelines show it; None when they cannot say."""
    if len(ranks) < 2 or not all(r.model_events for r in ranks):
        return None
    k = first_parting(ranks)
    if k is None or k == 0:
        return None
    lines = timelines(ranks)
    kind = lines[0][k][1]["event"]
    spans = [(t[k - 1][0], t[k][0]) for t in lines]
    before = [t[k - 1][1] for t in lines]
    now = [t[k][1] for t in lines]
    if kind == "forward" and apart([e["params"] for e in now]):
        return _changed_parameters(ranks, spans, before, now)
    if kind == "before_step" and _kept_local(t[:k] for t in lines):
        return _stepped_unsynced(ranks, lines, k - 1)
    if kind == "before_step":
        return _changed_gradients(ranks, spans, before, now)
    if kind == "step":
        return _stepped_apart(ranks, before, now)
    if kind == "backward":
        return _stepped_unsynced(ranks, lines, k)
    return None


def _stepped_unsynced(ranks, lines, k: int) -> Cause | None:
    """Gradients apart after a backward inside ``no_sync()``, with a step next: never averaged.

    Inside ``no_sync()`` a backward keeps its gradients on its rank (the
    accumulation's micro-batches); a step must follow a backward outside it,
    whose all-reduce averages the sum. A step right after an unsynced
    backward moves each rank by gradients of its own. ``k`` is the place of
    that backward in the ranks' timelines (:func:`timelines`).
    """
    forward = lines[0][k - 1][1]
    if forward["event"] != "forward" or forward.get("synced", True):
        return None
    after = [e for _, e in lines[0][k + 1 :]]
    if not after or after[0]["event"] != "before_step":
        return None
    backward, step = lines[0][k][1]["line"], after[0]["line"]
    done = [e for _, e in lines[0][: k + 1]]
    group = [  # the forwards since the last step (or the wrap): this step's accumulation
        e for e in done[next((i for i in range(len(done) - 1, -1, -1)
                              if done[i]["event"] in ("step", "wrap")), -1) + 1 :]
        if e["event"] == "forward"
    ]  # fmt: skip
    if any(e.get("synced", True) for e in group):
        return _synced_early(group, forward["line"], step)
    tail = _short_tail(done, group, step)
    if tail is not None:
        return tail
    if len(group) > 1:
        return Cause(
            f"no backward before optimizer.step() (line {step}) ran outside model.no_sync() "
            f"(the forward passes at line {forward['line']} all ran inside it): the "
            f"gradients were never averaged, so each rank stepped with gradients of its own. "
            f"{LAST}",
            forward["line"],
        )
    if any(e["event"] == "forward" and e.get("synced", True) for _, e in lines[0]):
        # the accumulation has its synced micro-batch: the step comes after every one
        return Cause(
            f"optimizer.step() (line {step}) ran after every micro-batch, also right after a "
            f"backward (line {backward}) of a forward pass (line {forward['line']}) "
            "inside model.no_sync(): that backward's gradients were never averaged, so each "
            "rank stepped with gradients of its own. Step (and zero the gradients) only after "
            "the last micro-batch, the one that runs outside no_sync()",
            step,
        )
    return Cause(
        f"optimizer.step() (line {step}) came right after a backward (line {backward}) of a "
        f"forward pass (line {forward['line']}) inside model.no_sync(): that backward's "
        f"gradients were never averaged, so each rank stepped with gradients of its own. {LAST}",
        forward["line"],
    )


#: How accumulation with ``no_sync()`` goes right.
LAST = (
    "Inside no_sync() go all micro-batches but the last; the last, the one right before the "
    "step, must run outside it"
)


def _synced_early(group: list[dict], forward: int, step: int) -> Cause:
    """An accumulation whose micro-batches outside ``no_sync()`` all came before its last."""
    outside = [n for n, e in enumerate(group, 1) if e.get("synced", True)]
    which = "the first" if outside == [1] else f"micro-batch(es) {', '.join(map(str, outside))}"
    return Cause(
        f"of the {len(group)} micro-batches before optimizer.step() (line {step}), {which} "
        f"ran outside model.no_sync(), and the {len(group) - outside[-1]} after the last of "
        f"those (forward at line {forward}) inside it, the one right before the step "
        "included: gradients added inside no_sync() after the last backward outside it are "
        "never averaged, so each rank stepped with gradients partly its own. The test that "
        f"picks no_sync() picks the wrong micro-batches: {LAST[0].lower()}{LAST[1:]}",
        forward,
    )


def _short_tail(done: list[dict], group: list[dict], step: int) -> Cause | None:
    """A step after fewer micro-batches than earlier ones, all inside ``no_sync()``.

    ``done`` is one rank's in-step events up to the backward before the step,
    ``group`` the forwards since the step before. Earlier steps closed
    accumulations whose last micro-batch ran outside ``no_sync()``; this one
    closes a shorter one (an epoch's last, when its batches do not divide by
    the count) whose micro-batches all ran inside it.
    """
    groups, forwards = [], []
    for e in done:
        if e["event"] == "forward":
            forwards.append(e)
        elif e["event"] == "step":
            groups.append(forwards)
            forwards = []
    closed = [len(g) for g in groups if g and g[-1].get("synced", True)]
    if not group or not closed or len(group) >= max(closed):
        return None
    return Cause(
        f"optimizer.step() (line {step}) ran after {len(group)} micro-batch(es) that all "
        f"ran inside model.no_sync() (forward at line {group[0]['line']}), while earlier "
        f"steps followed {max(closed)} whose last ran outside it: this step closes a shorter "
        "accumulation (such as an epoch's last, when its batches do not divide by the "
        "accumulation count), and its gradients were never averaged, so each rank stepped "
        "with gradients of its own. Decide no_sync() by the same test that decides the step, "
        "so that the micro-batch right before every step runs outside it",
        step,
    )


def _changed_parameters(ranks, spans, before, now) -> Cause:
    """Parameters apart before a forward pass: a load or an edit on some ranks only."""
    loads = [between(r, *span, "load") for r, span in zip(ranks, spans, strict=True)]
    loaded = [rank_of(r) for r, own in zip(ranks, loads, strict=True) if own]
    after = (
        "after DDP(...) had wrapped it"
        if before[0]["event"] == "wrap"
        else (f"after the optimiser step at line {before[0]['line']}")
    )
    if loaded and len(loaded) < len(ranks):
        line = next(own[0]["line"] for own in loads if own)
        others = [rank_of(r) for r, own in zip(ranks, loads, strict=True) if not own]
        return Cause(
            f"{ranks_text(loaded)} loaded a state dict into the model (line {line}) "
            f"{after}, and {ranks_text(others)} did not, so the ranks went on from "
            "different weights: DDP copies rank 0's parameters to the others only when "
            "it wraps the model. Load on every rank (map_location to each rank's device), "
            "with the optimiser's state too where the checkpoint holds it (or load the model "
            "before DDP(...))",
            line,
        )
    movers = [
        rank_of(r)
        for r, b, n in zip(ranks, before, now, strict=True)
        if changed(b["params"], n["params"])
    ]
    line = now[0]["line"]
    if movers:
        steps = sum(e["event"] == "step" for e in ranks[0].model_events[: spans[0][0] + 1])
        when = (
            f"after optimizer step {steps} (counted in the doctor's run)"
            if steps else "after DDP(...) had wrapped it"
        )  # fmt: skip
        edited = edited_after(ranks, movers, steps, when)
        if edited is not None:
            return edited
    if movers and len(movers) < len(ranks):
        who = f"{ranks_text(movers)} changed the model's parameters"
        others = "and the other ranks did not"
    else:
        who, others = "the ranks changed the model's parameters", "not the same way"
    return Cause(
        f"{who} {after} and before the next forward pass (line {line}), outside the "
        f"optimiser's step, {others}: DDP averages gradients, not parameters, so a change "
        "made on one rank stays on that rank. Make such a change on every rank, or through the "
        "optimiser",
        before[0]["line"] if before[0]["event"] == "step" else line,
    )


def edited_after(ranks, changed: list[int], steps: int, after: str) -> Cause | None:
    """The line where only the ranks in ``changed`` edited the wrapped parameters after
    their ``steps``-th optimiser step (``ProcessRecord.edits``), if they did."""
    edits = {rank_of(r): [e for e in r.edits if e["after_step"] == steps] for r in ranks}
    found = [edits[r][0] for r in changed if edits.get(r)]
    if not found or any(own for r, own in edits.items() if r not in changed):
        return None
    line, caller = found[0]["line"], found[0]["caller"]
    called = f", called from line {caller}" if caller is not None else ""
    if len(changed) == len(ranks):  # every rank wrote there: what each wrote differs
        seeded = _seeded_apart(ranks)
        return Cause(
            f"every rank changed the wrapped model's parameters at line {line}{called}, "
            f"{after}, outside optimizer.step(), and the ranks' parameters differ from then "
            "on: what each rank put into them there was not the same (made on some ranks "
            f"only, or from each rank's own values{seeded}), and DDP keeps the ranks equal "
            "only through the steps it averages. Make what goes in the same on every rank "
            "(compute it on every rank the same way, or broadcast it from rank 0)"
            + (", or make the change before DDP(...)" if steps == 0 else ""),
            line,
        )
    return Cause(
        f"{ranks_text(changed)} changed the wrapped model's parameters at line {line}"
        f"{called}, {after}, outside optimizer.step(), and the other ranks did not, so "
        "from then on the ranks train different weights: DDP copies rank 0's parameters "
        "to the others only when it wraps the model, and keeps them equal only through "
        "the steps it averages. Make the change on every rank, or before DDP(...)",
        line,
    )


def _seeded_apart(ranks) -> str:
    """``"; ... seeded ... differently"`` when the ranks gave one seeding line different
    values (a seed made from the rank), else ""."""
    firsts = [{(x["call"], x["line"]): x["value"] for x in reversed(r.seeds)} for r in ranks]
    for call, line in firsts[0]:
        values = [f.get((call, line)) for f in firsts]
        if None not in values and len(set(values)) > 1:
            pairs = zip(ranks, values, strict=True)
            said = ", ".join(f"{v} on rank {rank_of(r)}" for r, v in pairs)
            return f"; the ranks seeded {call} differently at line {line}: {said}"
    return ""


def _changed_gradients(ranks, spans, before, now) -> Cause | None:
    """Gradients apart before a step, equal after backward: a clip on some ranks only."""
    if apart([e["grads"] for e in before]):
        return None  # apart since backward: DDP's averaging, judged elsewhere
    clips = [between(r, *span, "clip") for r, span in zip(ranks, spans, strict=True)]
    step = now[0]["line"]
    if any(clips):
        clipped = [rank_of(r) for r, own in zip(ranks, clips, strict=True) if own]
        first = next(own[0] for own in clips if own)
        if len(clipped) < len(ranks):
            others = [rank_of(r) for r, own in zip(ranks, clips, strict=True) if not own]
            did = (
                f"{ranks_text(clipped)} clipped its gradients ({first['call']} at line "
                f"{first['line']}) and {ranks_text(others)} did not"
            )
        else:
            limits = ", ".join(
                f"rank {rank_of(r)} {own[0]['limit']:g}"
                for r, own in zip(ranks, clips, strict=True)
            )
            did = (
                f"the ranks clipped their gradients with different limits ({limits}; "
                f"{first['call']} at line {first['line']})"
            )
        return Cause(
            f"{did}, so the averaged gradients, equal after backward, differed at "
            f"optimizer.step() (line {step}). Clip on every rank with the same limit: the "
            "gradients are already averaged then, so the same clip keeps the ranks in step",
            first["line"],
        )
    movers = [
        rank_of(r)
        for r, b, n in zip(ranks, before, now, strict=True)
        if changed(b["grads"], n["grads"])
    ]
    if movers and len(movers) < len(ranks):
        who, others = ranks_text(movers), "and the other ranks did not"
    else:
        who, others = "the ranks", "not the same way"
    return Cause(
        f"{who} changed the gradients after backward (line {before[0]['line']}) and before "
        f"optimizer.step() (line {step}), {others}: DDP averaged them in "
        "backward, so a change after it stays on the rank that makes it. Make it on every "
        "rank the same way",
        step,
    )


def _stepped_apart(records: list[ProcessRecord], before, now) -> Cause:
    """Equal parameters and gradients before a step, apart after it: the optimisers differ.

    When their learning rates differ and a scheduler stepped a different number of
    times on each rank, the scheduler's line owns it.
    """
    ranks = [rank_of(r) for r in records]
    line = now[0]["line"]
    settings = [e.get("settings") or [] for e in before]
    differing = sorted(
        (at, key)
        for at in range(min(len(groups) for groups in settings))
        for key in settings[0][at]
        if len({repr(groups[at].get(key)) for groups in settings}) > 1
    )
    if differing:
        at, key = differing[0]
        group = f" (parameter group {at})" if at else ""
        values = ", ".join(
            f"rank {rank} {key}={groups[at].get(key)}"
            for rank, groups in zip(ranks, settings, strict=True)
        ) + group
        counts = [len(r.schedules) for r in records]
        if key == "lr" and len(set(counts)) > 1:
            at = next(r.schedules[0] for r in records if r.schedules)
            stepped = ", ".join(f"rank {rank}: {n}" for rank, n in zip(ranks, counts, strict=True))
            return Cause(
                f"the ranks' optimisers differ ({values}): the scheduler at line {at} stepped "
                f"a different number of times on each rank ({stepped}), so from the same "
                f"averaged gradients optimizer.step() (line {line}) moved each rank's "
                "parameters by a different amount. Step the scheduler on every rank",
                at,
            )
        return Cause(
            f"the ranks' optimisers differ ({values}): from the same averaged gradients "
            f"optimizer.step() (line {line}) moved each rank's parameters by a different "
            "amount. Build the optimiser with the same settings on every rank",
            line,
        )
    return Cause(
        f"optimizer.step() (line {line}) moved the ranks apart from equal parameters and "
        "equal gradients: their optimisers' states differ (state loaded or changed on some "
        "ranks only). Give every rank the same optimiser state",
        line,
    )
