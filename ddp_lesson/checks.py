"""Checks for the exercise notebooks: run the learner's code for real and explain.

Every ``check_*`` function returns a :class:`Result` that a notebook shows as
a few plain lines: passed; not attempted yet; or failed, with what was
expected, what happened, and which stage and line own the fix. A check
never raises and never hangs: learner code runs inside bounded launches and
any error it raises becomes part of the message.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import data, devices, launch, probes, reports

PASSED, FAILED, NOT_ATTEMPTED = "passed", "failed", "not attempted yet"

#: The lesson's four areas plus the end of the group's life.
STAGES = (
    "starting processes",
    "connecting processes",
    "splitting the data",
    "synchronising the model",
    "teardown",
)

#: Seconds a check's launch may take before it counts as a hang.
CHECK_TIMEOUT_S = 45


@dataclass
class Result:
    """The outcome of one check.

    Attributes:
        check: the check's name, e.g. ``"check_spawn"``.
        status: ``"passed"``, ``"failed"`` or ``"not attempted yet"``.
        stage: for a failure, the stage (see :data:`STAGES`) that owns the fix.
        expected, happened, fix: the failure explained.
        note: for a pass, what was verified.
    """

    check: str
    status: str
    stage: str | None = None
    expected: str = ""
    happened: str = ""
    fix: str = ""
    note: str = ""

    def __bool__(self) -> bool:
        return self.status == PASSED

    def __str__(self) -> str:
        if self.status == PASSED:
            return f"PASSED {self.check}: {self.note}"
        if self.status == NOT_ATTEMPTED:
            return f"NOT ATTEMPTED YET {self.check}: {self.note}"
        return "\n".join(
            [
                f"FAILED {self.check} (stage: {self.stage})",
                f"  expected: {self.expected}",
                f"  happened: {self.happened}",
                f"  fix:      {self.fix}",
            ]
        )

    __repr__ = __str__

    def _repr_pretty_(self, printer, cycle) -> None:  # how IPython shows it
        printer.text(str(self))


def _passed(check: str, note: str) -> Result:
    return Result(check, PASSED, note=note)


def _not_attempted(check: str, what: str) -> Result:
    return Result(check, NOT_ATTEMPTED, note=f"replace the stub in {what} with your code")


def _failed(check: str, stage: str, expected: str, happened: str, fix: str) -> Result:
    return Result(check, FAILED, stage, expected, happened, fix)


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__


def _stub(value: object) -> bool:
    return value is Ellipsis


def _launch(
    world_size: int, target: Callable, *args
) -> tuple[list[dict] | None, BaseException | None]:
    """Launch ``target`` on ``world_size`` ranks; return (reports, None) or (None, error)."""

    try:
        with launch.bounded(world_size, timeout_s=CHECK_TIMEOUT_S) as run:
            launch.start(target, args=(world_size, run.port, *args), nprocs=world_size)
    except (launch.LaunchError, ValueError, TypeError) as error:
        return None, error
    return run.reports, None


def _worker_path(path: str | Path) -> str | None:
    resolved = Path(path).resolve()
    return str(resolved) if resolved.is_file() else None


def _choice(check: str, answer: object, right: str, stage: str, note: str, fix: str) -> Result:
    """Check a multiple-choice answer (a letter; case and spaces do not matter)."""
    if _stub(answer):
        return _not_attempted(check, "the answer line")
    if str(answer).strip().lower() == right:
        return _passed(check, note)
    return _failed(check, stage, right, repr(answer), fix)


def _launch_file(check: str, path: str | Path, probe: Callable, stubbed: str, *args):
    """Launch ``probe`` around the learner's file; a Result if there is nothing to check yet.

    Returns ``(reports, error, None)`` after a launch, or ``(None, None, result)``
    when the file is missing or the learner's functions are still stubs.
    """
    worker = _worker_path(path)
    if worker is None:
        return None, None, _missing_file(check, path)
    got, error = _launch(devices.plan().world_size, probe, worker, *args)
    if error is not None and "NotImplementedError" in str(error):
        return None, None, _not_attempted(check, stubbed)
    return got, error, None


def _missing_file(check: str, path: str | Path) -> Result:
    return Result(
        check,
        NOT_ATTEMPTED,
        note=f"{path} does not exist yet: run the %%writefile cell above first",
    )


# -- stage 1: starting processes ------------------------------------------------
def check_spawn(start: Callable, world_size: object) -> Result:
    """Check ``start(main, world_size, port)`` starts one process per device with the right ranks.

    Args:
        start: the learner's function; it must call ``mp.spawn`` on ``main``.
        world_size: the learner's world size for this machine.
    """
    name = "check_spawn"
    plan = devices.plan()
    if _stub(world_size):
        return _not_attempted(name, "the world_size line")
    if world_size != plan.world_size:
        return _failed(
            name,
            STAGES[0],
            f"world_size = {plan.world_size}: one process per device on this machine "
            f"({plan.describe().splitlines()[2].split('-> ')[1]})",
            f"world_size = {world_size!r}"
            + (" (torch.cuda.device_count() is 0 without GPUs)" if world_size == 0 else ""),
            "the world_size line: torch.cuda.device_count() on GPUs; "
            "devices.plan().world_size anywhere",
        )
    try:
        with launch.bounded(plan.world_size, timeout_s=CHECK_TIMEOUT_S) as run:
            start(probes.report_rank, world_size, run.port)
    except NotImplementedError:
        return _not_attempted(name, "start()")
    except launch.LaunchError as error:
        text = str(error)
        if "positional argument" in text:
            return _failed(
                name,
                STAGES[0],
                "main(rank, world_size, port) called with rank supplied by mp.spawn",
                _first_line(error),
                "the mp.spawn call: args=(world_size, port) holds only what follows rank",
            )
        if "no process was started" in text:
            return _failed(
                name,
                STAGES[0],
                f"{plan.world_size} processes",
                "no process was started (nprocs=0 starts nothing, silently)",
                "the mp.spawn call: nprocs=world_size",
            )
        return _failed(
            name, STAGES[0], "every rank to run main", _first_line(error), "the mp.spawn call"
        )
    except Exception as error:  # learner code: report it, never a traceback wall
        return _failed(
            name,
            STAGES[0],
            "start() to run without an error",
            f"{type(error).__name__}: {_first_line(error)}",
            "the body of start(): one call to mp.spawn",
        )
    ranks = [r["rank"] for r in run.reports]
    expected = list(range(plan.world_size))
    if ranks != expected:
        return _failed(
            name,
            STAGES[0],
            f"ranks {expected}, one process each",
            f"ranks {ranks} reported",
            "the mp.spawn call: nprocs must be world_size",
        )
    if {r["world_size"] for r in run.reports} != {world_size}:
        return _failed(
            name,
            STAGES[0],
            f"every rank told world_size={world_size}",
            f"ranks were told {[r['world_size'] for r in run.reports]}",
            "the mp.spawn call: args=(world_size, port)",
        )
    return _passed(name, f"ranks {ranks} each started once, all told world_size={world_size}.")


def check_nprocs_zero(answer: object) -> Result:
    """Check the multiple-choice answer on what ``mp.spawn(..., nprocs=0)`` does."""
    return _choice(
        "check_nprocs_zero",
        answer,
        "b",
        STAGES[0],
        "nprocs=0 starts nothing and raises nothing: a silent no-op.",
        "re-run the mp.spawn(..., nprocs=0) cell in 00_setup and watch",
    )


# -- stage 2: connecting processes ------------------------------------------------
def check_process_group(path: str | Path) -> Result:
    """Launch the learner's ``ddp_setup`` and ``cleanup`` (from the file at ``path``) for real."""
    name = "check_process_group"
    plan = devices.plan()
    got, error, early = _launch_file(name, path, probes.process_group, "ddp_setup() and cleanup()")
    if early is not None:
        return early
    if error is not None:
        text = str(error)
        if isinstance(error, launch.LaunchTimeout):
            return _failed(
                name,
                STAGES[1],
                f"all {plan.world_size} ranks to meet in init_process_group",
                f"they did not meet within {CHECK_TIMEOUT_S} s",
                'ddp_setup: MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), and '
                "init_process_group(backend, rank=rank, world_size=world_size)",
            )
        return _failed(
            name,
            STAGES[1],
            "ddp_setup() to create the group",
            text.splitlines()[0],
            "ddp_setup: see the error above",
        )
    expected_total = sum(rank + 1 for rank in range(plan.world_size))
    for report in got:
        rank = report["rank"]
        if not report["initialized"]:
            return _failed(
                name,
                STAGES[1],
                "a process group after ddp_setup()",
                f"rank {rank} had no group",
                "ddp_setup: call init_process_group",
            )
        if (report["rank_in_group"], report["size_of_group"]) != (rank, plan.world_size):
            return _failed(
                name,
                STAGES[1],
                f"rank {rank} of {plan.world_size} in the group",
                f"rank {report['rank_in_group']} of {report['size_of_group']}",
                "ddp_setup: init_process_group(..., rank=rank, world_size=world_size)",
            )
        if report["backend"] != plan.backend:
            return _failed(
                name,
                STAGES[1],
                f"backend {plan.backend!r}",
                f"backend {report['backend']!r}",
                'ddp_setup: "nccl" with GPUs, "gloo" without',
            )
        if report["total"] != expected_total:
            return _failed(
                name,
                STAGES[1],
                f"all_reduce sum {expected_total}",
                f"{report['total']}",
                "ddp_setup: every rank must join one group",
            )
        if report["after_cleanup"]:
            return _failed(
                name,
                "teardown",
                "no group after cleanup()",
                f"rank {rank}'s group was still initialized",
                "cleanup: call destroy_process_group()",
            )
    return _passed(
        name,
        f"{plan.world_size} ranks joined one {plan.backend} group, summed to {expected_total:g}, "
        "and released it.",
    )


