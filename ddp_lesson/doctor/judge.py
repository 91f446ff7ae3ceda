"""Judging the evidence: each stage's verdict from what the ranks did, explained by the code.

The run decides. A stage is at FAULT only when the run shows it: a rank
raised at a line of that stage, the doctor had to stop a rank, or what the
ranks recorded disagrees (shards that overlap, an order that repeats,
parameters that differ, a group left open). What the code shows
(:mod:`.read`) then explains the fault and names the line that owns the
fix; on its own it never makes a verdict: a stage the run showed to be
fine is OK however its code is written, and a stage the run never reached
is NOT CHECKED, with what the code suggests. A run that ended before some
stage could be checked is no healthy one: it fails, quoting what it printed.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass

from ..stages import KEYS
from .read import ALL_INTERFACES, TORCHRUN, WORKER, Finding, Reading
from .record import ProcessRecord
from .run import Outcome
from .verdict import FAULT, NOT_CHECKED, OK, Diagnosis, StageVerdict, title

#: Parameters closer than this count as equal across ranks.
TOLERANCE = 1e-6


@dataclass
class Shown:
    """What the run showed about one stage: a finding, and whether its line is exact."""

    finding: Finding
    exact: bool = False  # the line a rank raised at: it beats the code's guess


def _add(shown: list[Shown], stage: str, text: str, line: int | None = None,
         exact: bool = False) -> None:
    """Note what the run showed about ``stage``."""
    shown.append(Shown(Finding(stage, text, line), exact))


def _ranks_text(ranks: list[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def _quote(reading: Reading, line: int | None) -> str:
    text = reading.source(line)
    return f" (line {line}: `{text}`)" if text else (f" at line {line}" if line else "")


# -- a rank that raised -----------------------------------------------------------------
def _crashes(outcome: Outcome) -> list[tuple[ProcessRecord, dict]]:
    """The exceptions that ended the run: the first one, and the same one in other ranks.

    A rank that fails takes the others down with it (a peer closed the
    connection, the launcher stopped them): those later errors are
    consequences, and so is an error after the doctor stopped a rank.
    """
    raised = [
        (r, r.error) for r in outcome.ranks if r.error and not r.error.get("interrupted")
    ]
    script = outcome.script
    if not raised and script is not None and script.error and script.spawns:
        if not script.error.get("interrupted") and not outcome.timed_out:
            raised = [(script, script.error)]
    if not raised:
        return []
    first = min(raised, key=lambda pair: pair[1].get("time") or 0.0)[1]
    stops = [r.stop["time"] for r in outcome.ranks if r.stop and r.stop.get("time")]
    if stops and min(stops) < (first.get("time") or 0.0):
        return []  # raised because the doctor had stopped another rank
    same = (first["type"], first["line"], first["message"])
    return [(r, e) for r, e in raised if (e["type"], e["line"], e["message"]) == same]


def _crash(reading: Reading, crashed, unused: list[str], shown) -> StageVerdict | None:
    """The crash as a stage's finding, or as a failure outside the stages (returned)."""
    if not crashed:
        return None
    error = crashed[0][1]
    who = sorted(r.rank for r, _ in crashed)
    process = "the script" if crashed[0][0].script else _ranks_text(who)
    if error.get("call"):
        _add(shown, "spawning", error["message"])
        return None
    line = error["line"]
    stage = error.get("stage") or reading.owners.get(line)
    if stage == "model_wrapping" and unused:
        return None  # the unused parameters explain it (see _judge_model)
    said = _said(error)
    evidence = f"{process} raised {said}{_quote(reading, line)}"
    if stage is None:
        return StageVerdict(
            FAULT,
            f"run: {evidence}, in code that belongs to none of the five stages; the run "
            "ended there",
            line,
            [f"run: {evidence}", "the code that raised belongs to none of the five stages, "
             "and the run ended there"],
        )  # fmt: skip
    _add(shown, stage, evidence, line, exact=True)
    return None


def _said(error: dict) -> str:
    return f"{error['type']}: {error['message']}" if error["message"] else error["type"]


