"""What the run shows of the processes and their group: spawning, the group, teardown.

Each function returns its :class:`~.judge_evidence.Judged`: what a stage did
wrong (``shown``) or, when the run shows it working, what it did
(``fine``): the processes that started, the
group they joined and the collectives they made in it, and whether they
released the group before they ended.
"""

from __future__ import annotations

from collections import Counter

from .judge_evidence import Judged, note_shown, ranks_text
from .read import TORCHRUN, WORKER


def judge_spawning(reading, outcome) -> Judged:
    """The processes that started (fine), or none started at all (shown)."""
    shown, fine = [], {}
    script, ranks = outcome.script, outcome.ranks
    if script is not None and script.spawns and script.spawns[0]["nprocs"] == 0:
        note_shown(
            shown, "spawning",
            "mp.spawn(..., nprocs=0) started no process at all (world_size came out as 0: "
            "torch.cuda.device_count() is 0 without GPUs)",
            script.spawns[0]["line"],
        )  # fmt: skip
    entered = [r for r in ranks if not (r.error or {}).get("call")]
    if not entered:
        return Judged.of(shown)
    if reading.mode == TORCHRUN:
        by = "torchrun"
        if reading.self_subprocess:
            by = (
                "torchrun, in place of the script's own start of Python on itself with "
                f"torchrun's variables (subprocess, line {reading.agent_line}),"
            )
        elif reading.agent_line is not None:
            by = (
                "torchrun, in place of the script's own start of torchrun's agent on itself "
                f"(line {reading.agent_line}),"
            )
        fine["spawning"] = (
            f"{by} started {len(entered)} process(es) (RANK "
            f"{min(r.rank for r in entered)}..{max(r.rank for r in entered)}), each running "
            "the script"
        )
    elif reading.mode == WORKER:
        fine["spawning"] = f"{len(entered)} process(es) started, each running main"
    else:
        by = script.spawns[0].get("by", "mp.spawn") if script and script.spawns else "mp.spawn"
        per_start = Counter(r.launch for r in entered)  # (each start's group is judged apart)
        count = f"{len(entered)} process(es)"
        sizes = set(per_start.values())
        if len(per_start) > 1 and len(sizes) == 1:
            count = f"{sizes.pop()} process(es) at each of {len(per_start)} calls"
        elif len(per_start) > 1:
            count = f"{len(entered)} process(es) over {len(per_start)} calls"
        fine["spawning"] = f"{by} started {count}, each running {_function(outcome)}"
    return Judged.of(shown, fine)


def _function(outcome) -> str:
    """The name of the function the script's processes run (``main`` when none was seen)."""
    script = outcome.script
    if script is None or not script.spawns:
        return "main"
    if script.spawns[0].get("by") == "multiprocessing.Pool":  # the task each worker was sent
        return next((r.ran for r in outcome.ranks if r.ran), "its task")
    return script.spawns[0].get("target") or "main"


def judge_group(ranks, stand_in: bool = False, reading=None) -> Judged:
    """The group the ranks joined and the collectives they made in it (fine), or NCCL asked
    for a model every rank kept on the CPU (shown; with ``stand_in``, NCCL ran as gloo)."""
    joined = [r for r in ranks if r.init and r.init.get("joined")]
    if not joined:
        return Judged()
    shown = _met_apart(joined) or (_nccl_on_the_cpu(joined, reading) if stand_in else [])
    if shown:
        return Judged.of(shown)
    fine = {}
    backends = sorted({r.init["backend"] for r in joined})
    starts = sorted({r.launch for r in joined})
    claimed = sorted(r.claimed_rank for r in joined if r.launch == starts[0])
    fine["process_group"] = f"ranks {claimed} joined one {'/'.join(backends)} group"
    if len(starts) > 1:
        fine["process_group"] += f" at each of the script's {len(starts)} starts of processes"
    calls = [len(r.collectives) for r in joined]
    if any(calls) and len(set(calls)) == 1:
        fine["process_group"] += f"; every rank made the same {calls[0]} collective call(s)"
    return Judged.of(fine=fine)


def _met_apart(joined) -> list:
    """Ranks told to meet at different addresses (the doctor's store joined them), as shown."""
    for launch in sorted({r.launch for r in joined}):  # (each of the script's starts apart)
        ranks = sorted((r for r in joined if r.launch == launch), key=lambda r: r.rank)
        places = {r.claimed_rank: r.init.get("meets") for r in ranks}
        met = set(places.values())
        if len(met) > 1 and not any(p is None or "?" in p for p in met):
            return _told_apart(places, ranks[0].init.get("line"))
    return []


