"""Check for ``09_checkpoints``' exercise: saving and resuming a DDP run, killed in the middle.

The learner writes ``save_checkpoint(model, optimizer, epoch, path)`` (one
writer, the module inside the wrapper, the optimiser and the epoch, every
rank waiting until the file is complete) and ``load_checkpoint(model,
optimizer, path, device)`` (every rank loads it with ``map_location`` and
says which epoch comes next). :func:`check_checkpoint` runs three short
trainings with them in real processes
(:func:`ddp_lesson.exercises.probes.checkpoints.train`): one that never
stops, one whose rank 1 is killed right after the first epoch's
checkpoint, and the same command again, which must resume and end with
exactly the parameters of the run that never stopped. A failure says what
happened and where to look; the line that fixes it comes after a few
tries at the same mistake, or with ``reveal=True``.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ... import devices, reports
from ...stages import stage
from ..probes import checkpoints as probes
from . import base
from .base import Result, failed, graded, launch_checked, launch_file, passed, quote

NAME = "check_checkpoint"
GROUP, MODEL = stage("process_group").title, stage("model_wrapping").title

#: Epochs of each run; the killed run dies after the first.
EPOCHS = 3

#: Parameters closer than this count as the same.
TOLERANCE = 1e-6

STUBBED = "save_checkpoint() and load_checkpoint()"


def _wrapper_keys(state: object) -> list[str]:
    """Keys in ``state`` (nested dicts) that start with ``module.``: a DDP wrapper's names."""
    if isinstance(state, dict):
        found = [k for k in state if isinstance(k, str) and k.startswith("module.")]
        for value in state.values():
            found += _wrapper_keys(value)
        return found
    return []


@graded
def check_checkpoint(path: str | Path, *, reveal: bool = False) -> Result:
    """Train with the learner's checkpoint functions, kill a rank, resume, and compare.

    Args:
        path: the file with ``save_checkpoint`` and ``load_checkpoint``, e.g.
            ``"workers/exercise_09.py"``.
        reveal: show the line that fixes a failure now, even on a first try.
    """
    world_size = devices.plan().world_size
    with tempfile.TemporaryDirectory(prefix="ddp-lesson-checkpoints-") as folder:
        full, crashed = os.path.join(folder, "full.pt"), os.path.join(folder, "crashed.pt")
        got = launch_checked(
            NAME, path, probes.train, STUBBED, full, EPOCHS, -1,
            stage=MODEL, expected=f"{EPOCHS} epochs of training, saving after each",
            explain=_stranded,
        )  # fmt: skip
        problem = _first_run(got, full, world_size)
        if problem is not None:
            return problem
        reference = [r["params"] for r in got]

        _, error, early = launch_file(NAME, path, probes.train, STUBBED, crashed, EPOCHS, 0)
        if error is None or "SIGKILL" not in str(error):
            return failed(
                NAME,
                stage=MODEL,
                expected="rank 1 killed right after the checkpoint of epoch 0",
                happened="the run ended otherwise: " + (quote(error) if error else "nobody died"),
                fix="save_checkpoint: the line the error names",
            )
        if not os.path.exists(crashed):
            return failed(
                NAME,
                stage=GROUP,
                expected="the checkpoint of epoch 0 on disk after the crash",
                happened="no file: rank 1 went on (and died) before rank 0 had written it",
                fix="save_checkpoint: after rank 0 has started writing, what makes the other "
                "ranks wait until the file is complete?",
                answer="barrier() after rank 0's save, outside the `if`, so every rank calls it",
            )

        saved = _saved_epoch(crashed)  # before the resumed run writes the file again
        got = launch_checked(
            NAME, path, probes.train, STUBBED, crashed, EPOCHS, -1,
            stage=MODEL, expected="the same command to resume from the checkpoint",
            fix="load_checkpoint: the line the error names", explain=_stranded,
        )  # fmt: skip
        return _resumed(got, reference, saved)


def _stranded(error: BaseException) -> Result | None:
    """The failure for a rank left alone in a collective (a barrier, DDP's all-reduce), or None.

    Such a rank waits for the others at a point they never reach: the
    collectives the ranks call must pair up, which is the process group's
    part, whatever the function that calls them.
    """
    return base.stranded(
        NAME,
        error,
        stage=GROUP,
        expected="every rank to call the same collectives in the same order (save_checkpoint's "
        "wait, DDP's all-reduce in each backward)",
    )


def _saved_epoch(file: str) -> int | None:
    """The epoch the checkpoint at ``file`` holds (its ``epoch`` entry), or None if unknown."""
    try:
        import torch

        state = torch.load(file, map_location="cpu")
    except Exception:  # an unusual format: the message then leaves the file out
        return None
    epoch = state.get("epoch") if isinstance(state, dict) else None
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None