# -- each stage ---------------------------------------------------------------------------
def _judge_spawning(reading, outcome, shown, fine) -> None:
    script, ranks = outcome.script, outcome.ranks
    if script is not None and script.spawns and script.spawns[0]["nprocs"] == 0:
        _add(
            shown, "spawning",
            "mp.spawn(..., nprocs=0) started no process at all (world_size came out as 0: "
            "torch.cuda.device_count() is 0 without GPUs)",
            script.spawns[0]["line"],
        )  # fmt: skip
    entered = [r for r in ranks if not (r.error or {}).get("call")]
    if not entered:
        return
    if reading.mode == TORCHRUN:
        fine["spawning"] = (
            f"torchrun started {len(entered)} process(es) (RANK "
            f"{min(r.rank for r in entered)}..{max(r.rank for r in entered)}), each running "
            "the script"
        )
    elif reading.mode == WORKER:
        fine["spawning"] = f"{len(entered)} process(es) started, each running main"
    else:
        fine["spawning"] = f"mp.spawn started {len(entered)} process(es), each running main"


def _judge_group(ranks, fine) -> None:
    joined = [r for r in ranks if r.init and r.init.get("joined")]
    if not joined:
        return
    backends = sorted({r.init["backend"] for r in joined})
    claimed = sorted(r.claimed_rank for r in joined)
    fine["process_group"] = f"ranks {claimed} joined one {'/'.join(backends)} group"
    calls = [len(r.collectives) for r in joined]
    if any(calls) and len(set(calls)) == 1:
        fine["process_group"] += f"; every rank made the same {calls[0]} collective call(s)"


def _overlap(orders: list[list[int]]) -> set[int]:
    """Indices that more than one rank iterated."""
    seen = Counter(i for order in orders for i in set(order))
    return {i for i, n in seen.items() if n > 1}


def _unseen(first: list[dict], world: int) -> list[int]:
    """Items of the data set no rank iterated in an epoch, beyond what drop_last may leave out.

    ``first``: each rank's first epoch of one loader. DistributedSampler's
    ``drop_last`` leaves out fewer items than there are ranks, a DataLoader's
    ``drop_last`` what its last, short batch would have held (``dropped``).
    """
    size = first[0]["size"]
    if not size or len(first) < world:
        return []  # a rank that iterated nothing: nothing to say about coverage
    seen = {i for e in first for i in e["indices"]}
    unseen = sorted(set(range(size)) - seen)
    allowed = sum(e.get("dropped") or 0 for e in first)
    if first[0]["sampler"] == "DistributedSampler":
        allowed += (first[0].get("replicas") or world) - 1
    return unseen if len(unseen) > allowed else []


def _unseen_text(first: list[dict], unseen: list[int], world: int) -> str:
    size, sampler, replicas = first[0]["size"], first[0]["sampler"], first[0].get("replicas")
    seen = size - len(unseen)
    shown = ", ".join(map(str, unseen[:8])) + (" ..." if len(unseen) > 8 else "")
    text = (
        f"{len(unseen)} of the {size} training items were never seen by any rank in an "
        f"epoch: the {world} ranks together iterated {seen} (never seen: "
        f"{'indices' if len(unseen) > 1 else 'index'} {shown}), "
        "though their shards do not overlap"
    )
    if sampler == "DistributedSampler" and replicas and replicas != world:
        return text + (
            f"; the DistributedSampler was made with num_replicas={replicas} for a world of "
            f"{world} ranks, so the shards of the {replicas - world} rank(s) that do not "
            "exist are never trained on; leave num_replicas and rank out (the group gives "
            "them) or pass the world size"
        )
    return text + "; each epoch must cover the data set once, divided among the ranks"


