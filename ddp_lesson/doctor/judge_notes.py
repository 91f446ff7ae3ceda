"""The notes under a diagnosis: what is worth knowing besides the stages' verdicts.

What the code suggests that the run was too short to show, a world of one
process, GPUs the CPU stood in for, what the run wrote (kept aside) and
the programs it started, addresses that listen on every network
interface, and a number of processes this machine cannot give.
"""

from __future__ import annotations

import os
from collections import Counter

from .judge_model import _device_of
from .read import ALL_INTERFACES, Reading
from .record import ProcessRecord
from .run import Outcome
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
