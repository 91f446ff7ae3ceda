"""Check for ``06_full_script``'s conversion exercise: a whole DDP script, run as a script.

The learner turns the single-device script of ``01_why_ddp`` into a DDP
script with its own ``__main__`` block. :func:`check_ddp_script` runs it
for real, in four steps, each naming the stage and the line at fault:

1. the script as ``python file.py`` runs it, up to its ``mp.spawn`` call:
   how many processes it would start on this machine, with which arguments
   (:func:`ddp_lesson.exercises.probes.script.dry_start`);
2. its ``ddp_setup`` in every rank of a warm launch: the group and the
   device each rank gets on this machine (:func:`.probes.script.setup`);
3. the whole script under the doctor (:func:`ddp_lesson.doctor.diagnose`):
   the data each rank iterated, the model's parameters after a few steps
   on every rank, and the teardown;
4. its ``main`` in warm ranks, twice (:mod:`..probes.training`): the
   gradients of its first optimiser steps against the reference's (the
   single-device loss on each rank's batch, averaged over the ranks, within
   :data:`GRADIENT_TOLERANCE`), which ranks print, and whether the group is
   released when training raises.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ... import devices, launch
from ...reports import counted
from ...stages import stage
from ..probes import launchers as gpu_probes
from ..probes import script as probes
from ..probes import training
from . import base
from .base import (
    Result,
    failed,
    graded,
    launch_checked,
    missing_file,
    not_attempted,
    passed,
    quote,
)
from .launchers import selection_wrong
from .script_source import calls_of, first_call_at, line_at, main_spawn_line, parsed
from .script_start import started
from .script_training import LOG as LOG  # the stage a log line belongs to, named here too
from .script_training import OPTIMIZERS, trains

if TYPE_CHECKING:
    from ...doctor import Diagnosis

NAME = "check_ddp_script"
SPAWNING, GROUP, DATA, MODEL, TEARDOWN = (
    stage(key).title
    for key in ("spawning", "process_group", "data_division", "model_wrapping", "teardown")
)

#: What a stub left by the exercise generator raises.
STUB = 'raise NotImplementedError("your code here")'

#: Seconds the doctor's run of the whole script may take (it starts fresh interpreters).
DOCTOR_TIMEOUT_S = 120

#: What each stage must show, as a failure says it.
EXPECTED = {
    "spawning": "one process per device, started by the script's own mp.spawn, each running main",
    "process_group": "every process in one group, as its own rank",
    "data_division": "each rank its own shard of the training data, reshuffled every epoch",
    "model_wrapping": "one DDP-wrapped model, with the same parameters on every rank after "
    "every step",
    "teardown": "every rank releases the group (destroy_process_group) before main returns",
}


@graded
def check_ddp_script(path: str | Path, *, reveal: bool = False) -> Result:
    """Run the learner's whole DDP script for real and check every stage.

    Args:
        path: the script, e.g. ``"workers/my_ddp_script.py"``. It defines
            ``ddp_setup(rank, world_size, port)`` (returning the device),
            ``main(rank, world_size, port, epochs)``, and a ``__main__`` block
            that starts the processes with ``mp.spawn``.
        reveal: show the line that fixes a failure now, even on a first try.
    """
    file = base.worker_path(path)
    if file is None:
        return missing_file(NAME, path)
    source = Path(file).read_text()
    if STUB in source:
        return not_attempted(NAME, "every part marked YOUR CODE HERE")
    lines = source.splitlines()
    tree = parsed(NAME, source, lines)
    if isinstance(tree, Result):
        return tree
    plan = devices.plan()
    spawn_line = main_spawn_line(NAME, tree, lines)
    if isinstance(spawn_line, Result):
        return spawn_line
    inits = calls_of(tree, "init_process_group")
    init_line = inits[0].lineno if inits else None

    found = started(file, plan, lines, spawn_line)
    if isinstance(found, Result):
        return found
    epochs = found

    got = _setup_reports(file, plan, lines, init_line)
    for wrong in (_joined(got, plan, lines, init_line), _gpu_selected_late(file, plan)):
        if wrong is not None:
            return wrong

    diagnosis = _diagnosis(file, path, plan)
    if isinstance(diagnosis, Result):
        return diagnosis
    wrong = _stage_verdicts(diagnosis, tree, lines)
    if wrong is not None:
        return wrong
    for judge in (trains, _released_after_error):
        wrong = judge(file, tree, lines, epochs if isinstance(epochs, int) else 2)
        if wrong is not None:
            return wrong
    return _passed(file, plan, epochs)


def _setup_reports(
    file: str, plan: devices.Plan, lines: list[str], init_line: int | None
) -> list[probes.SetupReport]:
    """Run the script's ``ddp_setup`` in every rank of a warm launch and return their reports."""
    expected = (
        f"ddp_setup(rank, world_size, port) to join all {plan.world_size} ranks in one "
        f"{plan.backend} group"
    )
    fix = line_at(lines, init_line) or "ddp_setup"
    return launch_checked(
        NAME,
        file,
        probes.setup,
        "ddp_setup()",
        stage=GROUP,
        expected=expected,
        fix=fix,
        hang=(expected, f"the ranks did not meet within {base.CHECK_TIMEOUT_S} s", fix),
        explain=_no_setup,
    )