def _require_start(
    got: list[probes.TrainReport],
    epoch: int,
    expected: str,
    fix: str,
    answer: str = "",
    noted: str = "",
) -> None:
    """End the check unless ``load_checkpoint`` returned ``epoch`` on every rank.

    ``noted`` follows what load_checkpoint returned, in the failure that says so.
    """
    starts = sorted({repr(r["start"]) for r in got})
    if len(starts) > 1:
        each = ", ".join(f"{r['start']!r} on rank {r['rank']}" for r in got)
        raise base.EndCheck(
            failed(
                NAME,
                stage=MODEL,
                expected="load_checkpoint to return the same epoch on every rank",
                happened=f"load_checkpoint returned {each}: the ranks would resume at "
                "different epochs",
                fix="load_checkpoint: every rank resumes, so every rank needs the saved "
                "weights, optimiser state and epoch; does each rank read the file?",
                answer="torch.load(path, map_location=device) and the load_state_dict calls on "
                "every rank, outside any `if rank == 0:`",
            )
        )
    if starts != [repr(epoch)]:
        happened = f"load_checkpoint returned {', '.join(starts)}{noted}"
        raise base.EndCheck(
            failed(NAME, stage=MODEL, expected=expected, happened=happened, fix=fix, answer=answer)
        )


def _first_run(got: list[probes.TrainReport], file: str, world_size: int) -> Result | None:
    _require_start(
        got, 0, "load_checkpoint to return 0 when there is no checkpoint yet",
        "load_checkpoint: if the file does not exist, return 0",
    )  # fmt: skip
    saves = [r["saves"] for r in got]
    if saves[0] != EPOCHS or any(saves[1:]):
        return failed(
            NAME,
            stage=MODEL,
            expected=f"rank 0 alone to write, once per epoch: saves per rank "
            f"{[EPOCHS] + [0] * (world_size - 1)}",
            happened=f"saves per rank {saves}",
            fix="save_checkpoint, around torch.save: every rank holds the same weights, and "
            "several writers of one file overwrite each other; one rank is enough",
            answer="torch.save(...) inside `if get_rank() == 0:`",
        )
    early = [r["rank"] for r in got if r["complete_after_save"] is False]
    if early:
        return failed(
            NAME,
            stage=GROUP,
            expected="every rank to leave save_checkpoint only once the file is complete",
            happened=f"rank(s) {early} returned while rank 0 was still writing it (its first save "
            f"was held back {probes.SLOW_SAVE_S} s, as a slow disk would)",
            fix="save_checkpoint, after the save: nothing made the other ranks wait for rank 0 "
            "to finish writing; what does every rank call to wait for all the others?",
            answer="barrier() after the save, outside the `if`, so every rank calls it and "
            "waits for rank 0",
        )
    try:
        import torch

        state = torch.load(file, map_location="cpu")
    except Exception:  # an unusual format: the resume below still judges it
        return None
    wrapped = _wrapper_keys(state)
    if wrapped:
        return failed(
            NAME,
            stage=MODEL,
            expected="the network's own names (linear_relu_stack.0.weight, ...)",
            happened=f"the wrapper's: {wrapped[0]}, ...; a plain NeuralNetwork refuses to load "
            f"them",
            fix="save_checkpoint, where the state is gathered: the DDP wrapper prefixes every "
            "name with `module.`; save the network inside it",
            answer="model.module.state_dict(), not model.state_dict()",
        )
    return None


def _resumed(got: list[probes.TrainReport], reference: list, saved: int | None) -> Result:
    """check_checkpoint's verdict on the resumed run; ``saved``: the epoch its file held."""
    fix = "load_checkpoint's return: the epoch to start at is the one after the saved one"
    noted = ""
    if saved is not None:
        noted = f", from a checkpoint written after epoch 0 whose 'epoch' entry is {saved}"
    if saved not in (None, 0):
        fix = (
            "save_checkpoint, where it stores the epoch, and load_checkpoint's return: "
            f"save_checkpoint was given epoch 0 and the file holds {saved}; which of the two "
            "functions should turn the finished epoch into the next one?"
        )
    _require_start(
        got, 1, "the resumed run to start at epoch 1: the checkpoint is written after epoch 0",
        fix, answer='store the epoch as given and return state["epoch"] + 1', noted=noted,
    )  # fmt: skip
    bare = [r["rank"] for r in got if any(m == "None" for m in r["map_locations"])]
    if bare or not all(r["map_locations"] for r in got):
        return failed(
            NAME,
            stage=MODEL,
            expected="every rank to load the checkpoint with map_location",
            happened=f"rank(s) {bare or [r['rank'] for r in got if not r['map_locations']]} loaded "
            "without it (or not at all): on GPUs every rank would put rank 0's tensors on "
            "cuda:0",
            fix="load_checkpoint, where it reads the file: tell torch.load where this rank's "
            "tensors go, or they land where rank 0 saved them from",
            answer="torch.load(path, map_location=device) on every rank",
        )
    gap = reports.max_abs_difference(reference + [r["params"] for r in got])
    if gap > TOLERANCE:
        return failed(
            NAME,
            stage=MODEL,
            expected="the resumed model equal to the run that never stopped",
            happened=f"parameters differ by up to {gap:.3g}",
            fix="save_checkpoint and load_checkpoint: what does the next epoch depend on "
            "besides the weights, and is all of it written and read back on every rank?",
            answer="the optimiser's state_dict() saved beside the model's, and both loaded "
            "on every rank",
        )
    return passed(
        NAME,
        "rank 0 alone wrote each epoch's checkpoint and every rank waited for it; after "
        "rank 1 was killed the run resumed at epoch 1 on every rank (map_location) and "
        "ended with exactly the parameters of the run that never stopped.",
    )
