"""Checks for the fault-finding exercises: name the stage and the line that owns the fix.

The exercise notebooks plant a fault in a script (``06_full_script``'s
MEDIUM exercise, ``07_mistakes``' suspects); the learner reads it, without
running the doctor, and answers with a stage and a line. The check accepts
only the line that owns the fix, given by its number or its text, never
just any line that mentions the right word. A wrong answer is told what is
wrong and where to look; the answer itself is shown only after a few
tries, or with ``reveal=True``. While the stage is still the learner's to
find, a failure names none: its ``stage`` is ``None`` and ``stage_hidden``
is set, and the message says the stage is not shown yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from ...stages import stage
from . import answers
from .base import Result, failed, hidden_stage, is_stub, missing_file, not_attempted, passed


@dataclass(frozen=True)
class Planted:
    """One planted fault: where it is, and what to say to an answer that misses it.

    Attributes:
        key: the stage that owns the fix.
        owner: the text of the one line that owns the fix.
        why: one sentence on what the line does wrong and what fixes it.
        stage_hints: said to a wrong stage, the first time and then again.
        near: lines a learner is likely to name instead (their text), and
            what to tell them about each.
        line_hint: said to any other wrong line.
    """

    key: str
    owner: str
    why: str
    stage_hints: tuple[str, str]
    near: dict[str, str] = field(default_factory=dict)
    line_hint: str = ""


PLANTED = {
    "teammate": Planted(
        "spawning",
        'world_size = int(os.environ.get("WORLD_SIZE", 1))',
        "python teammate.py sets no WORLD_SIZE, so world_size is 1 and mp.spawn starts one "
        "process, which forms a group of one and trains on all the data; "
        "world_size = torch.cuda.device_count() would start one process per GPU",
        (
            "only one process trained, and the run still finished: which stage decides how "
            "many processes there are, before any group, data or model exists?",
            "the number of processes is fixed before main runs in any of them",
        ),
        {
            "mp.spawn(main, args=(world_size, epochs), nprocs=world_size)":
                "this line starts exactly world_size processes, as it should: which value "
                "does world_size hold when the script is run as `python teammate.py`?",
            "init_process_group(backend, rank=rank, world_size=world_size)":
                "the group is formed from what main was told; with one process told "
                "world_size=1 it forms correctly. Look where the count is decided.",
        },
        "look at the lines that decide the number of processes",
    ),
    "suspect_a": Planted(
        "data_division",
        "train_loader = DataLoader(train_dataset, batch_size=32, shuffle=True)",
        "the sampler is built and set_epoch is called on it, but the loader never uses it: "
        "DataLoader(..., sampler=sampler) in place of shuffle=True",
        (
            "every rank takes as many steps per epoch as the single-device script did: "
            "which stage decides what each rank iterates?",
            "the steps per epoch are the batches the loader hands out",
        ),
        {
            "sampler = DistributedSampler(train_dataset)":
                "the sampler itself is right: which object hands out the batches, and "
                "does it use this sampler?",
            "sampler.set_epoch(epoch)":
                "set_epoch reaches the sampler, but is the sampler the one the loop "
                "iterates through?",
        },
        "find the object the training loop iterates, and what it draws its indices from",
    ),
    "suspect_b": Planted(
        "model_wrapping",
        "outputs = model.module(features)",
        "calling model.module runs the network around DDP, so backward() never averages the "
        "gradients and every rank trains its own model: call model(features)",
        (
            "the ranks end with different test accuracies, although DDP copied rank 0's "
            "weights to all of them: which stage keeps the copies equal?",
            "the copies start equal; what keeps every step equal on every rank?",
        ),
        {
            "return DDP(model, device_ids=[rank])":
                "the wrap is right: DDP is there. Does training go through it?",
            "return DDP(model)":
                "the wrap is right: DDP is there. Does training go through it?",
            "predicted = model.module(features.to(device)).argmax(dim=1)":
                "evaluation needs no gradients, so skipping DDP there changes nothing. "
                "Where does skipping it matter?",
        },
        "follow one training step: which call computes the outputs the loss uses?",
    ),
    "suspect_c": Planted(
        "process_group",
        "barrier()",
        "only rank 0 reaches the barrier (it sits inside `if rank == 0:`), and a collective "
        "waits for every rank: move barrier() out of the if, so every rank calls it",
        (
            "training finished on every rank and then one rank waited: what does a rank "
            "wait for, and which stage provides it?",
            "a rank waits in a collective until every rank of the group has called it",
        ),
        {
            "if rank == 0:":
                "the if is right: only rank 0 should evaluate. What else did it capture?",
            "destroy_process_group()":
                "every rank releases the group here, as it should; what did rank 0 call "
                "just before that the others did not?",
        },
        "look for a call that every rank must make, and check which ranks make it",
    ),
}  # fmt: skip


def _answered(name: str, path: str | Path, given: object, owning_line: object) -> Result | None:
    """A Result if there is nothing to check yet, else ``None``."""
    if not Path(path).is_file():
        return missing_file(name, path)
    if is_stub(given) or is_stub(owning_line):
        return not_attempted(name, "the stage and owning_line lines")
    return None


def _wrong_stage(
    name: str, planted, said: str | None, said_stage: object, tries: int, shown_answer: str
) -> Result:
    """The failure for an answer that names another stage (or none): its stage kept hidden.

    ``shown_answer``: the right stage and line, once the tries allow showing them.
    """
    if said is None:
        happened = f"{said_stage!r} is not one of the stages"
        fix = "name one of: " + ", ".join(stage(k).title for k in answers.STAGE_WORDS)
    else:
        happened = f"stage {stage(said).title!r}"
        fix = planted.stage_hints[min(tries, 2) - 1]
    if shown_answer:
        right = stage(planted.key).title
        return failed(
            name, stage=right, expected=shown_answer, happened=happened, fix=planted.why
        )
    return hidden_stage(
        name, expected="the stage whose code the symptom points to", happened=happened, fix=fix
    )


def _judge(
    name: str, path: str | Path, said_stage: object, owning_line: object, reveal: bool
) -> Result:
    planted = PLANTED.get(Path(path).stem)
    if planted is None:
        return failed(
            name,
            stage=None,  # no stage: this is not a file the exercise planted
            expected=f"one of the planted files {sorted(PLANTED)}",
            happened=f"{path}",
            fix="pass the file the exercise wrote",
        )
    right = stage(planted.key).title
    try:
        owner = answers.line_of(path, planted.owner)
        span = answers.statement_span(path, owner)
    except (LookupError, SyntaxError):
        return failed(
            name,
            stage=None,
            expected=f"{path} as the exercise wrote it",
            happened="the file has been changed",
            fix="run the %%writefile cell above again, then answer about that file",
        )
    text = Path(path).read_text().splitlines()
    said = answers.stage_named(said_stage)
    line, problem = answers.line_named(path, owning_line)
    owns = line in span if line else False
    if said == planted.key and owns:
        answers.forget(f"{name}:{path}")
        return passed(name, f"{right}, line {owner}: {planted.why}.")
    unclear = said is None or (said == planted.key and problem)
    tries = answers.tried(f"{name}:{path}") if not unclear else 1
    shown = reveal or tries >= answers.REVEAL_AFTER
    answer = f"{right}, line {owner}: {text[owner - 1].strip()}"
    if said != planted.key:
        return _wrong_stage(name, planted, said, said_stage, tries, answer if shown else "")
    if problem:
        happened, fix = problem, "name the line by its number, or copy it whole"
    else:
        happened = f"line {line}: {text[line - 1].strip()}"
        near = {answers.normal(k): v for k, v in planted.near.items()}
        fix = near.get(answers.normal(text[line - 1]), planted.line_hint)
    if shown:
        return failed(name, stage=right, expected=answer, happened=happened, fix=planted.why)
    return failed(
        name,
        stage=right,
        expected=f"the one line in {right} that owns the fix",
        happened=happened,
        fix=fix,
    )


def check_medium(
    stage: object,
    owning_line: object,
    path: str | Path = "workers/teammate.py",
    *,
    reveal: bool = False,
) -> Result:
    """Check the MEDIUM answer: the stage and the line that make only one process train.

    Args:
        stage: the stage the learner names, e.g. ``"starting processes"``.
        owning_line: the line of the teammate's script that owns the fix: its
            number, or its text.
        path: the teammate's script, as the exercise wrote it.
        reveal: show the answer now, even on a first wrong try.
    """
    name = "check_medium"
    early = _answered(name, path, stage, owning_line)
    return early if early is not None else _judge(name, path, stage, owning_line, reveal)


def check_suspect(
    path: str | Path, stage: object, owning_line: object, *, reveal: bool = False
) -> Result:
    """Check a fault-finding answer for one of ``07_mistakes``' planted scripts.

    Args:
        path: the planted script, e.g. ``"workers/suspect_a.py"``.
        stage: the stage the learner names.
        owning_line: the line that owns the fix: its number, or its text.
        reveal: show the answer now, even on a first wrong try.
    """
    name = "check_suspect"
    early = _answered(name, path, stage, owning_line)
    return early if early is not None else _judge(name, path, stage, owning_line, reveal)