def _gpu_selected_late(file: str, plan: devices.Plan) -> Result | None:
    """The failure if ``ddp_setup``, given a GPU per rank (stand-ins), selects it after the group.

    Only a script that returns its rank's GPU there is judged: what stand-ins
    cannot run, or a script that keeps to the CPU, says nothing of the order.
    """
    try:
        got = base.run_probe(gpu_probes.script_on_gpus, plan.world_size, file)
    except (launch.LaunchError, ValueError, TypeError):
        return None
    for report in got:
        device = f"cuda:{report['rank']}"
        if report["device"] == device:
            wrong = selection_wrong(NAME, report, device, "(given a GPU of its own)")
            if wrong is not None:
                return wrong
    return None


def _no_setup(error: BaseException) -> Result | None:
    """The failure for a script without the ``ddp_setup`` function the exercise asks for."""
    if not re.search(r"AttributeError: module '[\w.]+' has no attribute 'ddp_setup'", str(error)):
        return None
    return failed(
        NAME,
        stage=GROUP,
        expected="a function ddp_setup(rank, world_size, port) at the top level of the script, "
        "which joins the group and returns the rank's device",
        happened="the script has no function called ddp_setup: " + quote(error).splitlines()[0],
        fix="the script: the exercise asks for ddp_setup(rank, world_size, port) as a function "
        "of its own, which main calls; the check calls it too. Is the group joined somewhere "
        "else (a method, or main itself)?",
    )


def _diagnosis(file: str, path: str | Path, plan: devices.Plan) -> Diagnosis | Result:
    """Run the whole script under the doctor, or return the failure of the doctor's own run."""
    from ... import doctor

    try:
        return doctor.diagnose(file, plan.world_size, timeout_s=DOCTOR_TIMEOUT_S)
    except Exception as error:  # the doctor's own failure: say so, never raise
        return failed(
            NAME,
            stage=SPAWNING,
            expected="the doctor to run the whole script",
            happened=quote(error),
            fix="run the check again; if it fails the same way, run the doctor itself: "
            f"print(doctor.diagnose({str(path)!r}))",
        )