# -- stage 3: splitting the data ---------------------------------------------------
def check_sampler(path: str | Path, size: int = 10, epochs: int = 2) -> Result:
    """Launch the learner's ``make_loader`` and ``epoch_orders``; compare with the real sampler."""
    name = "check_sampler"
    plan = devices.plan()
    got, error, early = _launch_file(
        name, path, probes.sampler, "make_loader() and epoch_orders()", size, epochs
    )
    if early is not None:
        return early
    if error is not None:
        return _failed(
            name,
            STAGES[2],
            "the loader to run",
            str(error).splitlines()[0],
            "make_loader / epoch_orders: see the error above",
        )
    orders = [r["orders"] for r in got]
    if any(len(o[0]) == size for o in orders) and plan.world_size > 1:
        return _failed(
            name,
            STAGES[2],
            f"each rank to iterate its own {-(-size // plan.world_size)} of {size} items",
            f"every rank iterated all {size} items (sampler: {got[0]['sampler']})",
            "make_loader: DataLoader(..., sampler=DistributedSampler(dataset))",
        )
    for epoch in range(epochs):
        real = data.sampler_partition(size, plan.world_size, epoch=epoch)
        mine = [o[epoch] for o in orders]
        if mine == real:
            continue
        if epoch > 0 and mine == data.sampler_partition(size, plan.world_size, epoch=0):
            return _failed(
                name,
                STAGES[2],
                f"epoch {epoch} in a new order: {real}",
                f"the same order as epoch 0: {mine}",
                "epoch_orders: call train_loader.sampler.set_epoch(epoch) before each epoch",
            )
        return _failed(
            name,
            STAGES[2],
            f"epoch {epoch}: {real}",
            f"epoch {epoch}: {mine}",
            "make_loader: a DistributedSampler with default shuffle and seed",
        )
    return _passed(
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
) -> Result:
    """Compare a predicted index list for one rank with the real ``DistributedSampler``."""
    name = "check_sampler_prediction"
    if _stub(predicted):
        return _not_attempted(name, "the prediction line")
    real = data.sampler_partition(
        size, world_size, epoch=epoch, shuffle=shuffle, seed=seed, drop_last=drop_last
    )[rank]
    if list(predicted) == real:
        return _passed(name, f"rank {rank} gets {real}, as DistributedSampler says.")
    marks = data.padding_of(
        data.sampler_partition(
            size, world_size, epoch=epoch, shuffle=shuffle, seed=seed, drop_last=drop_last
        ),
        size,
    )
    why = []
    if marks["repeated"]:
        why.append(f"padding repeats {marks['repeated']}")
    if marks["dropped"]:
        why.append(f"drop_last skips {marks['dropped']}")
    return _failed(
        name,
        STAGES[2],
        f"{real}" + (f" ({'; '.join(why)})" if why else ""),
        f"{list(predicted)}",
        "work it through: the order (shuffled by seed + epoch, or 0, 1, 2, ...), padded "
        f"to a multiple of {world_size} (or trimmed with drop_last), then rank r takes "
        f"positions r, r + {world_size}, r + {2 * world_size}, ...; "
        "data.sampler_partition(...) shows the real answer",
    )


