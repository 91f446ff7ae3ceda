"""What the run shows of wrapping the model: devices, DDP's arguments, parameters in step.

From what each rank recorded: every rank on one GPU, ``device_ids`` that
do not follow the rank, DDP refusing the model, parameters that got no
gradient, and parameters that differ across the ranks after training,
with why (what parted them, as :mod:`.judge_divergence` reads it from the
ranks' timelines; weights apart from the start, forward passes around DDP,
tensors the optimiser trains outside the module DDP wraps); else how DDP
wrapped it.
"""

from __future__ import annotations

from .judge_divergence import edited_after, parting_cause
from .judge_evidence import Judged, Shown, error_text, note_shown
from .read import Finding
from .record import WRAPS_KEPT, ProcessRecord

#: Parameters closer than this count as equal across ranks.
TOLERANCE = 1e-6


def device_of(r: ProcessRecord) -> str | None:
    asked = [p["asked"] for p in r.placements if p["asked"] != "cpu"]
    if not asked:
        return None
    device = asked[0]
    if device == "cuda":
        chosen = [s["asked"] for s in r.set_device if s["asked"]]
        device = chosen[-1] if chosen else "cuda:0"
    return device


def unused_parameters(ranks: list[ProcessRecord]) -> list[str]:
    """Parameters of a DDP model (without find_unused_parameters) that got no gradient."""
    return _unused_entry(ranks).get("unused") or []


def _unused_entry(ranks: list[ProcessRecord]) -> dict:
    for r in ranks:
        for entry in r.ddp:
            if entry.get("unused") and not (entry["find_unused"] or entry["static_graph"]):
                return entry
    return {}


def _unused_finding(ranks: list[ProcessRecord], said: str = "") -> Finding:
    entry = _unused_entry(ranks)
    unused, at = entry["unused"], entry.get("unused_at") or 1
    names = ", ".join(f"`{n}`" for n in unused[:6]) + (" ..." if len(unused) > 6 else "")
    which = "the first backward pass" if at <= 1 else f"backward pass {at} (earlier ones used them)"
    loss = "the loss does not depend" if at <= 1 else "its loss did not depend"
    text = (
        f"parameter(s) {names} got no gradient in {which}: {loss} on them. DDP waits "
        "for every parameter's gradient before it can finish averaging"
        + (f", so the next forward pass raised {said.rstrip('.')}" if said else "")
        + ". Use them in forward, remove them (or set requires_grad=False), or pass "
        "find_unused_parameters=True to DDP(...)"
    )
    return Finding("model_wrapping", text, None)


def _parameter_gap(ranks: list[ProcessRecord]) -> tuple[int, float, float | None] | None:
    """(steps compared, largest difference, difference before any update) across the ranks.

    Optimiser steps when every rank made the same number; else the
    parameters each backward pass trained (learners who update by hand).
    ``None`` when the run gives nothing to compare.
    """
    stepped = [r for r in ranks if r.params is not None and r.steps]
    if len(stepped) == len(ranks) > 1 and len({len(r.steps) for r in stepped}) == 1:
        from .. import reports  # (torch: the records hold tensors, so it is loaded)

        gap = reports.max_abs_difference([r.params for r in stepped])
        sums = [r.steps[-1]["params"] for r in stepped]
        gap = max(gap, (max(sums) - min(sums)) / max(1.0, max(abs(v) for v in sums)))
        return len(stepped[0].steps), gap, _start_gap(ranks)
    trained = [r.trained for r in ranks]
    if len(ranks) > 1 and all(trained):
        common = min(len(t) for t in trained)
        if common >= 2:
            sums = [t[common - 1]["sum"] for t in trained]
            scale = max(1.0, max(abs(s) for s in sums))
            return common - 1, (max(sums) - min(sums)) / scale, _start_gap(ranks)
    return None