def _stage_verdicts(diagnosis: Diagnosis, tree: ast.Module, lines: list[str]) -> Result | None:
    """A failure for the first stage the doctor's run did not show right, if any."""
    from ... import doctor

    if diagnosis.problem:
        return failed(
            NAME,
            stage=SPAWNING,
            expected="the script to run",
            happened=diagnosis.problem,
            fix="the line the message names",
        )
    for key, verdict in diagnosis.stages.items():
        if verdict.status == doctor.OK:
            unshuffled = _unshuffled(verdict.evidence) if key == "data_division" else None
            if unshuffled is not None:
                return unshuffled
            continue
        title = stage(key).title
        if verdict.status == doctor.FAULT:
            same = _same_epoch(tree, lines, verdict.evidence) if key == "data_division" else None
            if same is not None:
                return same
            # what the run showed is said; what the code suggests (a line to type) is
            # held back until asked for, as every check's fixing line is
            ran = [p.removeprefix("run: ") for p in verdict.parts if p.startswith("run: ")]
            code = [p.removeprefix("code: ") for p in verdict.parts if p.startswith("code: ")]
            return failed(
                NAME,
                stage=title,
                expected=EXPECTED[key],
                happened="; ".join(ran) if ran else verdict.evidence,
                fix=_built_elsewhere(verdict.evidence, tree, lines)
                or line_at(lines, verdict.line)
                or stage(key).owner,
                answer="; ".join(code) if ran else "",
            )
        return failed(
            NAME,
            stage=title,
            expected=EXPECTED[key],
            happened=f"the run did not show it: {verdict.evidence}",
            fix=f"make sure main does {stage(key).owner}",
        )
    return None


def _unshuffled(evidence: str) -> Result | None:
    """A failure when the doctor saw every epoch iterate one order (a sampler that never
    shuffles): the exercise asks for each epoch reshuffled."""
    if "the same order in each of" not in evidence:
        return None
    return failed(
        NAME,
        stage=stage("data_division").title,
        expected=EXPECTED["data_division"],
        happened=f"the run showed: {evidence}",
        fix="where the DistributedSampler is built: does it shuffle?",
        answer="DistributedSampler(train_dataset), whose shuffle=True is the default",
    )


def _built_elsewhere(evidence: str, tree: ast.Module, lines: list[str]) -> str | None:
    """Where to look when the doctor saw the optimiser step another model's parameters, or None.

    The doctor names the ``optimizer.step()`` that changed nothing DDP
    wraps; the fault is where the optimiser was built, from which model.
    """
    if "updates none of the parameters DDP wraps" not in evidence:
        return None
    built = first_call_at(tree, lines, *OPTIMIZERS)
    return built and f"{built}: which model's parameters is it given?"


def _passed(file: str, plan: devices.Plan, epochs: object) -> Result:
    """The pass for a script whose every stage, training and teardown ran right."""
    return passed(
        NAME,
        f"python {Path(file).name} started {counted(plan.world_size, 'process', 'processes')} "
        "that joined one "
        f"{plan.backend} group; over {epochs} epochs each rank iterated its own shard, "
        "reshuffled each epoch, the DDP model's parameters were identical on every rank "
        "after every step, and every rank released the group. Its first steps used the "
        "reference's gradients (each rank's loss, averaged over the ranks), only rank 0 "
        "printed, and the group was released after an error raised during training too.",
    )


def _same_epoch(tree: ast.Module, lines: list[str], evidence: str) -> Result | None:
    """The failure for a sampler that repeated its order although the script calls set_epoch.

    The doctor sees the order repeat. When the script's set_epoch call is
    given a constant, the check says so itself, at the call, whatever the
    doctor's words: it is called, with the same epoch every time. When the
    doctor says set_epoch was never called and the script does call it (with
    a value the loop never changes, or on another sampler than the loader's),
    the call is still the line to look at. Otherwise the doctor's verdict
    stands (``None``).
    """
    calls = calls_of(tree, "set_epoch")
    if "the same order" not in evidence or not calls:
        return None
    call = calls[0]
    given = call.args[0] if call.args else next((k.value for k in call.keywords), None)
    constant = isinstance(given, ast.Constant)
    if not constant and "set_epoch was never called" not in evidence:
        return None  # the doctor has found what the call does wrong
    repeats = re.search(r"the next (\d+) epoch", evidence)
    epochs = f"in each of the {int(repeats[1]) + 1} epochs" if repeats else "in every epoch"
    where = line_at(lines, call.lineno)
    if constant:
        happened = (
            f"rank 0 iterated the same order {epochs}: set_epoch is called ({where}), "
            f"but with the same epoch every time, {given.value!r}, so the sampler shuffles "
            "with the same seed + epoch each epoch"
        )
        hint = f"{where}: the number set_epoch is given must change from epoch to epoch"
    else:
        stayed = re.search(r"sampler epoch stayed (-?\d+)", evidence)
        happened = (
            f"rank 0 iterated the same order {epochs}, and the sampler the DataLoader "
            f"iterates stayed at epoch {stayed[1] if stayed else 0}: set_epoch is called "
            f"({where}), but it gave that sampler the same epoch every time (or it reached "
            "another sampler)"
        )
        hint = (
            f"{where}: which number does it pass, epoch after epoch, and to which sampler? "
            "It must be the loader's own sampler, told the epoch the loop is in"
        )
    return failed(
        NAME,
        stage=DATA,
        expected=EXPECTED["data_division"],
        happened=happened,
        fix=hint,
        answer="set_epoch(epoch) on the sampler the DataLoader was given (sampler=...), at "
        "the top of the loop over epochs, with that loop's variable",
    )