def _repeated_order(mine, repeats, ranks, line) -> tuple[str, int | None]:
    """Why epochs repeated one order, and the line that owns it: set_epoch never called,
    called with one value, or called too late (after the epoch's loop)."""
    owner = next((r for r in ranks if any(e is mine[0] for e in r.loaders)), None)
    sampler = mine[0].get("sampler_id")
    calls = [c for c in (owner.set_epochs if owner else []) if c.get("sampler_id") == sampler]
    same = (
        f"rank 0 iterated the same order in epoch 0 and the next {len(repeats)} epoch(s) "
        f"(sampler epoch stayed {repeats[0]['epoch']})"
    )
    if not calls:
        return f"{same}: set_epoch was never called", line
    values = sorted({c["epoch"] for c in calls}, key=str)
    if len(values) == 1 and len(calls) > 1:
        return (
            f"{same}: set_epoch is called with the same value, {values[0]!r}, every time "
            f"(line {calls[0]['line']}); pass it the epoch number, set_epoch(epoch)",
            calls[0]["line"],
        )
    at = next(i for i, e in enumerate(mine) if e is repeats[0])
    return (
        f"rank 0 iterated the same order in epoch {at - 1} and epoch {at} (the sampler's "
        f"epoch was still {repeats[0]['epoch']} when epoch {at} began): set_epoch is called "
        f"too late, at line {calls[0]['line']}, after the epoch's loop has iterated the "
        "loader; call set_epoch(epoch) before the loop over the loader, at the top of each "
        "epoch",
        calls[0]["line"],
    )


def _judge_data(ranks, shown, fine) -> None:
    epochs: dict[int, list[list[dict]]] = {}
    for at, r in enumerate(ranks):
        for entry in r.loaders:
            epochs.setdefault(entry["loader"], [[] for _ in ranks])[at].append(entry)
    notes = []
    for per_rank in epochs.values():
        per_rank = [e for e in per_rank if e]
        if len(per_rank) < 2:
            continue
        first = [e[0] for e in per_rank]
        size, line, sampler = first[0]["size"], first[0]["line"], first[0]["sampler"]
        trained = any(e["trained"] for entries in per_rank for e in entries)
        shared = _overlap([e["indices"] for e in first])
        counts = [len(e["indices"]) for e in first]
        padded = sampler == "DistributedSampler" and 0 < len(shared) < len(per_rank)
        if trained and shared and not padded:
            whole = all(set(e["indices"]) >= set(range(size or 0)) for e in first)
            text = (
                f"every rank iterated all {size} items of the training data "
                f"(overlap between ranks {100 * len(shared) // max(size or 1, 1)}%, "
                f"sampler: {sampler})"
                if whole
                else f"{len(shared)} training items went to more than one rank "
                f"(sampler: {sampler})"
            )
            _add(shown, "data_division", text, line)
            continue
        if not trained and padded:
            extra = sum(counts) - (size or 0)
            text = (
                f"the evaluation DataLoader (line {line}) hands out {sum(counts)} items "
                f"for {size}: DistributedSampler pads with {extra} repeated index(es) "
                f"{sorted(shared)}, so a metric summed over ranks counts them twice; "
                "evaluate without padding (e.g. the whole set on one rank)"
            )
            _add(shown, "data_division", text, line)
            continue
        unseen = _unseen(first, len(ranks))
        if trained and unseen:
            _add(shown, "data_division", _unseen_text(first, unseen, len(ranks)),
                 first[0].get("sampler_line") or line)  # fmt: skip
            continue
        # the epochs that trained: a look at one batch (next(iter(loader))) is no epoch
        mine = [e for e in per_rank[0] if e["trained"]] or per_rank[0]
        repeats = [
            e for e in mine[1:] if e["indices"] == mine[0]["indices"] and len(e["indices"]) > 1
        ]
        shuffled = mine[0].get("shuffle", True)
        if trained and sampler == "DistributedSampler" and repeats and shuffled:
            _add(shown, "data_division", *_repeated_order(mine, repeats, ranks, line))
            continue
        if trained:
            text = f"each rank iterated its own {counts[0]} of {size} training items" + (
                f" ({len(shared)} repeated as padding)" if shared else ", no overlap"
            )
            if len(mine) > 1:
                text += (
                    f"; a new order in each of {len(mine)} epochs"
                    if shuffled
                    else f"; the same order in each of {len(mine)} epochs (shuffle=False)"
                )
            notes.append(text)
    if notes:
        fine["data_division"] = "; ".join(notes)


def _device_of(r: ProcessRecord) -> str | None:
    asked = [p["asked"] for p in r.placements if p["asked"] != "cpu"]
    if not asked:
        return None
    device = asked[0]
    if device == "cuda":
        chosen = [s["asked"] for s in r.set_device if s["asked"]]
        device = chosen[-1] if chosen else "cuda:0"
    return device