def _outside_apart(ranks: list[ProcessRecord]) -> list[dict]:
    """The trained parameters outside every DDP module that differ across the ranks."""
    outside = [r.outside for r in ranks]
    if len(ranks) < 2 or not all(outside) or len({len(o) for o in outside}) != 1:
        return []
    apart = []
    for kept in zip(*outside, strict=True):
        sums = [o["sum"] for o in kept]
        if (max(sums) - min(sums)) / max(1.0, max(abs(v) for v in sums)) > TOLERANCE:
            apart.append(kept[0])
    return apart


def _start_gap(ranks: list[ProcessRecord]) -> float | None:
    """How far the ranks' parameters were apart before the first update (relative)."""
    firsts = [r.trained[0]["sum"] for r in ranks if r.trained]
    if len(firsts) < 2 or len(firsts) < len(ranks):
        return None
    return (max(firsts) - min(firsts)) / max(1.0, max(abs(s) for s in firsts))


def model_verdict(ranks, crashed, stand_in: bool = False) -> Judged:
    """The model's verdict; with ``stand_in``, the GPUs the ranks asked for were the CPU."""
    shown: list[Shown] = []

    def add(text, line=None, exact=False):
        note_shown(shown, "model_wrapping", text, line, exact)

    one_gpu = _one_gpu(ranks, stand_in)  # (its stage, text and line)
    if one_gpu:
        note_shown(shown, *one_gpu)
    wrapped = [r for r in ranks if r.ddp]
    for r in wrapped:
        if r.ddp[0]["error"]:
            if not crashed:  # else the crash says it, with its line
                add(f"DDP refused: {r.ddp[0]['error']}", r.ddp[0]["line"], exact=True)
            return Judged.of(shown)
    ids = [tuple(r.ddp[0]["device_ids"] or ()) for r in wrapped]
    selected = one_gpu and one_gpu[0] == "process_group"  # (the ids follow from that)
    if len(wrapped) > 1 and all(ids) and len(set(ids)) == 1 and not selected:
        add(
            f"every rank wrapped its model with device_ids={list(ids[0])}: the ids must "
            "follow the process's local rank (device_ids=[local_rank])",
            wrapped[0].ddp[0]["line"],
        )
    again = _wrapped_again(wrapped)
    if again is not None:
        add(*again, exact=True)
        return Judged.of(shown)
    unused = unused_parameters(ranks)
    if unused:
        finding = _unused_finding(ranks, error_text(crashed[0][1]) if crashed else "")
        finding.line = next(e["line"] for r in ranks for e in r.ddp if e.get("unused"))
        shown.append(Shown(finding))
    elsewhere = _optimizer_elsewhere(ranks) if wrapped else None
    if elsewhere is not None:
        add(*elsewhere)
        return Judged.of(shown)
    held = _held_apart(ranks)
    if held is not None:
        add(*held)
        return Judged.of(shown)
    compared = None if unused else _parameter_gap(ranks)  # unused: no step completed
    if compared is not None and compared[1] > TOLERANCE:
        add(*_parted(ranks, wrapped, *compared))
        return Judged.of(shown)
    plain = _plain_apart(wrapped)
    if plain is not None:
        add(*plain, exact=True)
        return Judged.of(shown)
    summed = _summed_not_averaged(ranks, averaged=bool(wrapped))
    if summed is not None:
        add(*summed, exact=True)
        return Judged.of(shown)
    later = _parted_later(ranks) if wrapped and not unused and not _joined(ranks) else None
    if later is not None:
        add(*later, exact=later[1] is not None)
        return Judged.of(shown)
    if compared is not None or wrapped:
        return Judged.of(shown, {"model_wrapping": _in_step(wrapped, compared, stand_in)})
    return Judged.of(shown)


def _joined(ranks: list[ProcessRecord]) -> bool:
    """Training under model.join(): the ranks make different numbers of steps, and the join
    ends by copying one rank's parameters to the others, so no step-by-step trail compares."""
    return any(e.get("join") for r in ranks for e in r.ddp)


