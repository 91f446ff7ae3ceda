"""What check_ddp_script judges of a script's training: its first steps and its log.

The learner's ``main`` runs in warm ranks (:mod:`..probes.training`); at
each of its first optimiser steps the gradients it steps with are compared
with the reference's, and then only rank 0 may have printed.
"""

from __future__ import annotations

import ast

import torch

from ...stages import stage
from ..probes import training
from .base import Result, failed, launch_checked
from .script_source import first_call_at, line_at

NAME = "check_ddp_script"
MODEL = stage("model_wrapping").title
DATA = stage("data_division").title

#: Largest difference between the gradients an answer steps with and the reference's,
#: as a share of the reference's largest gradient: the same sums, added in another order.
GRADIENT_TOLERANCE = 1e-4

#: What owns a log line printed on every rank: none of a DDP script's stages (each runs
#: right), but the lines that print.
LOG = "the training log"

#: The optimisers a script is likely to build, by the name of their class.
OPTIMIZERS = ("SGD", "Adam", "AdamW", "RMSprop", "Adagrad")


def trains(file: str, tree: ast.Module, lines: list[str], epochs: int) -> Result | None:
    """A failure if the script's training differs from the reference's, or ranks > 0 log.

    The learner's ``main`` runs in warm ranks; at each of its first optimiser
    steps, the gradients of the model DDP wraps are compared with the
    reference's: the single-device script's loss on each rank's own batch,
    at the same weights, averaged over the ranks (see
    :mod:`..probes.training`). Then, with more than one rank, only rank 0
    may have printed or logged.
    """
    got = launch_checked(
        NAME, file, training.training, "main()", epochs, stage=MODEL,
        expected="main(rank, world_size, port, epochs) to train in every rank",
        fix="main: the line the error names",
    )  # fmt: skip
    short = [r for r in got if r["passes"] < epochs]
    if short:
        return failed(
            NAME,
            stage=DATA,
            expected=f"main(rank, world_size, port, epochs={epochs}) to train {epochs} epochs",
            happened=f"rank {short[0]['rank']} went through its DistributedSampler "
            f"{short[0]['passes']} time(s)",
            fix=(_epochs_loop(tree, lines) or "main's loop over the epochs")
            + " (how many epochs does it run, for the epochs main is given?)",
        )
    for report in got:
        rank = report["rank"]
        for number, step in enumerate(report["steps"], 1):
            where = f"at rank {rank}'s optimizer.step() number {number}"
            wrong = _optimizer_holds_wrapped(step, where, tree, lines)
            if wrong is None:
                wrong = _reference_gradients(got, step, number, where)
            if wrong is not None:
                return wrong
    return _rank_0_alone_logs(got, lines)


def _epochs_loop(tree: ast.Module, lines: list[str]) -> str:
    """``line N: text`` of the first ``for ... in range(...)`` whose bounds name an epoch."""
    for node in ast.walk(tree):
        bounds = node.iter if isinstance(node, ast.For) else None
        if isinstance(bounds, ast.Call) and ast.unparse(bounds.func) == "range":
            if "epoch" in " ".join(ast.unparse(a) for a in bounds.args):
                return line_at(lines, node.lineno)
    return ""


def _optimizer_holds_wrapped(
    step: training.StepRecord, where: str, tree: ast.Module, lines: list[str]
) -> Result | None:
    """A failure if the optimizer held fewer parameter tensors than the model DDP wrapped."""
    if step["held"] < step["wrapped"]:
        return failed(
            NAME,
            stage=MODEL,
            expected="the optimizer to update the model DDP wraps",
            happened=f"{where}, the optimizer held {step['held']} of the {step['wrapped']} "
            "parameter tensors of the model that DDP wrapped and that the loss came "
            "from: those it does not hold never change",
            fix=(first_call_at(tree, lines, *OPTIMIZERS) or "where the optimizer is built")
            + ": which model's parameters is it given, and is that the model that "
            "is wrapped and trained?",
        )
    return None


def _reference_gradients(
    got: list[training.TrainingReport], step: training.StepRecord, number: int, where: str
) -> Result | None:
    """A failure if a step's gradients differ from the ranks' reference gradients, averaged."""
    if step["reference"] is None or step["grads"] is None:
        return None
    references = [r["steps"][number - 1]["reference"] for r in got if len(r["steps"]) >= number]
    if len(references) < len(got) or any(ref is None for ref in references):
        return None
    mean = sum(references) / len(references)
    scale = float(mean.abs().max()) or 1.0
    off = float((step["grads"] - mean).abs().max())
    if off > GRADIENT_TOLERANCE * scale:
        ratio = float(step["grads"] @ mean) / float(mean @ mean or 1.0)
        summed = _summed_again(step["grads"], mean, ratio, len(got), where)
        if summed is not None:
            return summed
        return failed(
            NAME,
            stage=MODEL,
            expected="the gradient of the mean loss of each rank's batch, averaged over the "
            "ranks (what DDP's all-reduce gives)",
            happened=f"{where}, the gradients it stepped with were {ratio:.3g} times that "
            f"average, and differ from it by up to {off:.3g}",
            fix="the loss and the backward in main: DDP already averages the gradients "
            "over the ranks; is the loss scaled, or are gradients kept from an "
            "earlier step?",
        )
    return None


def _summed_again(
    grads: torch.Tensor, mean: torch.Tensor, ratio: float, world_size: int, where: str
) -> Result | None:
    """The failure for gradients that are world_size times the average: a sum over the ranks."""
    if world_size < 2 or abs(ratio - world_size) > 0.02 * world_size:
        return None
    scale = float(mean.abs().max()) or 1.0
    if float((grads - ratio * mean).abs().max()) > GRADIENT_TOLERANCE * scale * world_size:
        return None  # not the average scaled: something else went wrong too
    return failed(
        NAME,
        stage=MODEL,
        expected="the gradient of the mean loss of each rank's batch, averaged over the "
        "ranks (what DDP's all-reduce gives)",
        happened=f"{where}, the gradients it stepped with were {world_size} times that "
        f"average, as many times as there are ranks: they were summed over the ranks on top "
        "of DDP's averaging",
        fix="main, between the loss and optimizer.step(): DDP's backward already averages the "
        "gradients over the ranks; what sums them again (an all_reduce of the gradients, or a "
        "loss multiplied by the world size)?",
    )


def _rank_0_alone_logs(got: list[training.TrainingReport], lines: list[str]) -> Result | None:
    """A failure if a rank other than 0 printed or logged a line."""
    if len(got) > 1:
        for report in got[1:]:
            if report["said"]:
                line, text = report["said"][0]
                at = line_at(lines, line) or "a line outside the script"
                return failed(
                    NAME,
                    stage=LOG,
                    expected="the log printed by rank 0 alone",
                    happened=f"rank {report['rank']} printed or logged {len(report['said'])} "
                    f"line(s), "
                    f"the first {text!r}, from {at}",
                    fix="the line that prints: which rank runs it?",
                    answer="print(...) under `if rank == 0:`",
                )
    return None