def _told_apart(places: dict, line: int | None) -> list:
    """The FAULT of ranks told to meet at ``places`` (by rank), shown at ``line``."""
    told = ", ".join(f"rank {rank}: {where}" for rank, where in places.items())
    same = "the same MASTER_ADDR and MASTER_PORT (or init_method)"
    if all(str(where).startswith("file://") for where in places.values()):
        same = (
            "the same file: choose its path once, before the processes start, and pass it to "
            "each (init_method=f'file://{path}')"
        )
    shown: list = []
    note_shown(
        shown, "process_group",
        f"the ranks were told to meet at different addresses ({told}): run for real, each "
        "waits at its own for ranks that never come, until the group's timeout (the doctor "
        f"joined them at one place to check the rest); give every rank {same}",
        line,
    )  # fmt: skip
    return shown


def _nccl_on_the_cpu(joined, reading=None) -> list:
    """NCCL asked for by ranks that wrapped a model none of them sent to a GPU, as shown."""
    nccl = [r for r in joined if r.init.get("asked") == "nccl"]
    wrapped = [r for r in joined if r.ddp]
    asked = f"{ranks_text(sorted(r.rank for r in nccl))} asked init_process_group for nccl"
    line = nccl[0].init.get("line") if nccl else None
    uncalled = reading.uncalled_test if reading is not None else None
    if uncalled is not None and not any(k in reading.source(uncalled) for k in ("cuda", "nccl")):
        uncalled = None  # (a test of something else: not what chose the GPU's way)
    on_gpus = [p for r in joined for p in r.placements if p["asked"] != "cpu"]
    gone = on_gpus or any(r.set_device or r.gpu_tensors for r in joined)
    if gone and not (nccl and uncalled is not None):
        return []  # (something went to a GPU: the model's placement is judged elsewhere)
    if not nccl or (len(wrapped) < len(joined) and uncalled is None):
        return []
    if uncalled is not None:
        evidence = (
            f"{asked}, on this machine without a GPU: line {uncalled} "
            f"(`{reading.source(uncalled)}`) names a test without calling it, and a function "
            "is always true, so the test chooses the GPU's way on every machine. Here, with "
            "no GPU, a plain run fails (NCCL needs GPUs; the doctor ran nccl as gloo to check "
            "the rest). Call it: add the parentheses"
        )
        line = uncalled
    elif reading is not None and reading.gpu_branch:
        evidence = (
            f"{asked}, though the script's own test for a GPU (torch.cuda.is_available()) "
            "kept the model on the CPU here: NCCL exchanges only tensors on GPUs, so a plain "
            "run on this machine fails (the doctor ran nccl as gloo to check the rest); choose "
            "the backend by the same test as the device (gloo where the model is on the CPU)"
        )
    else:
        evidence = (
            f"{asked}, but no rank sent its model to a GPU: DDP wrapped it on the CPU, and "
            "NCCL exchanges only tensors on GPUs, so on a machine with GPUs DDP's first "
            "exchange fails (here, with no GPU, the doctor ran nccl as gloo); send each "
            "rank's model to its GPU (model.to(rank)) before DDP(...), or ask for gloo where "
            "the processes run on CPUs"
        )
    shown: list = []
    note_shown(shown, "process_group", evidence, line)
    return shown


def judge_teardown(reading, outcome) -> Judged:
    """A group still open when a rank ended (shown), or released by every rank (fine)."""
    shown, fine = [], {}
    ranks = outcome.ranks
    returned = [r for r in ranks if r.returned and r.init]
    alive = [r.rank for r in returned if r.alive_at_return]
    ended = "the script ended" if reading.mode == TORCHRUN else f"{_function(outcome)} returned"
    if alive:
        text = f"the process group was still initialised when {ended} on {ranks_text(alive)}"
        line = reading.release_on_error
        if line is not None:
            text += (
                f": the group is released only from line {line}, which runs only after an "
                "error (an except block); a run that ends well never gets there. Release "
                "it in a finally: block, which runs either way"
            )
        note_shown(shown, "teardown", text, line, exact=line is not None)
    elif returned and len(returned) == len([r for r in ranks if r.init]):
        # (only when every rank that joined got there: else one never reached teardown)
        fine["teardown"] = (
            f"ranks {sorted({r.claimed_rank for r in returned})} released the group "
            f"(destroy_process_group) before {ended}"
        )
    return Judged.of(shown, fine)
