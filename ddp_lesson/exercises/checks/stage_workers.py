"""Checks for the exercises of the lesson's stages (notebooks 02 to 06; 04's: :mod:`.sampler`).

A failure of a file's check says what happened and where to look; the line
that fixes it comes after a few tries at the same mistake, or with
``reveal=True``.
"""

from __future__ import annotations

import re
from pathlib import Path

from ... import devices, reports
from ...stages import stage
from ..probes import stage_workers as probes
from . import base, stand_ins
from .base import Result, failed, graded, launch_checked, passed

SPAWNING = stage("spawning").title
GROUP = stage("process_group").title
DATA = stage("data_division").title
MODEL = stage("model_wrapping").title
TEARDOWN = stage("teardown").title

#: Largest difference of weights or gradients between ranks that still counts as equal.
SAME = 1e-6

#: Largest difference from the reference's gradients (summed in another order) that still
#: counts as the same.
NEAR = 1e-5


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


# -- stage 2: connecting processes ------------------------------------------------
@graded
def check_process_group(path: str | Path, *, reveal: bool = False) -> Result:
    """Launch the learner's ``ddp_setup`` and ``cleanup`` (from the file at ``path``) for real.

    Without GPUs, a rerun on stand-ins (:func:`.stand_ins.gpu_not_selected`).
    """
    name = "check_process_group"
    plan = devices.plan()
    got = launch_checked(
        name, path, probes.process_group, "ddp_setup() and cleanup()",
        stage=GROUP, expected="ddp_setup() to create the group",
        fix="ddp_setup: the line the error names",
        explain=lambda error: _not_met(name, path, plan, error),
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
        wrong = _in_the_group(name, plan, report)
        if wrong is None:
            wrong = _group_summed_and_released(name, plan, report, expected_total)
        if wrong is not None:
            return wrong
    wrong = stand_ins.gpu_not_selected(name, base.worker_path(path), plan)
    if wrong is not None:
        return wrong
    return passed(
        name,
        f"{plan.world_size} ranks joined one {plan.backend} group, summed to {expected_total:g}, "
        "and released it.",
    )


#: torch's store, in rank 0's init_process_group, when fewer ranks than the group's size joined.
NOT_JOINED = re.compile(r"(\d+)/(\d+) clients joined")

#: torch's words when a rank found no store at the address and port it was given.
UNREACHED = re.compile(r"trying to connect to \((\S+), (\d+)\)")

#: A line of ddp_setup that gives init_process_group the place where the ranks meet.
MEETING = re.compile(r"MASTER_PORT|MASTER_ADDR|init_method")


def _not_met(
    name: str, path: str | Path, plan: devices.Plan, error: BaseException
) -> Result | None:
    """The failure for a group of world_size whose ranks did not all join rank 0, or None:
    what the error shows (rank 0 waited, a rank found no one, or was stopped while it
    connected) and where the meeting place is set."""
    text, rank = str(error), getattr(error, "rank", "?")
    joined, unreached = NOT_JOINED.search(text), UNREACHED.search(text)
    if joined is not None and int(joined[2]) == plan.world_size:
        seen = (
            f"rank 0 waited in init_process_group, and {joined[1]} of the {joined[2]} ranks "
            "joined it there"
        )
    elif unreached is not None:
        seen = (
            f"rank {rank} looked for the group at {unreached[1]}:{unreached[2]} and found "
            "no one there"
        )
    elif "Interrupted system call" in text and "init_process_group" in text:
        seen = f"rank {rank} was still trying to reach the group when it was stopped"
    else:
        return None
    first, *rest = str(error).splitlines()
    at = [line.strip() for line in rest if line.strip().startswith("at ")][:1]
    return failed(
        name,
        stage=GROUP,
        expected=f"all {plan.world_size} ranks to meet in init_process_group",
        happened="\n".join([first, *at, seen]),
        fix=f"{_meeting_line(path)}: the ranks may be meeting at different addresses or ports: "
        "MASTER_ADDR and MASTER_PORT (or init_method) must be the same on every rank. "
        "What does each rank set them to?",
    )


def _meeting_line(path: str | Path) -> str:
    """``file, line N (`text`)`` for the line that sets the ranks' meeting place, if any."""
    worker = base.worker_path(path)
    lines = Path(worker).read_text(errors="replace").splitlines() if worker else []
    found = [
        (number, text.strip())
        for number, text in enumerate(lines, 1)
        if MEETING.search(text) and not text.strip().startswith("#")
    ]
    # a line that also names the rank is where a rank can get a place of its own
    found.sort(key=lambda line: "rank" not in line[1])
    if not found:
        return "ddp_setup"
    number, text = found[0]
    return f"{Path(worker).name}, line {number} (`{text}`)"


def _in_the_group(name: str, plan: devices.Plan, report: probes.GroupReport) -> Result | None:
    """A failure if a rank's ``ddp_setup`` left it out of its place in the group or its port."""
    rank = report["rank"]
    if not report["initialized"]:
        return failed(
            name,
            stage=GROUP,
            expected="a process group after ddp_setup()",
            happened=f"rank {rank} had no group",
            fix="ddp_setup: call init_process_group",
        )
    if (report["rank_in_group"], report["size_of_group"]) != (rank, plan.world_size):
        return failed(
            name,
            stage=GROUP,
            expected=f"rank {rank} of {plan.world_size} in the group",
            happened=f"rank {report['rank_in_group']} of {report['size_of_group']}",
            fix="ddp_setup: which rank and world size is init_process_group given?",
            answer="init_process_group(backend, rank=rank, world_size=world_size)",
        )
    if report["met_at"] is not None and report["met_at"] != report["given_port"]:
        return failed(
            name,
            stage=GROUP,
            expected="the group to meet at the port ddp_setup is given",
            happened=f"rank {rank}'s group met at port {report['met_at']}, not at the port "
            "ddp_setup was given",
            fix="ddp_setup: where does the port the group meets at come from? A port written "
            "into the file is busy as soon as two runs share the machine",
            answer='os.environ["MASTER_PORT"] = str(port)',
        )
    return None


def _group_summed_and_released(
    name: str, plan, report: probes.GroupReport, expected_total: int
) -> Result | None:
    """A failure if a rank's group has another backend, sums wrong, or outlives cleanup()."""
    if report["backend"] != plan.backend:
        return failed(
            name,
            stage=GROUP,
            expected=f"backend {plan.backend!r}",
            happened=f"backend {report['backend']!r}",
            fix='ddp_setup: "nccl" with GPUs, "gloo" without',
        )
    if report["total"] != expected_total:
        return failed(
            name,
            stage=GROUP,
            expected=f"all_reduce sum {expected_total}",
            happened=f"{report['total']}",
            fix="ddp_setup: every rank must join one group",
        )
    if report["after_cleanup"]:
        return failed(
            name,
            stage=TEARDOWN,
            expected="no group after cleanup()",
            happened=f"rank {report['rank']}'s group was still initialized",
            fix="cleanup: the group each rank joined must be released before it ends",
            answer="destroy_process_group()",
        )
    return None


# -- stage 4: synchronising the model ------------------------------------------------
@graded
def check_wrap(path: str | Path, *, reveal: bool = False) -> Result:
    """Launch the learner's ``wrap(model, rank, device)`` and compare weights and gradients.

    Every rank starts from weights of its own and takes one backward on a
    batch of its own. The weights and gradients must then be equal on every
    rank (within :data:`SAME`), and the gradients equal to the reference's:
    rank 0's starting weights, each rank's gradient on its own batch,
    averaged over the ranks (within :data:`NEAR`); any wrapper that does so
    passes. Without GPUs, a rerun on stand-ins (:func:`.stand_ins.left_behind`).
    """
    plan = devices.plan()
    name = "check_wrap"
    got = launch_checked(
        name, path, probes.model_wrap, "wrap()", stage=MODEL, expected="wrap() to run",
        fix="wrap: the line the error names", explain=_cpu_device_ids,
    )  # fmt: skip
    wrong = _on_their_devices(name, plan, got)
    if wrong is None:
        wrong = _averaged_by_ddp(name, got)
    if wrong is None:
        wrong = _same_on_every_rank(name, got)
    if wrong is None:
        wrong = _near_reference(name, got)
    if wrong is None:
        wrong = stand_ins.left_behind(name, base.worker_path(path), plan)
    if wrong is not None:
        return wrong
    return passed(
        name,
        f"{plan.world_size} ranks with different starting weights ended "
        "with identical weights and identical gradients.",
    )


def _on_their_devices(name: str, plan: devices.Plan, got: list[probes.WrapReport]) -> Result | None:
    """A failure if some rank's wrapped model is not on that rank's device."""
    for report in got:
        want = str(plan.device(report["rank"]))
        if report["device"] != want:
            return failed(
                name,
                stage=MODEL,
                expected=f"rank {report['rank']}'s model on {want}",
                happened=f"on {report['device']}",
                fix="wrap: the model must be on the rank's device before DDP wraps it",
                answer="model = model.to(device), before DDP(...)",
            )
    return None


def _averaged_by_ddp(name: str, got: list[probes.WrapReport]) -> Result | None:
    """A failure if ``wrap`` returned no DDP model and the ranks' gradients differ."""
    gap = reports.max_abs_difference([r["grads"] for r in got])
    plain = [r for r in got if not r["is_ddp"]]
    if plain and gap > SAME:
        return failed(
            name,
            stage=MODEL,
            expected="a model whose gradients DDP averages over the ranks",
            happened=f"wrap returned a {plain[0]['wrapper']} on rank {plain[0]['rank']}, not a "
            f"DistributedDataParallel; after one backward the ranks' gradients differ by up "
            f"to {gap:.3g}",
            fix="wrap's return: what it returns is what trains, and only DDP's wrapper averages "
            "the gradients",
            answer="return DDP(model) (device_ids=[rank] on a GPU), after moving it to the device",
        )
    return None


def _same_on_every_rank(name: str, got: list[probes.WrapReport]) -> Result | None:
    """A failure if the weights or the gradients differ between ranks by more than SAME."""
    for key, what in (("params", "weights"), ("grads", "gradients")):
        gap = reports.max_abs_difference([r[key] for r in got])
        if gap > SAME and key == "params" and all(r["is_ddp"] for r in got):
            return failed(
                name,
                stage=MODEL,
                expected="identical weights on every rank once wrap returns",
                happened=f"wrap returned a DistributedDataParallel on every rank, yet their "
                f"weights differ by up to {gap:.3g} after one backward and no optimiser step: "
                "DDP copies rank 0's weights to the other ranks when it wraps a model, so that "
                "copy was turned off, or the weights changed after it",
                fix="wrap: does DDP(...) make its copy of rank 0's weights, and does anything "
                "change them afterwards?",
            )
        if gap > SAME:
            return failed(
                name,
                stage=MODEL,
                expected=f"identical {what} on every rank",
                happened=f"{what} differ between ranks by up to {gap:.3g}",
                fix="wrap: what does it return, and is that what DDP wrapped?",
            )
    return None


def _near_reference(name: str, got: list[probes.WrapReport]) -> Result | None:
    """A failure if some rank's gradients differ from the reference's by more than NEAR."""
    for report in got:
        off = float((report["grads"] - report["reference"]).abs().max())
        if off > NEAR:
            return failed(
                name,
                stage=MODEL,
                expected="the gradients of rank 0's starting weights, averaged over the ranks' "
                "batches",
                happened=f"rank {report['rank']}'s gradients are equal on every rank but "
                f"differ from "
                f"that average by up to {off:.3g}",
                fix="wrap: is the model DDP wraps the one that was given, and are the gradients "
                "changed after the all-reduce?",
            )
    return None


def _cpu_device_ids(error: BaseException) -> Result | None:
    """check_wrap's failure for DDP(model, device_ids=...) around a model on the CPU."""
    if not ("device_ids" in str(error) and "CPU modules" in str(error)):
        return None
    return failed(
        "check_wrap",
        stage=MODEL,
        expected="a model on the CPU wrapped without naming a GPU",
        happened="DDP refused device_ids for a CPU module",
        fix="wrap: device_ids names the GPU a model is on; a model on the CPU has none",
        answer="DDP(model, device_ids=[rank]) only when device.type == 'cuda', else DDP(model)",
    )