def _joined(
    got: list[probes.SetupReport], plan: devices.Plan, lines: list[str], init_line: int | None
) -> Result | None:
    """A Result if some rank's ``ddp_setup`` left it outside the group it should be in."""
    where = line_at(lines, init_line) or "ddp_setup"
    for report in got:
        rank = report["rank"]
        if not report["initialized"]:
            return failed(
                NAME,
                stage=GROUP,
                expected="a process group after ddp_setup()",
                happened=f"rank {rank} had none",
                fix="ddp_setup: call init_process_group",
            )
        if (report["rank_in_group"], report["size_of_group"]) != (rank, plan.world_size):
            return failed(
                NAME,
                stage=GROUP,
                expected=f"rank {rank} of {plan.world_size} in the group",
                happened=f"rank {report['rank_in_group']} of {report['size_of_group']}",
                fix=f"{where}: rank=rank, world_size=world_size",
            )
        if report["backend"] != plan.backend:
            return failed(
                NAME,
                stage=GROUP,
                expected=f"backend {plan.backend!r} ({plan.reason})",
                happened=f"backend {report['backend']!r}",
                fix=f'{where}: "nccl" when every rank has a GPU, "gloo" otherwise',
            )
        want = str(plan.device(rank))
        if report["device"] != want:
            return failed(
                NAME,
                stage=GROUP,
                expected=f"ddp_setup to return rank {rank}'s device, {want}",
                happened=f"it returned {report['device']}",
                fix="ddp_setup: a rank trains on a GPU of its own when every rank has one, else "
                "on the CPU; ddp_setup chooses that device, selects it, and returns it",
                answer="device = device_for(rank, world_size); torch.cuda.set_device(device) "
                "when it is a GPU; return device",
            )
    return None


def _released_after_error(
    file: str, tree: ast.Module, lines: list[str], epochs: int
) -> Result | None:
    """A failure if an error during training leaves the group unreleased."""
    got = launch_checked(
        NAME, file, training.after_error, "main()", epochs, stage=TEARDOWN,
        expected="main to end when its training raises",
        fix="main: the line the error names",
    )  # fmt: skip
    kept = [r["rank"] for r in got if not r["released"]]
    swallowed = [r["rank"] for r in got if not r["raised"]]
    if swallowed and not kept:
        return failed(
            NAME,
            stage=TEARDOWN,
            expected="main to release the group and let the error go on to mp.spawn",
            happened=f"the check raised an error after rank {swallowed[0]}'s first "
            "optimizer.step(); the group was released, but main returned normally: the error "
            "was caught and not raised again, so mp.spawn would report a failed run as a "
            "success",
            fix="main: an except that catches the error must raise it again (or use "
            "try: ... finally: alone)",
        )
    if kept:
        where = first_call_at(tree, lines, "destroy_process_group")
        return failed(
            NAME,
            stage=TEARDOWN,
            expected="the group released at the end, even after an error",
            happened=f"the check raised an error after rank {kept[0]}'s first "
            "optimizer.step(); main "
            + ("ended with the error" if kept[0] not in swallowed else "returned")
            + f", and rank {kept[0]}'s group had not been released",
            fix=(where or "main") + ": does it run when training raises? (try: ... finally:)",
            answer="the training inside try:, destroy_process_group() in its finally:",
        )
    return None
