"""Checks for the exercises of the lesson's stages (notebooks 02 to 06).

A failure of a file's check says what happened and where to look; the line
that fixes it comes after a few tries at the same mistake, or with
``reveal=True``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ... import data, devices, launch, reports
from ...stages import stage
from ..probes import stage_workers as probes
from . import answers, base
from .base import Result, failed, graded, launch_checked, not_attempted, passed, quote

SPAWNING = stage("spawning").title
GROUP = stage("process_group").title
DATA = stage("data_division").title
MODEL = stage("model_wrapping").title
TEARDOWN = stage("teardown").title


# The multiple-choice answers: (check, right letter, stage, said on a pass,
# the fix for a wrong letter, the question).
check_nprocs_zero, check_easy = (
    base.multiple_choice(*spec)
    for spec in (
        ("check_nprocs_zero", "b", SPAWNING,
         "nprocs=0 starts nothing and raises nothing: a silent no-op.",
         "re-run the mp.spawn(..., nprocs=0) cell in 00_setup and watch",
         "what ``mp.spawn(..., nprocs=0)`` does"),
        ("check_easy", "b", DATA,
         "without the sampler every process iterates the whole data set.",
         "the sampler= argument is the only thing that divides the data",
         "the EASY fault-finding: what each process iterates without the sampler"),
    )
)  # fmt: skip


# -- stage 1: starting processes ------------------------------------------------
def check_spawn(start: Callable, world_size: object) -> Result:
    """Check ``start(main, world_size, port)`` starts one process per device with the right ranks.

    Args:
        start: the learner's function; it must call ``mp.spawn`` on ``main``.
        world_size: the learner's world size for this machine.
    """
    name = "check_spawn"
    plan = devices.plan()
    if base.is_stub(world_size):
        return not_attempted(name, "the world_size line")
    if world_size != plan.world_size:
        return failed(
            name,
            SPAWNING,
            f"world_size = {plan.world_size}: one process per device on this machine "
            f"({plan.reason})",
            f"world_size = {world_size!r}"
            + (" (torch.cuda.device_count() is 0 without GPUs)" if world_size == 0 else ""),
            "the world_size line: torch.cuda.device_count() where there are 2 GPUs or "
            "more, else 2 CPU processes (DDP_LESSON_WORLD_SIZE asks this course for another)",
        )
    try:
        with launch.bounded(plan.world_size, timeout_s=base.CHECK_TIMEOUT_S) as run:
            start(probes.report_rank, world_size, run.port)
    except NotImplementedError:
        return not_attempted(name, "start()")
    except launch.LaunchError as error:
        text = str(error)
        if "positional argument" in text:
            return failed(
                name,
                SPAWNING,
                "main(rank, world_size, port) called with rank supplied by mp.spawn",
                quote(error),
                "the mp.spawn call: args=(world_size, port) holds only what follows rank",
            )
        if "no process was started" in text:
            return failed(
                name,
                SPAWNING,
                reports.counted(plan.world_size, "process", "processes"),
                "no process was started (nprocs=0 starts nothing, silently)",
                "the mp.spawn call: nprocs=world_size",
            )
        return failed(name, SPAWNING, "every rank to run main", quote(error), "the mp.spawn call")
    except Exception as error:  # learner code: report it, never a traceback wall
        return failed(
            name,
            SPAWNING,
            "start() to run without an error",
            quote(error),
            "the body of start(): one call to mp.spawn",
        )
    ranks = [r["rank"] for r in run.reports]
    expected = list(range(plan.world_size))
    if ranks != expected:
        return failed(
            name,
            SPAWNING,
            f"ranks {expected}, one process each",
            f"ranks {ranks} reported",
            "the mp.spawn call: nprocs must be world_size",
        )
    if {r["world_size"] for r in run.reports} != {world_size}:
        return failed(
            name,
            SPAWNING,
            f"every rank told world_size={world_size}",
            f"ranks were told {[r['world_size'] for r in run.reports]}",
            "the mp.spawn call: args=(world_size, port)",
        )
    return passed(name, f"ranks {ranks} each started once, all told world_size={world_size}.")


# -- stage 2: connecting processes ------------------------------------------------
@graded
def check_process_group(path: str | Path, *, reveal: bool = False) -> Result:
    """Launch the learner's ``ddp_setup`` and ``cleanup`` (from the file at ``path``) for real.

    ``reveal=True`` shows the line that fixes a failure now, even on a first try.
    """
    name = "check_process_group"
    plan = devices.plan()
    got = launch_checked(
        name, path, probes.process_group, "ddp_setup() and cleanup()",
        stage=GROUP, expected="ddp_setup() to create the group",
        fix="ddp_setup: the line the error names",
        hang=(
            f"all {plan.world_size} ranks to meet in init_process_group",
            f"they did not meet within {base.CHECK_TIMEOUT_S} s",
            "ddp_setup: every rank must meet at one address and the port it is given "
            "(MASTER_ADDR, MASTER_PORT), each as its own rank, in a group of world_size",
            'MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), and '
            "init_process_group(backend, rank=rank, world_size=world_size)",
        ),
    )  # fmt: skip
    expected_total = sum(rank + 1 for rank in range(plan.world_size))
    for report in got:
        rank = report["rank"]
        if not report["initialized"]:
            return failed(
                name,
                GROUP,
                "a process group after ddp_setup()",
                f"rank {rank} had no group",
                "ddp_setup: call init_process_group",
            )
        if (report["rank_in_group"], report["size_of_group"]) != (rank, plan.world_size):
            return failed(
                name,
                GROUP,
                f"rank {rank} of {plan.world_size} in the group",
                f"rank {report['rank_in_group']} of {report['size_of_group']}",
                "ddp_setup: which rank and world size is init_process_group given?",
                answer="init_process_group(backend, rank=rank, world_size=world_size)",
            )
        if report["backend"] != plan.backend:
            return failed(
                name,
                GROUP,
                f"backend {plan.backend!r}",
                f"backend {report['backend']!r}",
                'ddp_setup: "nccl" with GPUs, "gloo" without',
            )
        if report["total"] != expected_total:
            return failed(
                name,
                GROUP,
                f"all_reduce sum {expected_total}",
                f"{report['total']}",
                "ddp_setup: every rank must join one group",
            )
        if report["after_cleanup"]:
            return failed(
                name,
                TEARDOWN,
                "no group after cleanup()",
                f"rank {rank}'s group was still initialized",
                "cleanup: the group each rank joined must be released before it ends",
                answer="destroy_process_group()",
            )
    return passed(
        name,
        f"{plan.world_size} ranks joined one {plan.backend} group, summed to {expected_total:g}, "
        "and released it.",
    )


# -- stage 3: splitting the data ---------------------------------------------------
@graded
def check_sampler(
    path: str | Path, size: int = 10, epochs: int = 2, *, reveal: bool = False
) -> Result:
    """Launch the learner's ``make_loader`` and ``epoch_orders``; compare with the real sampler.

    ``reveal=True`` shows the line that fixes a failure now, even on a first try.
    """
    name = "check_sampler"
    plan = devices.plan()
    got = launch_checked(
        name, path, probes.sampler, "make_loader() and epoch_orders()", size, epochs,
        stage=DATA, expected="the loader to run",
        fix="make_loader / epoch_orders: the line the error names",
    )  # fmt: skip
    orders = [r["orders"] for r in got]
    if any(len(o[0]) == size for o in orders) and plan.world_size > 1:
        return failed(
            name,
            DATA,
            f"each rank to iterate its own {-(-size // plan.world_size)} of {size} items",
            f"every rank iterated all {size} items (sampler: {got[0]['sampler']})",
            "make_loader: a plain DataLoader hands every item to every rank; it needs "
            "something that gives each rank its own share",
            answer="DataLoader(..., sampler=DistributedSampler(dataset))",
        )
    for epoch in range(epochs):
        real = data.sampler_partition(size, plan.world_size, epoch=epoch)
        mine = [o[epoch] for o in orders]
        if mine == real:
            continue
        if epoch > 0 and mine == data.sampler_partition(size, plan.world_size, epoch=0):
            return failed(
                name,
                DATA,
                f"epoch {epoch} in a new order: {real}",
                f"the same order as epoch 0: {mine}",
                "epoch_orders, at the top of each epoch: the sampler shuffles from seed + "
                "epoch, and nothing told it that the epoch changed",
                answer="train_loader.sampler.set_epoch(epoch) before each epoch",
            )
        return failed(
            name,
            DATA,
            f"epoch {epoch}: {real}",
            f"epoch {epoch}: {mine}",
            "make_loader: a DistributedSampler with default shuffle and seed",
        )
    return passed(
        name,
        f"{epochs} epochs, each split without overlap and reshuffled, "
        "exactly as DistributedSampler does it.",
    )


def check_sampler_prediction(
    predicted: object,
    *,
    size: int,
    world_size: int,
    rank: int,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    drop_last: bool = False,
    reveal: bool = False,
) -> Result:
    """Compare a predicted index list for one rank with the real ``DistributedSampler``.

    A wrong prediction is first told what kind of mistake it is (how many
    indices, which positions, the padding, the order); the right list is
    shown after a few wrong tries, or at once with ``reveal=True``.
    """
    name = "check_sampler_prediction"
    if base.is_stub(predicted):
        return not_attempted(name, "the prediction line")
    settings = dict(epoch=epoch, shuffle=shuffle, seed=seed, drop_last=drop_last)
    partition = data.sampler_partition(size, world_size, **settings)
    real = partition[rank]
    try:
        mine = [int(i) for i in predicted]
    except (TypeError, ValueError):
        return failed(
            name,
            DATA,
            f"a list of {len(real)} indices",
            repr(predicted),
            "the prediction is a list of whole numbers, e.g. [0, 3, 6]",
        )
    key = f"{name}:{size}:{world_size}:{rank}:{sorted(settings.items())}"
    if mine == real:
        answers.forget(key)
        return passed(name, f"rank {rank} gets {real}, as DistributedSampler says.")
    tries = answers.tried(key)
    what = _what_is_wrong(mine, partition, size, world_size, rank, settings)
    if reveal or tries >= answers.REVEAL_AFTER:
        marks = data.padding_of(partition, size)
        why = [f"padding repeats {marks['repeated']}"] if marks["repeated"] else []
        why += [f"drop_last skips {marks['dropped']}"] if marks["dropped"] else []
        return failed(
            name,
            DATA,
            f"{real}" + (f" ({'; '.join(why)})" if why else ""),
            f"{mine}: {what}",
            "data.sampler_partition(...) shows every rank's list",
        )
    return failed(
        name, DATA, f"rank {rank}'s list, in the order the rank meets it", f"{mine}", what
    )


def _what_is_wrong(
    mine: list[int],
    partition: list[list[int]],
    size: int,
    world_size: int,
    rank: int,
    settings: dict,
) -> str:
    """One sentence on what kind of mistake a wrong prediction is, without the answer."""
    real = partition[rank]
    count = len(real)
    trimmed = settings["drop_last"]
    if len(mine) != count:
        if trimmed:
            return (
                f"the length: with drop_last=True every rank gets {size} // {world_size} "
                "indices, and the leftover items are skipped"
            )
        rounded = "rounded up" if size % world_size else "exactly"
        return (
            f"the length: every rank gets the same number of indices, {size} / "
            f"{world_size} {rounded}, so that all ranks take the same number of steps"
            + ("; the sampler makes up the difference by padding" if size % world_size else "")
        )
    if mine in partition:
        return (
            f"that is rank {partition.index(mine)}'s list: rank {rank} starts at "
            f"position {rank} of the order"
        )
    if sorted(mine) == sorted(real):
        return "the right indices in the wrong order: a rank meets them in the sampler's order"
    # the whole padded order, as the ranks share it: position p goes to rank p % world_size
    order = [i for indices in zip(*partition, strict=True) for i in indices]
    block = order[rank * count : (rank + 1) * count]
    if mine == block:
        return (
            "ranks do not take consecutive blocks: a rank takes one position in every "
            f"{world_size} of the order, starting at its own rank"
        )
    if settings["shuffle"]:
        unshuffled = data.sampler_partition(size, world_size, **{**settings, "shuffle": False})
        if mine == unshuffled[rank]:
            return (
                "the order: shuffle=True, so the order is a permutation drawn from "
                "seed + epoch, not 0, 1, 2, ..."
            )
        if settings["epoch"]:
            first = data.sampler_partition(size, world_size, **{**settings, "epoch": 0})
            if mine == first[rank]:
                return (
                    f"that is epoch 0's list: set_epoch({settings['epoch']}) draws a "
                    "new permutation"
                )
    if mine[: count - 1] == real[: count - 1]:
        return "the last index: the padding repeats indices from the start of the order, in order"
    return (
        "work it through: the order (0, 1, 2, ... unless shuffled), made long enough "
        f"for {world_size} equal shares, then rank {rank}'s positions"
    )


# -- stage 4: synchronising the model ------------------------------------------------
@graded
def check_wrap(path: str | Path, *, reveal: bool = False) -> Result:
    """Launch the learner's ``wrap(model, rank, device)`` and compare weights and gradients.

    ``reveal=True`` shows the line that fixes a failure now, even on a first try.
    """
    plan = devices.plan()
    name = "check_wrap"
    got = launch_checked(
        name, path, probes.model_wrap, "wrap()", stage=MODEL, expected="wrap() to run",
        fix="wrap: the line the error names", explain=_cpu_device_ids,
    )  # fmt: skip
    for report in got:
        want = str(plan.device(report["rank"]))
        if report["device"] != want:
            return failed(
                name,
                MODEL,
                f"rank {report['rank']}'s model on {want}",
                f"on {report['device']}",
                "wrap: the model must be on the rank's device before DDP wraps it",
                answer="model = model.to(device), before DDP(...)",
            )
    if any(r["wrapper"] != "DistributedDataParallel" for r in got):
        gap = reports.max_abs_difference([r["grads"] for r in got])
        return failed(
            name,
            MODEL,
            "a DistributedDataParallel model with equal gradients on every rank",
            f"a plain {got[0]['wrapper']}; gradients differ by up to {gap:.3g}",
            "wrap's return: what it returns is what trains, and only DDP's wrapper averages "
            "the gradients",
            answer="return DDP(model) (device_ids=[rank] on a GPU), after moving it to the device",
        )
    for key, what in (("params", "weights"), ("grads", "gradients")):
        gap = reports.max_abs_difference([r[key] for r in got])
        if gap > 1e-6:
            return failed(
                name,
                MODEL,
                f"identical {what} on every rank",
                f"{what} differ by up to {gap:.3g}",
                "wrap: DDP(model, ...)",
            )
    return passed(
        name,
        f"{plan.world_size} ranks with different starting weights ended "
        "with identical weights and identical gradients.",
    )


def _cpu_device_ids(error: BaseException) -> Result | None:
    """check_wrap's failure for DDP(model, device_ids=...) around a model on the CPU."""
    if not ("device_ids" in str(error) and "CPU modules" in str(error)):
        return None
    return failed(
        "check_wrap", MODEL, "DDP(model) for a model on the CPU",
        "DDP refused device_ids for a CPU module",
        "wrap: device_ids names the GPU a model is on; a model on the CPU has none",
        answer="DDP(model, device_ids=[rank]) only when device.type == 'cuda', else DDP(model)",
    )  # fmt: skip