def _held_apart(ranks: list[ProcessRecord]) -> tuple[str, int | None] | None:
    """Optimisers that hold different parameters on different ranks: the text and line."""
    stepped = [r for r in ranks if r.params is not None and r.steps]
    sizes = [int(r.params.numel()) for r in stepped]
    held = [r.steps[0].get("held") for r in stepped]
    if len(stepped) < 2 or (len(set(sizes)) < 2 and len(set(held)) < 2):
        return None
    line = next(
        (e["line"] for r in stepped for e in r.model_events if e["event"] == "step"), None
    )
    said = ", ".join(f"rank {r.rank}: {n} tensor(s)" for r, n in zip(stepped, held, strict=True))
    return (
        f"the ranks' optimisers hold different parameters ({said}): each rank's "
        "optimizer.step() updates other weights, so the ranks' models part. Build the "
        "optimiser from the same parameters on every rank (e.g. model.parameters())",
        line,
    )


def _plain_apart(wrapped: list[ProcessRecord]) -> tuple[str, int | None] | None:
    """A tensor the model keeps as a plain attribute that differs between ranks: text, line."""
    if len(wrapped) < 2:
        return None
    kept = [{t["name"]: t for t in r.ddp[0].get("plain") or ()} for r in wrapped]
    for name, first in kept[0].items():
        others = [k.get(name) for k in kept[1:]]
        if any(o is None or o["shape"] != first["shape"] for o in others):
            continue
        sums = [first["sum"]] + [o["sum"] for o in others]
        if not _apart(sums):
            continue
        said = ", ".join(f"rank {r.rank}: {v:.4g}" for r, v in zip(wrapped, sums, strict=True))
        line = wrapped[0].ddp[0]["line"]
        return (
            f"the model DDP wraps at line {line} keeps `{name}` (a tensor of shape "
            f"{first['shape']}) as a plain attribute, neither a parameter nor a buffer, and "
            f"it differs between the ranks (its sum, {said}): DDP copies rank 0's parameters "
            "and buffers when it wraps a model, not other tensors, so each rank computes with "
            f"its own. Make it a buffer (register_buffer('{name.rsplit('.', 1)[-1]}', ...)) "
            "or build it the same on every rank",
            line,
        )
    return None


def _wrapped_again(wrapped: list[ProcessRecord]) -> tuple[str, int | None] | None:
    """The same model wrapped by one DDP(...) line again once training began: text and line.

    A wrap inside the training loop: each one broadcasts rank 0's parameters
    and builds DDP's buckets anew. Wrapping again from another line (a model
    re-wrapped after unfreezing layers) is not this.
    """
    for r in wrapped:
        seen: dict[tuple[int | None, int | None], dict] = {}
        for entry in r.ddp:
            key = (entry.get("module"), entry["line"])
            first = seen.setdefault(key, entry)
            if first is not entry and entry.get("after_steps", 0) > first.get("after_steps", 0):
                count = sum(1 for e in r.ddp if (e.get("module"), e["line"]) == key)
                times = f"at least {count}" if len(r.ddp) >= WRAPS_KEPT else str(count)
                return (
                    f"DDP(...) at line {entry['line']} wrapped the same model {times} times on "
                    f"rank {r.rank}, again after optimizer steps: a wrap inside the training "
                    "loop, and each one copies rank 0's parameters to every rank and builds "
                    "DDP's gradient buckets anew. Wrap the model once, before the loop, and "
                    "train the wrapper",
                    entry["line"],
                )
    return None


def _apart(values: list[float]) -> bool:
    return max(values) - min(values) > TOLERANCE * max(1.0, *map(abs, values))


