"""The notes under a diagnosis: what is worth knowing besides the stages' verdicts.

What the code suggests that the run was too short to show, a world of one
process, GPUs the CPU stood in for, what the run wrote (kept aside) and
the programs it started, addresses that listen on every network
interface, and a number of processes this machine cannot give.
"""

from __future__ import annotations

import os
from collections import Counter

from .judge_model import device_of
from .read import ALL_INTERFACES, Reading
from .record import Outcome, ProcessRecord
from .verdict import OK, Diagnosis, title


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
        from ..reports import counted

        try:
            devices.check_world_size(nprocs, source="nprocs")
        except ValueError as error:
            notes.append(f"the script starts {counted(nprocs, 'process', 'processes')}: {error}")
            break
    return notes


def add_notes(reading: Reading, outcome: Outcome, diagnosis: Diagnosis) -> list[str]:
    ranks = outcome.ranks
    notes = _unshown(reading, ranks, diagnosis)
    if len(ranks) == 1 and ranks[0].init and ranks[0].claimed_world_size in (1, None):
        notes.append(
            "only one process ran, so there was no other rank to compare with (data "
            "shards, parameters): a world of 1 trains as a single device does"
        )
    emulated = _emulated(ranks, outcome)
    if emulated:
        notes.append(emulated)
    notes += _buffers_apart(ranks) + _tracked_collectives(ranks)
    return notes + _files_notes(reading, outcome) + _warnings(reading, outcome)


def _tracked_collectives(ranks: list[ProcessRecord]) -> list[str]:
    """A note for a collective given a tensor that autograd records (a loss, an output)."""
    tracked = next((c for r in ranks for c in r.collectives if c.get("tracked")), None)
    if tracked is None:
        return []
    return [
        f"{tracked['op']}() at line {tracked['line']} was given a tensor that autograd "
        "records (a loss or an output): collectives are not part of the graph, so a "
        "backward pass through it ignores what the ranks exchanged; for a value to print, "
        "give it a detached copy (loss.detach()); DDP already averages the gradients"
    ]


def _buffers_apart(ranks: list[ProcessRecord]) -> list[str]:
    """A note when DDP was told not to broadcast buffers and the ranks' buffers differ."""
    kept = [e for r in ranks for e in r.ddp if e.get("broadcast_buffers") is False]
    sums = [r.steps[-1].get("buffers") for r in ranks if r.steps]
    if not kept or len(sums) < 2 or None in sums or len(set(sums)) == 1:
        return []
    gap = max(sums) - min(sums)
    if gap <= 1e-9 * max(1.0, *map(abs, sums)):
        return []
    return [
        f"DDP(..., broadcast_buffers=False) at line {kept[0]['line']}: the ranks' buffers "
        f"(running statistics such as batch norm's) differ after {len(ranks[0].steps)} "
        "step(s), so each rank's copy of the model normalises with statistics of its own "
        "and evaluates differently; keep the default broadcast_buffers=True to give every "
        "rank rank 0's (or use SyncBatchNorm to pool them)"
    ]


def _emulated(ranks: list[ProcessRecord], outcome: Outcome) -> str:
    """What the CPU stood in for, said once: the GPUs the ranks asked for, and nccl."""
    if not outcome.stand_in:
        return ""
    asked = sorted({d for d in map(device_of, ranks) if d}, key=_device_order)
    nccl = any(r.init and r.init["asked"] == "nccl" for r in ranks)
    count = _stood_in_count(ranks, outcome)
    if not (asked or nccl or count):
        return ""
    from ..reports import counted  # (torch: the run has imported it already)

    here = (
        "no GPU here" if not outcome.gpus
        else f"{counted(outcome.gpus, 'GPU', 'GPUs')} here, not one for each of the "
        f"{len(ranks)} ranks"
    )  # fmt: skip
    if asked:
        text = f"{here}: the script's GPU branch ran with CPU stand-ins for {_listed(asked)}"
        text += " (nccl ran as gloo)" if nccl else ""
    elif nccl:
        text = f"{here}: the script asked for nccl, which ran as gloo on the CPU"
    else:
        text = here
    if count:
        text += (": " if text == here else "; ") + count
    if asked:
        text += "; the doctor checked the device each rank asked for"
    if any(e.get("sync_batchnorm") for r in ranks for e in r.ddp):
        text += (
            "; SyncBatchNorm, which needs GPUs, ran as plain batch norm on each rank's batch, "
            "so its shared statistics were not checked"
        )
    return text


def _stood_in_count(ranks: list[ProcessRecord], outcome: Outcome) -> str:
    """What the stand-ins' GPU count changed, in words, where the learner's lines asked for it."""
    asked = next((r.gpu_count for r in [outcome.script, *ranks] if r and r.gpu_count), None)
    if asked is None:
        return ""
    return (
        f"torch.cuda.device_count() (line {asked['line']}) answered {asked['answered']} to the "
        f"script, counting the stand-ins (without the doctor it answers {outcome.gpus} here)"
    )


def _device_order(device: str) -> tuple[int, str]:
    index = device.rpartition(":")[2]
    return (int(index) if index.isdigit() else -1, device)


def _listed(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + f" and {items[-1]}"


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
    if reading.agent_line is not None:  # the script's launch of itself, run by torchrun
        started = [line for line in started if line != reading.agent_line]
    if started:
        where = ", ".join(map(str, started))
        notes.append(
            f"the script starts other programs (line {where}): the doctor keeps the script's "
            "own writes out of your folders, but not what those programs write"
        )
    return notes