def check_easy(answer: object) -> Result:
    """Check the EASY fault-finding answer: what each process iterates without the sampler."""
    return _choice(
        "check_easy",
        answer,
        "b",
        STAGES[2],
        "without the sampler every process iterates the whole data set.",
        "the sampler= argument is the only thing that divides the data",
    )


# -- stage 4: synchronising the model ------------------------------------------------
def check_wrap(path: str | Path) -> Result:
    """Launch the learner's ``wrap(model, rank, device)`` and compare weights and gradients."""
    name = "check_wrap"
    plan = devices.plan()
    got, error, early = _launch_file(name, path, probes.model_wrap, "wrap()")
    if early is not None:
        return early
    if error is not None:
        text = str(error)
        if "device_ids" in text and "CPU modules" in text:
            return _failed(
                name,
                STAGES[3],
                "DDP(model) for a model on the CPU",
                "DDP refused device_ids for a CPU module",
                "wrap: device_ids=[rank] only when device.type == 'cuda'",
            )
        return _failed(
            name, STAGES[3], "wrap() to run", text.splitlines()[0], "wrap: see the error above"
        )
    for report in got:
        want = str(devices.device_for(report["rank"], plan.device_type))
        if report["device"] != want:
            return _failed(
                name,
                STAGES[3],
                f"rank {report['rank']}'s model on {want}",
                f"on {report['device']}",
                "wrap: model.to(device) before DDP",
            )
    if any(r["wrapper"] != "DistributedDataParallel" for r in got):
        gap = reports.max_abs_difference([r["grads"] for r in got])
        return _failed(
            name,
            STAGES[3],
            "a DistributedDataParallel model with equal gradients on every rank",
            f"a plain {got[0]['wrapper']}; gradients differ by up to {gap:.3g}",
            "wrap: return DDP(model) after moving it to the device",
        )
    for key, what in (("params", "weights"), ("grads", "gradients")):
        gap = reports.max_abs_difference([r[key] for r in got])
        if gap > 1e-6:
            return _failed(
                name,
                STAGES[3],
                f"identical {what} on every rank",
                f"{what} differ by up to {gap:.3g}",
                "wrap: DDP(model, ...)",
            )
    return _passed(
        name,
        f"{plan.world_size} ranks with different starting weights ended "
        "with identical weights and identical gradients.",
    )