def _parted_later(ranks: list[ProcessRecord]) -> tuple[str, int | None] | None:
    """Ranks whose parameters part at a later step than the first few: what the trail shows.

    Every rank's ``trail`` holds the sum of its wrapped parameters before and
    after each optimiser step. The first step where the ranks differ says
    how: apart before the step (something outside ``optimizer.step()``
    changed one rank's parameters since the last step), or apart after it
    from equal parameters (the optimisers stepped differently: their
    learning rates, when those differ).
    """
    trails = [r.trail for r in ranks]
    if len(trails) < 2 or not all(trails):
        return None
    for k in range(min(len(t) for t in trails)):
        steps = [t[k] for t in trails]
        if any("post" not in s for s in steps):
            break
        pres, posts = [s["pre"] for s in steps], [s["post"] for s in steps]
        if _apart(pres):
            changed = [
                r.rank for r, t in zip(ranks, trails, strict=True)
                if k and _apart([t[k]["pre"], t[k - 1]["post"]])
            ]  # fmt: skip
            loaded = _loaded_after(ranks, trails, k - 1) if k else None
            if loaded is not None:
                return loaded
            edited = edited_after(
                ranks, changed, k, f"after optimizer step {k} (counted in the doctor's run)"
            ) if k else None
            if edited is not None:
                return edited.text, edited.line
            who = f"rank {changed[0]}'s" if len(changed) == 1 else "the ranks'"
            return (
                f"the ranks' parameters were identical after step {k}, but apart before "
                f"optimizer step {k + 1}: {who} parameters changed between the two steps, "
                "outside optimizer.step() (a load, a copy of averaged weights, an edit on "
                "some ranks only); DDP keeps the ranks equal only through its own steps",
                None,
            )
        if _apart(posts):
            return _stepped_apart_later(ranks, steps, k)
    return None


def _stepped_apart_later(
    ranks: list[ProcessRecord], steps: list[dict], k: int
) -> tuple[str, int | None]:
    """Equal parameters before trail step ``k + 1`` and apart after it: text and line."""
    lrs = [s.get("lr") for s in steps]
    said = ", ".join(
        f"rank {r.rank}: {lr:.6g}" if isinstance(lr, float) else f"rank {r.rank}: {lr}"
        for r, lr in zip(ranks, lrs, strict=True)
    )
    why = (
        f"their learning rates differ ({said}): is a scheduler stepped on some ranks only?"
        if len(set(lrs)) > 1
        else "their optimisers' settings or states differ"
    )
    stepped = sorted({len(r.schedules) for r in ranks})
    lines = [r.schedules[0] for r in ranks if r.schedules]
    line = lines[0] if len(stepped) > 1 and lines else None
    if line is not None:
        counts = ", ".join(f"rank {r.rank}: {len(r.schedules)}" for r in ranks)
        why = (
            f"their learning rates differ ({said}): the scheduler at line {line} "
            f"stepped a different number of times on each rank ({counts}, by the end of the "
            "run); step it on every rank"
        )
    return (
        f"the ranks' parameters were identical before optimizer step {k + 1} of the "
        f"doctor's short run (a few batches per epoch) and apart after it: {why}",
        line,
    )


def _loaded_after(ranks: list[ProcessRecord], trails, k: int) -> tuple[str, int] | None:
    """Some ranks only loaded a state dict into the model after step ``k + 1``: text, line."""
    loads = [t[k].get("loads") or [] for t in trails]
    loaded = [r.rank for r, own in zip(ranks, loads, strict=True) if own]
    if not loaded or len(loaded) == len(ranks):
        return None
    line = next(own[0] for own in loads if own)
    others = ", ".join(str(r.rank) for r, own in zip(ranks, loads, strict=True) if not own)
    return (
        f"after optimizer step {k + 1}, rank(s) {', '.join(map(str, loaded))} loaded a state "
        f"dict into the model (line {line}) and rank(s) {others} did not, so the ranks went "
        "on from different weights: DDP copies rank 0's parameters to the others only when "
        "it wraps the model. Load on every rank (map_location to each rank's device), the "
        "optimiser's state as well as the model's (or the model before DDP(...))",
        line,
    )