def _unused(ranks: list[ProcessRecord]) -> list[str]:
    """Parameters of a DDP model (without find_unused_parameters) that got no gradient."""
    for r in ranks:
        for entry in r.ddp:
            if entry.get("unused") and not (entry["find_unused"] or entry["static_graph"]):
                return entry["unused"]
    return []


def _unused_finding(unused: list[str], said: str = "") -> Finding:
    names = ", ".join(f"`{n}`" for n in unused[:6]) + (" ..." if len(unused) > 6 else "")
    text = (
        f"parameter(s) {names} got no gradient in the first backward pass: the loss does "
        "not depend on them. DDP waits for every parameter's gradient before it can "
        "finish averaging"
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


def _judge_model(ranks, shown, fine, crashed) -> None:
    def add(text, line=None, exact=False):
        _add(shown, "model_wrapping", text, line, exact)

    placed = [(r, _device_of(r)) for r in ranks]
    gpus = [d for _, d in placed if d]
    if len(ranks) > 1 and len(gpus) == len(ranks) and len(set(gpus)) == 1:
        line = next(p["line"] for p in ranks[0].placements if p["asked"] != "cpu")
        add(
            f"every rank put its model on {gpus[0]}: one GPU does all the work while "
            "the others idle (or run out of memory); use model.to(rank)",
            line,
        )
    wrapped = [r for r in ranks if r.ddp]
    for r in wrapped:
        if r.ddp[0]["error"]:
            if not crashed:  # else the crash says it, with its line
                add(f"DDP refused: {r.ddp[0]['error']}", r.ddp[0]["line"], exact=True)
            return
    ids = [tuple(r.ddp[0]["device_ids"] or ()) for r in wrapped]
    if len(wrapped) > 1 and all(ids) and len(set(ids)) == 1:
        add(
            f"every rank wrapped its model with device_ids={list(ids[0])}: the ids must "
            "follow the rank (device_ids=[rank])",
            wrapped[0].ddp[0]["line"],
        )
    unused = _unused(ranks)
    if unused:
        finding = _unused_finding(unused, _said(crashed[0][1]) if crashed else "")
        finding.line = next(e["line"] for r in ranks for e in r.ddp if e.get("unused"))
        shown.append(Shown(finding))
    compared = None if unused else _parameter_gap(ranks)  # unused: no step completed
    raw = [r.forwards for r in ranks if r.forwards["raw"]]
    if compared is not None and compared[1] > TOLERANCE:
        steps, gap, start = compared
        text = f"after {steps} training step(s) the ranks' parameters differ (by up to {gap:.3g})"
        if not wrapped and start is not None and start > TOLERANCE:
            text += (
                "; they differed before the first update already: each rank started from "
                "weights of its own, and nothing copied rank 0's to the others"
            )
        if raw:
            text += (
                f"; {raw[0]['raw']} training forward pass(es) called the wrapped module "
                "directly, not through DDP"
            )
        apart = _outside_apart(ranks) if wrapped else []
        if apart:
            shapes = ", ".join("x".join(map(str, o["shape"])) or "scalar" for o in apart)
            text += (
                f"; the ones that differ are outside the module DDP wraps: {len(apart)} "
                f"tensor(s) the optimiser trains (shapes {shapes}) that DDP never averages. "
                "Wrap the whole model, every part the optimiser trains, in one DDP(...)"
            )
        add(text, (raw[0]["raw_line"] if raw else None) or (
            wrapped[0].ddp[0]["line"] if apart else None))
        return
    where = sorted({str(_device_of(r) or r.ddp[0]["module_device"]) for r in wrapped})
    ranks_word = "rank" if len(wrapped) == 1 else "ranks"
    how = f"DDP wrapped the model on {len(wrapped)} {ranks_word} ({', '.join(where)})"
    if compared is not None:
        if not wrapped:
            how = "the model is not wrapped in DDP, yet the ranks kept it in step themselves"
        fine["model_wrapping"] = (
            f"{how}; parameters identical on every rank after {compared[0]} step(s)"
        )
    elif wrapped:
        fine["model_wrapping"] = (
            f"{how}; no training step ran, so its exchange was not exercised"
        )


def _judge_teardown(reading, ranks, shown, fine) -> None:
    returned = [r for r in ranks if r.returned and r.init]
    alive = [r.rank for r in returned if r.alive_at_return]
    ended = "the script ended" if reading.mode == TORCHRUN else "main returned"
    if alive:
        _add(
            shown, "teardown",
            f"the process group was still initialised when {ended} on {_ranks_text(alive)}",
        )  # fmt: skip
    elif returned:
        fine["teardown"] = (
            f"ranks {sorted(r.claimed_rank for r in returned)} released the group "
            f"(destroy_process_group) before {ended}"
        )


# -- why a stage was not reached --------------------------------------------------------------
def _where(outcome: Outcome, reading: Reading) -> tuple[str, int | None]:
    """Where the processes were when the deadline stopped them (the ranks, else the script).

    Returns the words (starting with a space, or empty) and the line, when
    they all were at one.
    """
    places = []
    who = "the processes were" if outcome.ranks else "the script was"
    for r in outcome.ranks or ([outcome.script] if outcome.script else []):
        if r.waiting:
            places.append((f"waiting in {r.waiting['op']}() at line", r.waiting["line"]))
        elif r.stopped_at:
            places.append(("at line", r.stopped_at))
        elif r.error and r.error.get("interrupted") and r.error.get("line"):
            places.append(("at line", r.error["line"]))
    unique = list(dict.fromkeys(places))
    if not unique:
        return "", None
    lines = {line for _, line in unique}
    text = "; ".join(f"{how} {line}" for how, line in unique)
    if len(lines) == 1:
        line = unique[0][1]
        quoted = reading.source(line)
        return f" ({who} {text}" + (f": `{quoted}`)" if quoted else ")"), line
    return f" ({who} {text})", None


def why_not_run(outcome: Outcome, reading: Reading) -> str:
    """One sentence on why the run ended early, if it did."""
    stops = [r for r in outcome.ranks if r.stop]
    if stops:
        return f"the run ended at the {title(stops[0].stop['stage'])} fault"
    if outcome.timed_out:
        # The deadline comes first: stopping the ranks makes each of them
        # raise (KeyboardInterrupt, SystemExit), which is not their fault.
        return (
            f"the run did not finish within its deadline of {outcome.timeout_s:g} s and "
            f"was stopped{_where(outcome, reading)[0]}"
        )
    crashed = _crashes(outcome)
    if crashed:
        e = crashed[0][1]
        at = f" at line {e['line']}" if e["line"] else ""
        return f"a rank raised {e['type']}{at}"
    script = outcome.script
    if script is not None and not script.spawns:
        e = script.error
        if e:
            return f"the script raised {e['type']}: {e['message']} before calling mp.spawn"
        return "the script ended without calling mp.spawn"
    ended = _returned(outcome, reading)
    return f"{ended} before this stage" if ended else ""


def _returned(outcome: Outcome, reading: Reading) -> str:
    """Which processes ended normally, in words ("main returned on ranks 0, 1"), if any did."""
    ranks = sorted(r.rank for r in outcome.ranks if r.returned)
    if not ranks or outcome.timed_out or outcome.error:
        return ""
    if reading.mode == TORCHRUN:
        return f"the script ended on {_ranks_text(ranks)}"
    return f"main returned on {_ranks_text(ranks)}"


#: Lines of the run's output quoted when it ended before the doctor could check a stage.
OUTPUT_LINES = 3


def printed(output: str, most: int = OUTPUT_LINES) -> str:
    """The last lines a run printed, quoted on one line (``""`` when it printed nothing).

    >>> printed("epoch 0\\nno GPU found, stopping\\n")
    '`epoch 0` / `no GPU found, stopping`'
    """
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    return " / ".join(
        f"`{line if len(line) <= 160 else line[:157] + '...'}`" for line in lines[-most:]
    )


# -- the diagnosis -----------------------------------------------------------------------------
def _ended_badly(outcome: Outcome) -> str:
    """Why the run failed although no process recorded an exception (a signal, a kill...)."""
    codes = [c for c in outcome.codes if c]
    if outcome.error is not None:
        first = str(outcome.error).strip().splitlines()
        return f"the launch failed: {first[0] if first else type(outcome.error).__name__}"
    if codes:
        return f"the launcher exited with code {codes[0]}"
    return ""


def _unshown(reading: Reading, ranks: list[ProcessRecord], diagnosis: Diagnosis) -> list[str]:
    """What the code suggests that this run was too short to show, in a stage it found OK."""
    epochs = max((Counter(e["loader"] for e in r.loaders).most_common(1) or [(0, 0)])[0][1]
                 for r in ranks) if ranks else 0  # fmt: skip
    notes = []
    for finding in reading.findings:
        stage = diagnosis.stages.get(finding.stage)
        if stage is None or stage.status != OK or finding.needs != "epochs" or epochs > 1:
            continue
        notes.append(
            f"line {finding.line} ({title(finding.stage)}): {finding.evidence}. This run had "
            f"{epochs} epoch(s), too few to show it; pass more epochs to see it happen"
        )
    return notes


def _warnings(reading: Reading, outcome: Outcome) -> list[str]:
    notes = [w.evidence for w in reading.warnings]
    if not reading.warnings:
        addresses = {r.init.get("address") for r in outcome.ranks if r.init}
        for address in sorted(a for a in addresses if a in ALL_INTERFACES):
            notes.append(
                f"the processes set MASTER_ADDR={address!r}, which listens on every network "
                "interface; the doctor ran them on 127.0.0.1 only. Use 127.0.0.1 (or "
                "localhost) unless other machines must connect"
            )
    asked = [s["nprocs"] for s in (outcome.script.spawns if outcome.script else [])]
    if reading.nprocs is not None:
        asked.append(reading.nprocs)
    for nprocs in dict.fromkeys(n for n in asked if isinstance(n, int) and n > 0):
        from .. import devices  # (torch: only once there is a number to check)

        try:
            devices.check_world_size(nprocs, source="nprocs")
        except ValueError as error:
            notes.append(f"the script starts {nprocs} processes: {error}")
            break
    return notes


def _stops(outcome: Outcome) -> list[Shown]:
    """What the doctor stopped a rank for (it knew the run could not go on)."""
    shown = []
    for r in outcome.ranks:
        if r.stop:
            stop = r.stop
            finding = Finding(stop["stage"], stop["evidence"], stop["line"])
            if stop["stage"] == "spawning" and outcome.script and outcome.script.spawns:
                finding.line = outcome.script.spawns[0]["line"]  # where the processes start
            shown.append(Shown(finding))
    return shown


def _stage_verdict(
    key: str, reading: Reading, shown: list[Shown], fine: dict, stopped: str,
    not_run: str, faults: list[str],
) -> StageVerdict:  # fmt: skip
    """One stage's verdict: FAULT if the run showed one, OK if it showed the stage working."""
    code = sorted((f for f in reading.findings if f.stage == key), key=lambda f: f.line or 0)
    ran: list[Shown] = []
    for item in shown:
        same = any(item.finding.evidence == s.finding.evidence for s in ran)
        if item.finding.stage == key and not same:
            ran.append(item)
    if ran or (not_run and code):
        exact = [s.finding.line for s in ran if s.exact and s.finding.line]
        located = [f.line for f in code if f.line] + [s.finding.line for s in ran if s.finding.line]
        line = next(iter(exact + located), reading.lines.get(key))
        parts = [f"run: {s.finding.evidence}" for s in ran] + [f"code: {f.evidence}" for f in code]
        return StageVerdict(FAULT, "; ".join(parts), line, parts)
    if key in fine:
        return StageVerdict(OK, fine[key], reading.lines.get(key))
    reason = (
        stopped
        or (faults and f"the run ended at the {title(faults[0])} fault")
        or "the run showed nothing about this stage"
    )
    evidence = f"not reached: {reason}"
    if code:
        evidence += "; the code suggests: " + "; ".join(f.evidence for f in code)
    return StageVerdict(NOT_CHECKED, evidence, None)


#: Why the run may pass a stage without showing it, by stage.
UNSEEN = {
    "data_division": "no DataLoader with indices to record was iterated (the data may come "
                     "from an IterableDataset or from tensors made in the loop)",
}


def _passed_unseen(diagnosis: Diagnosis) -> None:
    """Say so where the run went past a stage without showing it: it did not end before it."""
    order = list(diagnosis.stages)
    shown = [i for i, v in enumerate(diagnosis.stages.values()) if v.status in (OK, FAULT)]
    for key in order[: max(shown, default=-1)]:
        verdict = diagnosis.stages[key]
        if verdict.status != NOT_CHECKED or not verdict.evidence.startswith("not reached: "):
            continue
        why = UNSEEN.get(key, "the run showed nothing about it")
        rest = verdict.evidence.split("; the code suggests: ", 1)
        evidence = f"not seen: the run went on to later stages, but {why}"
        if len(rest) == 2:
            evidence += "; the code suggests: " + rest[1]
        diagnosis.stages[key] = StageVerdict(NOT_CHECKED, evidence, verdict.line)


def _unfinished(reading: Reading, outcome: Outcome, diagnosis: Diagnosis) -> StageVerdict | None:
    """A run that did not end well with no fault to show for it: a failure all the same."""
    if outcome.timed_out:
        if not any(v.status == OK for v in diagnosis.stages.values()):
            return None  # nothing was checked: that is a problem (see nothing_checked)
        text = why_not_run(outcome, reading)
        return StageVerdict(
            FAULT,
            f"run: {text}; raise --timeout if it only needs longer",
            _where(outcome, reading)[1],
            [f"run: {text}", "a run that does not end is not a healthy one; raise "
             "--timeout if it only needs longer"],
        )  # fmt: skip
    ended = _ended_badly(outcome)
    if ended:
        return StageVerdict(FAULT, f"run: {ended}", None, [f"run: {ended}"])
    return _ended_early(reading, outcome, diagnosis)


def _ended_early(reading: Reading, outcome: Outcome, diagnosis: Diagnosis) -> StageVerdict | None:
    """A run that ended normally before some stage could be checked: never a healthy one.

    (When no stage at all could be checked, :func:`nothing_checked` says so instead.)
    """
    order = list(diagnosis.stages)
    shown = [order.index(key) for key, v in diagnosis.stages.items() if v.status == OK]
    if not shown:
        return None
    # Only the stages after the last one the run showed: a stage before it
    # (an IterableDataset's data division, say) was passed, just not seen.
    unchecked = [
        key for key in order[max(shown) + 1:] if diagnosis.stages[key].status == NOT_CHECKED
    ]
    if not unchecked:
        return None
    ended = _returned(outcome, reading) or "the run ended"
    text = (
        f"{ended} before {title(unchecked[0])} could be checked, so "
        f"{'that stage was' if len(unchecked) == 1 else 'those stages were'} never checked "
        f"({', '.join(title(k) for k in unchecked)})"
    )
    said = printed(outcome.output)
    parts = [f"run: {text}"]
    if said:
        parts.append(f"the last lines it printed: {said}")
    parts.append(
        "a run is healthy only when it shows every stage working: make the script join "
        "the group, train on its share of the data through DDP and release the group "
        "when run as " + ("torchrun runs it" if reading.mode == TORCHRUN else "the doctor runs it")
    )
    return StageVerdict(FAULT, "; ".join(parts), None, parts)


def _notes(reading: Reading, outcome: Outcome, diagnosis: Diagnosis) -> list[str]:
    ranks = outcome.ranks
    notes = _unshown(reading, ranks, diagnosis)
    if len(ranks) == 1 and ranks[0].init:
        notes.append(
            "only one process ran, so there was no other rank to compare with (data "
            "shards, parameters): a world of 1 trains as a single device does"
        )
    asked_gpu = any((r.init and r.init["asked"] == "nccl") or _device_of(r) for r in ranks)
    if asked_gpu and outcome.stand_in:
        has = (
            "no CUDA GPU" if not outcome.gpus
            else f"{outcome.gpus} CUDA GPU(s), not one for each of the {len(ranks)} ranks"
        )  # fmt: skip
        notes.append(
            f"this machine has {has}: the script's nccl ran as gloo and its cuda devices as "
            "the CPU; the devices each rank asked for are what was checked"
        )
    return notes + _files_notes(reading, outcome) + _warnings(reading, outcome)


def _shown_paths(paths: list[str], most: int = 5) -> str:
    here = os.getcwd()
    shown = [os.path.relpath(p, here) if p.startswith(here + os.sep) else p for p in paths]
    more = f" and {len(shown) - most} more" if len(shown) > most else ""
    return ", ".join(shown[:most]) + more


def _files_notes(reading: Reading, outcome: Outcome) -> list[str]:
    """What the run wrote (kept aside), and the programs it started (whose writes were not)."""
    from .sandbox import programs_started

    notes = []
    if outcome.kept:
        notes.append(
            f"the script wrote or deleted {_shown_paths(outcome.kept)} during the run: the "
            "doctor kept those changes in a folder of its own, deleted after the run, so "
            "your files are as they were"
        )
    started = programs_started("\n".join(reading.sources)) if reading.sources else []
    if started:
        where = ", ".join(map(str, started))
        notes.append(
            f"the script starts other programs (line {where}): the doctor keeps the script's "
            "own writes out of your folders, but not what those programs write"
        )
    return notes


def verdict(
    reading: Reading, outcome: Outcome, world_size: int, not_run: str = ""
) -> Diagnosis:
    """Each stage's verdict from what the run showed, explained by what the code says.

    Args:
        reading: what the code says (:func:`ddp_lesson.doctor.read.read`).
        outcome: what the run left (:func:`ddp_lesson.doctor.run.run`).
        world_size: the processes the doctor asked for.
        not_run: why the file was not run at all (then the code's findings are
            the verdicts, since running it is not possible).
    """
    ranks = outcome.ranks
    diagnosis = Diagnosis(str(reading.path), ranks=ranks, launch=outcome.launch)
    shown = _stops(outcome)
    fine: dict[str, str] = {}
    crashed = _crashes(outcome)
    diagnosis.failure = _crash(reading, crashed, _unused(ranks), shown)
    _judge_spawning(reading, outcome, shown, fine)
    _judge_group(ranks, fine)
    _judge_data(ranks, shown, fine)
    _judge_model(ranks, shown, fine, crashed)
    _judge_teardown(reading, ranks, shown, fine)
    stopped = not_run or why_not_run(outcome, reading)
    for key in KEYS:
        diagnosis.stages[key] = _stage_verdict(
            key, reading, shown, fine, stopped, not_run, diagnosis.faults
        )
    _passed_unseen(diagnosis)
    if diagnosis.failure is None and not diagnosis.faults:
        diagnosis.failure = _unfinished(reading, outcome, diagnosis)
    diagnosis.completed = not (outcome.timed_out or outcome.error or not_run)
    diagnosis.notes = _notes(reading, outcome, diagnosis)
    return diagnosis


def import_problem(reading: Reading, outcome: Outcome) -> str:
    """A one-line problem when the file crashed before any process could run main."""
    name = reading.path.name
    crashed = [r for r in outcome.ranks if (r.error or {}).get("import")]
    script = outcome.script
    if crashed:
        e = crashed[0].error
    elif script is not None and not script.spawns and script.error:
        e = script.error
        if e.get("interrupted"):
            return ""
    else:
        return ""
    at = f" (line {e['line']})" if e["line"] else ""
    said = printed(outcome.output) if e["type"] == "SystemExit" else ""
    return (
        f"{name} crashed before any process could run main: {e['type']}: {e['message']}"
        f"{at}" + (f"; the last lines it printed: {said}" if said else "")
        + "; fix that, then run the doctor again"
    )


def nothing_checked(diagnosis: Diagnosis, outcome: Outcome, reading: Reading) -> str:
    """A one-line problem when the run checked no stage at all (which is no success)."""
    if diagnosis.faults or diagnosis.failure is not None:
        return ""
    if any(v.status == OK for v in diagnosis.stages.values()):
        return ""
    why = why_not_run(outcome, reading) or "the processes it started did nothing the doctor checks"
    hint = (
        "; if the script only needs longer, pass a larger --timeout"
        if outcome.timed_out
        else "; make sure it starts its processes and trains when run as "
        + ("torchrun runs it" if reading.mode == TORCHRUN else "a script")
    )
    said = printed(outcome.output)
    said = f"; the last lines it printed: {said}" if said else ""
    return f"nothing in {reading.path.name} could be checked: {why}{said}{hint}"