# -- fault finding --------------------------------------------------------------------
def check_medium(stage: object, owning_line: object) -> Result:
    """Check the MEDIUM fault-finding answer: only one of four GPUs seems to train."""
    name = "check_medium"
    if _stub(stage) or _stub(owning_line):
        return _not_attempted(name, "the stage and owning_line lines")
    said = str(stage).lower()
    if not ("spawn" in said or "start" in said):
        return _failed(
            name,
            STAGES[0],
            "the first stage that runs: starting processes",
            f"stage {stage!r}",
            "how many processes train is decided before any data or model exists",
        )
    line = str(owning_line)
    if not any(key in line for key in ("nprocs", "mp.spawn", "world_size")):
        return _failed(
            name,
            STAGES[0],
            "the line that sets how many processes start",
            f"{owning_line!r}",
            "look at mp.spawn(..., nprocs=world_size)",
        )
    return _passed(
        name,
        "starting processes: mp.spawn(..., nprocs=world_size) decides how "
        "many processes train, and world_size comes from the device count.",
    )


__all__ = [
    "Result",
    "STAGES",
    "check_easy",
    "check_medium",
    "check_nprocs_zero",
    "check_process_group",
    "check_sampler",
    "check_sampler_prediction",
    "check_spawn",
    "check_wrap",
]