def _summed_not_averaged(
    ranks: list[ProcessRecord], averaged: bool = False
) -> tuple[str, int | None] | None:
    """Gradients all-reduced by hand with SUM and stepped undivided: the text and its line.

    Judged on every rank's first step: the tensors it all-reduced with SUM
    held its own gradients as backward left them (their absolute sums
    agree), and the optimiser stepped with the all-reduced values. With
    ``averaged`` (a DDP model), backward had already averaged them.
    """
    if len(ranks) < 2 or not all(r.steps and r.trained for r in ranks):
        return None
    lines = []
    for r in ranks:
        local, step = r.trained[0].get("grads"), r.steps[0]
        upto = step.get("collectives")
        summed = [
            c for c in r.collectives[:upto]
            if c.get("reduce") == "SUM" and c.get("before") is not None and c.get("after")
        ] if upto is not None else []  # fmt: skip
        if not local or not summed:
            return None
        before, after = sum(c["before"] for c in summed), sum(c["after"] for c in summed)
        if not (_close(before, local) and _close(step["grads"], after)):
            return None
        lines.append(summed[0]["line"])
    n, line = len(ranks), lines[0]
    if averaged:
        return (
            f"the ranks all-reduce with SUM (line {line}) the gradients that DDP's backward "
            f"had already averaged, and the optimiser steps with that sum: {n} times the "
            f"average, as if the learning rate were {n} times larger; DDP averages the "
            "gradients itself during backward: remove the all-reduce",
            line,
        )
    return (
        f"the ranks all-reduce their gradients with SUM (line {line}) and the optimiser "
        f"steps with that sum: {n} times the average DDP would step with, as if the "
        f"learning rate were {n} times larger; divide the gradients by the world size "
        "after the all-reduce",
        line,
    )


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-4 * max(abs(a), abs(b), 1e-12)


def _optimizer_elsewhere(ranks: list[ProcessRecord]) -> tuple[str, int | None] | None:
    """Optimiser steps that update none of the parameters DDP wraps: the text and its line."""
    steps = [s for r in ranks for s in r.steps]
    if not steps or any(s.get("wrapped", 1) for s in steps) or not all(r.steps for r in ranks):
        return None
    line = next((e["line"] for r in ranks for e in r.model_events if e["event"] == "step"), None)
    at = f" (line {line})" if line else ""
    return (
        f"optimizer.step(){at} updates none of the parameters DDP wraps: the optimiser holds "
        f"{steps[0]['held']} tensor(s) of another model, so nothing steps the wrapped "
        "model's parameters. Build the optimiser "
        "from the parameters of the model DDP wraps (e.g. ddp_model.parameters())",
        line,
    )


def _one_gpu(ranks: list[ProcessRecord], stand_in: bool) -> tuple[str, str, int] | None:
    """Every rank's model on the same GPU: the stage, the text and the line; the group's
    setup (``process_group``) where every rank selected that GPU with ``set_device``."""
    placed = [(r, device_of(r)) for r in ranks]
    gpus = [d for _, d in placed if d]
    if not (len(ranks) > 1 and len(gpus) == len(ranks) and len(set(gpus)) == 1):
        return None
    line = next(p["line"] for p in ranks[0].placements if p["asked"] != "cpu")
    put = f"asked for {gpus[0]} for its model" if stand_in else f"put its model on {gpus[0]}"
    chosen = {(s["asked"], s["line"]) for r in ranks for s in r.set_device[-1:]}
    selected = next(iter(chosen))[1] if len(chosen) == 1 and len(ranks[0].set_device) else None
    if selected is not None and next(iter(chosen))[0] == gpus[0]:
        return (
            "process_group",
            f"every rank selected {gpus[0]} with torch.cuda.set_device (line {selected}) and "
            f"{put.replace(f'asked for {gpus[0]}', 'asked for it')}: NCCL refuses two ranks "
            "on one GPU (\"Duplicate GPU detected\"), and with any backend that GPU would "
            "hold every rank's model while the others idle; select each process's own GPU, "
            "that of its local rank (the rank mp.spawn passes, or "
            "int(os.environ['LOCAL_RANK']) under torchrun): torch.cuda.set_device(local_rank)",
            selected,
        )
    return (
        "model_wrapping",
        f"every rank {put}: NCCL refuses two ranks on one GPU (\"Duplicate GPU "
        "detected\"), and with any backend that GPU would hold every rank's model while "
        "the others idle; give each process the GPU of its local rank (the rank mp.spawn "
        "passes, or int(os.environ['LOCAL_RANK']) under torchrun): "
        "model.to(f'cuda:{local_rank}')",
        line,
    )


def _parted(ranks, wrapped, steps: int, gap: float, start: float | None):
    """Parameters that differ across the ranks after training: the text, and its line.

    Said by cause: what the ranks' timelines show parted them
    (:mod:`.judge_divergence`), weights apart from the start, forward passes
    around DDP, or tensors the optimiser trains outside the module DDP wraps.
    """
    text = f"after {steps} training step(s) the ranks' parameters differ (by up to {gap:.3g})"
    raw = [r.forwards for r in ranks if r.forwards["raw"]]
    cause = parting_cause(ranks) if wrapped and not raw else None
    if cause is not None:
        return f"{text}: {cause.text}", cause.line
    if not wrapped and start is not None and start > TOLERANCE:
        text += (
            "; they differed before the first update already: each rank started from "
            "weights of its own, and nothing copied rank 0's to the others"
        )
    if raw:
        at, caller = raw[0]["raw_line"], raw[0].get("raw_caller")
        where = f" (line {at}, called from line {caller})" if caller else f" (line {at})"
        text += (
            f"; {raw[0]['raw']} training forward pass(es) called the wrapped module "
            f"directly, not through DDP{where}: DDP averages the gradients of the forward "
            "passes made through it, so call the DDP model, not its .module, to train"
        )
    apart = _outside_apart(ranks) if wrapped else []
    if apart:
        shapes = ", ".join("x".join(map(str, o["shape"])) or "scalar" for o in apart)
        text += (
            f"; the ones that differ are outside the module DDP wraps: {len(apart)} "
            f"tensor(s) the optimiser trains (shapes {shapes}) that DDP never averages. "
            "Wrap every part an optimiser trains: the whole model in one DDP(...), and a "
            "network of its own (a second model, a GAN's discriminator) in a DDP of its own"
        )
    line = (raw[0]["raw_line"] if raw else None) or (wrapped[0].ddp[0]["line"] if apart else None)
    return text, line


def _in_step(wrapped, compared, stand_in: bool) -> str:
    """The model's OK text: how DDP wrapped it, and whether training kept it in step."""
    where = sorted({str(device_of(r) or r.ddp[0]["module_device"]) for r in wrapped})
    ranks_word = "rank" if len(wrapped) == 1 else "ranks"
    how = f"DDP wrapped the model on {len(wrapped)} {ranks_word}"
    on_gpus = any(d.startswith("cuda") for d in where) or any(r.gpu_tensors for r in wrapped)
    if not (stand_in and on_gpus):  # (else the note says where the GPUs stood in)
        how += f" ({', '.join(where)})"
    if compared is None:
        return f"{how}; no training step ran, so its exchange was not exercised"
    if not wrapped:
        how = "the model is not wrapped in DDP, yet the ranks kept it in step themselves"
    said = f"{how}; parameters identical on every rank after {compared[0]} step(s)"
    traced = min((len(r.trail) for r in wrapped), default=0)
    if traced > compared[0] and not _joined(wrapped):  # (the trail, compared by _parted_later)
        said += f", and their sums equal after each of the {traced} steps the doctor ran"
    return said
