"""The DDP doctor: name the stage of a learner's script that is at fault, and the line.

A faulty DDP script rarely crashes: its processes keep running but stop
acting as one training run. :func:`diagnose` finds out which of the five
stages is responsible, from two kinds of evidence:

* the code, read without running it (:mod:`ddp_lesson.doctor_read`): rank
  passed in the spawn arguments, ``nprocs`` not tied to the world size, no
  sampler on the training loader, no ``set_epoch``, a model never wrapped or
  used unwrapped, a fixed GPU for every rank, no ``destroy_process_group``;
* a short, bounded, real run on gloo (:mod:`ddp_lesson.doctor_probe`):
  which processes started, the group they formed, the indices each rank
  iterated, whether parameters agree across ranks after a few steps, and
  whether the group was released.

The command line is ``python -m ddp_lesson doctor PATH``; notebooks call
:func:`diagnose` and print the result.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .doctor_read import STAGES, Finding, Reading, read

OK, FAULT, NOT_CHECKED = "OK", "FAULT", "NOT CHECKED"

#: How each stage is named in the printed diagnosis.
TITLES = {
    "spawning": "spawning",
    "process_group": "process group",
    "data_division": "data division",
    "model_wrapping": "model wrapping",
    "teardown": "teardown",
}

#: Default deadline for the whole run, in seconds.
TIMEOUT_S = 60

#: Batches of each epoch the run actually uses (every index is still recorded).
BATCHES = 4

#: Seconds a rank waits for the others (joining the group, at a collective).
WAIT_S = 20

#: Width of the printed diagnosis.
WIDTH = 78

#: Parameters closer than this count as equal across ranks.
TOLERANCE = 1e-6


@dataclass
class Stage:
    """One stage's verdict.

    Attributes:
        status: ``"OK"``, ``"FAULT"`` or ``"NOT CHECKED"``.
        evidence: what the code and the run showed, in one string.
        line: the line that owns the fix (for a fault), or the stage's line.
        parts: the pieces of ``evidence``, one per finding.
    """

    status: str
    evidence: str
    line: int | None = None
    parts: list[str] = field(default_factory=list, repr=False)


@dataclass
class Diagnosis:
    """What the doctor found in one file.

    Attributes:
        path: the file diagnosed.
        stages: one :class:`Stage` per stage key (see :data:`STAGES`), in order.
        problem: set instead of stages when the file could not be diagnosed
            (missing, does not parse, crashed at import...): one line naming the fix.
        notes: what the reader should also know (what could not be run, and why).
        ranks: what each process recorded, for a closer look.
        output: what the script and its processes printed during the run.
    """

    path: str
    stages: dict[str, Stage] = field(default_factory=dict)
    problem: str = ""
    notes: list[str] = field(default_factory=list)
    ranks: list[dict] = field(default_factory=list)
    output: str = ""

    @property
    def faults(self) -> list[str]:
        """The stages at fault, in the order the script runs them."""
        return [key for key, stage in self.stages.items() if stage.status == FAULT]

    @property
    def ok(self) -> bool:
        """True when the file could be diagnosed and no stage is at fault."""
        return not self.problem and not self.faults

    def __bool__(self) -> bool:
        return self.ok

    def as_dict(self) -> dict:
        """The diagnosis as plain data (what ``--json`` prints)."""
        return {
            "path": self.path,
            "ok": self.ok,
            "problem": self.problem or None,
            "stages": {
                key: {"status": s.status, "evidence": s.evidence, "line": s.line}
                for key, s in self.stages.items()
            },
            "notes": self.notes,
        }

    def to_json(self) -> str:
        return json.dumps(self.as_dict(), indent=2)

    def __str__(self) -> str:
        if self.problem:
            return f"doctor: {self.problem}"
        out = [f"doctor: {Path(self.path).name}"]
        for key, stage in self.stages.items():
            head = f"  {TITLES[key]:15} {stage.status}"
            if stage.status != FAULT:
                out += textwrap.wrap(
                    f"{head:30} {stage.evidence}", WIDTH, subsequent_indent=" " * 31
                )
                continue
            out.append(head + (f" at line {stage.line}" if stage.line else ""))
            for part in stage.parts or [stage.evidence]:
                out += textwrap.wrap(part, WIDTH, initial_indent=" " * 6, subsequent_indent=" " * 8)
        for note in self.notes:
            out += textwrap.wrap(f"note: {note}", WIDTH, subsequent_indent="  ")
        return "\n".join(out)

    __repr__ = __str__

    def _repr_pretty_(self, printer, cycle) -> None:  # how IPython shows it
        printer.text(str(self))


# -- running the file -------------------------------------------------------------
@contextlib.contextmanager
def _environment(values: dict[str, str]):
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _run(reading: Reading, world_size: int, timeout_s: float, args: Sequence) -> tuple:
    """Run the file under the probe; return (rank records, script record, launch error)."""
    import torch

    from . import devices, doctor_probe, launch

    folder = tempfile.mkdtemp(prefix="ddp-lesson-doctor-")
    path = os.path.realpath(reading.path)
    env = {
        doctor_probe.DIR_ENV: folder,
        doctor_probe.FILE_ENV: path,
        doctor_probe.BATCHES_ENV: str(BATCHES),
        doctor_probe.WAIT_ENV: str(min(WAIT_S, timeout_s)),
        doctor_probe.NPROCS_ENV: str(world_size),
        devices.WORLD_SIZE_ENV: str(world_size),
    }
    if reading.asks_device_count and not torch.cuda.is_available():
        env[doctor_probe.GPUS_ENV] = str(world_size)
    error, run = None, None
    quiet = io.StringIO()
    try:
        with _environment(env), contextlib.redirect_stdout(quiet):
            with launch.bounded(world_size, timeout_s=timeout_s) as run:
                os.environ[doctor_probe.PORT_ENV] = str(run.port)
                if reading.mode == "worker":
                    launch.start(
                        doctor_probe.run_worker,
                        args=(world_size, path, tuple(args)),
                        nprocs=world_size,
                    )
                else:
                    command = [sys.executable, "-m", "ddp_lesson.doctor_probe", path]
                    subprocess.run([*command, *map(str, args)], stdin=subprocess.DEVNULL)
            os.environ.pop(doctor_probe.PORT_ENV, None)
    except launch.LaunchError as failed:
        error = failed
    finally:
        os.environ.pop(doctor_probe.PORT_ENV, None)
        ranks = _collect(Path(folder) / "ranks")
        script = _collect(Path(folder) / "script")
        shutil.rmtree(folder, ignore_errors=True)
    output = run.output if run is not None else ""
    return ranks, (script[0] if script else None), error, output


def _collect(folder: Path) -> list[dict]:
    from . import reports

    return reports.collect(folder) if folder.is_dir() else []


# -- judging the evidence -----------------------------------------------------------------
def _runtime(reading: Reading, ranks: list[dict], script: dict | None, world_size: int):
    """Findings from the run, and what each stage's run showed when it was fine."""
    found: list[Finding] = []
    fine: dict[str, str] = {}
    for r in ranks:
        if r["stop"]:
            found.append(Finding(r["stop"]["stage"], r["stop"]["evidence"], r["stop"]["line"]))
        error = r["error"]
        if error and error.get("call"):
            found.append(Finding("spawning", error["message"], None))
    _judge_spawning(found, fine, ranks, script, world_size)
    _judge_group(found, fine, ranks)
    _judge_data(found, fine, ranks)
    _judge_model(found, fine, ranks)
    _judge_teardown(found, fine, ranks)
    unique, seen = [], set()
    for finding in found:
        key = (finding.stage, finding.evidence)
        if key not in seen:
            seen.add(key)
            unique.append(finding)
    return unique, fine


def _judge_spawning(found, fine, ranks, script, world_size) -> None:
    if script is not None:
        spawns = script.get("spawns", [])
        if spawns and spawns[0]["nprocs"] == 0:
            found.append(
                Finding(
                    "spawning",
                    "mp.spawn(..., nprocs=0) started no process at all (world_size came "
                    "out as 0: torch.cuda.device_count() is 0 without GPUs)",
                    spawns[0]["line"],
                )
            )
    entered = sorted(r["rank"] for r in ranks if not (r["error"] or {}).get("call"))
    if entered:
        fine["spawning"] = f"{len(entered)} process(es) started, each running main"


def _judge_group(found, fine, ranks) -> None:
    joined = [r for r in ranks if r["init"] and r["init"].get("joined")]
    if not joined:
        return
    backends = sorted({r["init"]["backend"] for r in joined})
    claimed = sorted(r["claimed_rank"] for r in joined)
    fine["process_group"] = f"ranks {claimed} joined one {'/'.join(backends)} group"
    calls = [len(r["collectives"]) for r in joined]
    if any(calls):
        fine["process_group"] += f"; every rank made the same {calls[0]} collective call(s)"


def _overlap(orders: list[list[int]]) -> set[int]:
    """Indices that more than one rank iterated."""
    seen = Counter(i for order in orders for i in set(order))
    return {i for i, n in seen.items() if n > 1}


def _judge_data(found, fine, ranks) -> None:
    epochs: dict[int, list[list[dict]]] = {}
    for r in ranks:
        for entry in r["loaders"]:
            epochs.setdefault(entry["loader"], [[] for _ in ranks])[ranks.index(r)].append(entry)
    notes = []
    for per_rank in epochs.values():
        per_rank = [e for e in per_rank if e]
        if len(per_rank) < 2:
            continue
        first = [e[0] for e in per_rank]
        size, line, sampler = first[0]["size"], first[0]["line"], first[0]["sampler"]
        trained = any(e["trained"] for entries in per_rank for e in entries)
        shared = _overlap([e["indices"] for e in first])
        counts = [len(e["indices"]) for e in first]
        padded = sampler == "DistributedSampler" and 0 < len(shared) < len(per_rank)
        if trained and shared and not padded:
            whole = all(set(e["indices"]) >= set(range(size or 0)) for e in first)
            found.append(
                Finding(
                    "data_division",
                    f"every rank iterated all {size} items of the training data "
                    f"(overlap between ranks {100 * len(shared) // max(size or 1, 1)}%, "
                    f"sampler: {sampler})"
                    if whole
                    else f"{len(shared)} training items went to more than one rank "
                    f"(sampler: {sampler})",
                    line,
                )
            )
            continue
        if not trained and padded:
            extra = sum(counts) - (size or 0)
            found.append(
                Finding(
                    "data_division",
                    f"the evaluation DataLoader (line {line}) hands out {sum(counts)} items "
                    f"for {size}: DistributedSampler pads with {extra} repeated index(es) "
                    f"{sorted(shared)}, so a metric summed over ranks counts them twice; "
                    "evaluate without padding (e.g. the whole set on one rank)",
                    line,
                )
            )
            continue
        if trained and sampler == "DistributedSampler":
            again = [
                e
                for e in per_rank[0][1:]
                if e["indices"] == per_rank[0][0]["indices"] and len(e["indices"]) > 1
            ]
            if again:
                found.append(
                    Finding(
                        "data_division",
                        f"rank 0 iterated the same order in epoch 0 and the next "
                        f"{len(again)} epoch(s) (sampler epoch stayed {again[0]['epoch']}): "
                        "set_epoch was never called",
                        line,
                    )
                )
                continue
        if trained:
            text = (
                f"each rank iterated its own {counts[0]} of {size} training items"
                + (f" ({len(shared)} repeated as padding)" if shared else ", no overlap")
            )
            if len(per_rank[0]) > 1:
                text += f"; a new order in each of {len(per_rank[0])} epochs"
            notes.append(text)
    if notes:
        fine["data_division"] = "; ".join(notes)


def _device_of(r: dict) -> str | None:
    asked = [p["asked"] for p in r["placements"] if p["asked"] != "cpu"]
    if not asked:
        return None
    device = asked[0]
    if device == "cuda":
        chosen = [s["asked"] for s in r["set_device"] if s["asked"]]
        device = chosen[-1] if chosen else "cuda:0"
    return device


def _judge_model(found, fine, ranks) -> None:
    placed = [(r, _device_of(r)) for r in ranks]
    gpus = [d for _, d in placed if d]
    if len(ranks) > 1 and len(gpus) == len(ranks) and len(set(gpus)) == 1:
        line = next(p["line"] for p in ranks[0]["placements"] if p["asked"] != "cpu")
        found.append(
            Finding(
                "model_wrapping",
                f"every rank put its model on {gpus[0]}: one GPU does all the work while "
                "the others idle (or run out of memory); use model.to(rank)",
                line,
            )
        )
    wrapped = [r for r in ranks if r["ddp"]]
    for r in wrapped:
        if r["ddp"][0]["error"]:
            refused = r["ddp"][0]
            found.append(
                Finding("model_wrapping", f"DDP refused: {refused['error']}", refused["line"])
            )
            return
    ids = [tuple(r["ddp"][0]["device_ids"] or ()) for r in wrapped]
    if len(wrapped) > 1 and all(ids) and len(set(ids)) == 1:
        found.append(
            Finding(
                "model_wrapping",
                f"every rank wrapped its model with device_ids={list(ids[0])}: the ids must "
                "follow the rank (device_ids=[rank])",
                wrapped[0]["ddp"][0]["line"],
            )
        )
    from . import reports

    stepped = [r for r in ranks if r["params"] is not None]
    steps = min((len(r["steps"]) for r in stepped), default=0)
    gap = reports.max_abs_difference([r["params"] for r in stepped]) if len(stepped) > 1 else 0.0
    raw = [r["forwards"] for r in ranks if r["forwards"]["raw"]]
    if ranks and not wrapped and (stepped or any(r["loaders"] for r in ranks)):
        found.append(
            Finding(
                "model_wrapping",
                "no rank wrapped its model in DistributedDataParallel"
                + (
                    f"; after {steps} optimiser step(s) the ranks' parameters differ by up "
                    f"to {gap:.3g}"
                    if gap > TOLERANCE
                    else ""
                ),
                None,
            )
        )
    elif raw:
        found.append(
            Finding(
                "model_wrapping",
                f"{raw[0]['raw']} training forward pass(es) called the wrapped module "
                "directly, not through DDP"
                + (f"; after {steps} step(s) parameters differ by up to {gap:.3g}" if gap else ""),
                raw[0]["raw_line"],
            )
        )
    elif gap > TOLERANCE:
        found.append(
            Finding(
                "model_wrapping",
                f"after {steps} optimiser step(s) the ranks' parameters differ by up to {gap:.3g}",
                None,
            )
        )
    elif wrapped:
        where = sorted({str(_device_of(r) or r["ddp"][0]["module_device"]) for r in wrapped})
        fine["model_wrapping"] = (
            f"DDP wrapped the model on {len(wrapped)} ranks ({', '.join(where)})"
        )
        if stepped:
            fine["model_wrapping"] += (
                f"; parameters identical on every rank after {steps} step(s)"
            )


def _judge_teardown(found, fine, ranks) -> None:
    returned = [r for r in ranks if r["returned"] and r["init"]]
    alive = [r["rank"] for r in returned if r["alive_at_return"]]
    if alive:
        found.append(
            Finding(
                "teardown",
                f"the process group was still initialised when main returned on ranks {alive}",
                None,
            )
        )
    elif returned:
        fine["teardown"] = (
            f"ranks {sorted(r['claimed_rank'] for r in returned)} released the group "
            "(destroy_process_group) before main returned"
        )


def _why_not_run(ranks: list[dict], script: dict | None, error, world_size: int) -> str:
    """One sentence on why the run ended early, if it did."""
    stops = [r for r in ranks if r["stop"]]
    if stops:
        return f"the run ended at the {TITLES[stops[0]['stop']['stage']]} fault"
    failed = [r for r in ranks if r["error"] and not r["error"].get("call")]
    if error is not None and type(error).__name__ == "LaunchTimeout":
        # The deadline comes first: stopping the ranks makes each of them
        # raise (KeyboardInterrupt, SystemExit), which is not their fault.
        where = sorted({r["error"]["line"] for r in failed if r["error"]["line"]})
        at = f" (the ranks were at line {', '.join(map(str, where))})" if where else ""
        return f"the run did not finish within its deadline and was stopped{at}"
    if failed:
        e = failed[0]["error"]
        at = f" at line {e['line']}" if e["line"] else ""
        return f"a rank raised {e['type']}{at}"
    if script is not None and not script.get("spawns"):
        e = script.get("error")
        if e:
            return f"the script raised {e['type']}: {e['message']} before calling mp.spawn"
        return "the script ended without calling mp.spawn"
    if script is not None and script.get("error") and not ranks:
        e = script["error"]
        return f"the script raised {e['type']}: {e['message']}"
    return ""


def _verdict(
    reading: Reading, ranks, script, error, world_size: int, not_run: str = ""
) -> Diagnosis:
    """Each stage's verdict from the code's findings and the run's; ``not_run``: why no run."""
    diagnosis = Diagnosis(str(reading.path), ranks=ranks)
    runtime, fine = _runtime(reading, ranks, script, world_size)
    stopped = not_run or _why_not_run(ranks, script, error, world_size)
    for key in STAGES:
        mine = sorted(
            (f for f in reading.findings if f.stage == key), key=lambda f: f.line or 0
        )
        ran = [f for f in runtime if f.stage == key]
        if mine or ran:
            line = next((f.line for f in mine + ran if f.line), reading.lines.get(key))
            parts = [f"code: {f.evidence}" for f in mine] + [f"run: {f.evidence}" for f in ran]
            diagnosis.stages[key] = Stage(FAULT, "; ".join(parts), line, parts)
        elif key in fine:
            diagnosis.stages[key] = Stage(OK, fine[key], reading.lines.get(key))
        else:
            faults = [TITLES[k] for k, v in diagnosis.stages.items() if v.status == FAULT]
            reason = (
                stopped
                or (faults and f"the run ended at the {faults[0]} fault")
                or "the run showed nothing about this stage"
            )
            diagnosis.stages[key] = Stage(NOT_CHECKED, f"not reached: {reason}", None)
    asked_gpu = any(
        r["init"] and r["init"]["asked"] == "nccl" or _device_of(r) for r in ranks
    )
    if asked_gpu and not _has_cuda():
        diagnosis.notes.append(
            "this machine has no CUDA GPU: the script's nccl ran as gloo and its cuda "
            "devices as the CPU; the devices each rank asked for are what was checked"
        )
    return diagnosis


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _import_problem(reading: Reading, ranks, script) -> str:
    """A one-line problem when the file crashed before any process could run main."""
    name = reading.path.name
    crashed = [r for r in ranks if (r["error"] or {}).get("import")]
    if crashed:
        e = crashed[0]["error"]
    elif script is not None and not script.get("spawns") and script.get("error"):
        e = script["error"]
    else:
        return ""
    at = f" (line {e['line']})" if e["line"] else ""
    return (
        f"{name} crashed before any process could run main: {e['type']}: {e['message']}"
        f"{at}; fix that, then run the doctor again"
    )


def _literal(value: object) -> object:
    """A command-line argument as a Python literal where it is one ("3" -> 3)."""
    if not isinstance(value, str):
        return value
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return value


def diagnose(
    path: str | os.PathLike,
    world_size: int | None = None,
    *,
    timeout_s: float = TIMEOUT_S,
    args: Sequence = (),
) -> Diagnosis:
    """Diagnose the DDP script at ``path``: read it, run it briefly for real, judge each stage.

    The file either runs as a whole (its ``__main__`` block calls ``mp.spawn``;
    ``args`` become its command-line arguments) or defines the lesson's worker
    ``main(rank, world_size, *args)``, which the doctor spawns on
    ``world_size`` processes. Either way the run is bounded by ``timeout_s``,
    meets on 127.0.0.1 whatever port the script asks for, and leaves no
    process behind. Never raises for a bad file: the result's ``problem``
    says what is wrong and how to fix it.

    Args:
        path: the learner's Python file.
        world_size: processes to run; defaults to this machine's (see
            :func:`ddp_lesson.devices.plan`).
        timeout_s: deadline for the whole run, in seconds.
        args: what follows ``world_size`` in ``main``'s arguments (worker
            file), or the script's command-line arguments.

    Returns:
        A :class:`Diagnosis`; ``print`` it, or read ``.stages`` and ``.faults``.
    """
    reading = read(path)
    if reading.problem:
        return Diagnosis(str(path), problem=reading.problem)
    from . import devices  # torch is imported only once the file is worth running

    try:
        world_size = devices.plan(world_size).world_size
    except (TypeError, ValueError) as error:
        return Diagnosis(str(path), problem=str(error).replace("world_size", "--world-size", 1))
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float) or timeout_s <= 0:
        return Diagnosis(
            str(path), problem=f"timeout must be a positive number of seconds, got {timeout_s!r}"
        )
    if reading.unstartable:
        return _verdict(
            reading, [], None, None, world_size,
            not_run="the file cannot be started as written, so it was not run",
        )  # fmt: skip
    if reading.mode == "worker":
        args = tuple(_literal(a) for a in args)
    ranks, script, error, output = _run(reading, world_size, timeout_s, args)
    problem = _import_problem(reading, ranks, script)
    if problem:
        return Diagnosis(str(path), problem=problem, ranks=ranks, output=output)
    diagnosis = _verdict(reading, ranks, script, error, world_size)
    diagnosis.output = output
    if not ranks and script is None:
        last = output.strip().splitlines()[-1:] or ["nothing"]
        diagnosis.notes.append(f"the doctor could not start {reading.path.name}: {last[0]}")
    return diagnosis


def main(argv: Sequence[str] | None = None) -> int:
    """The ``python -m ddp_lesson doctor`` command; returns the exit code.

    0: every stage OK or not checked; 1: a stage is at fault; 2: the input
    could not be diagnosed (the one-line message says why).
    """
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m ddp_lesson doctor",
        description="Name the stage (and line) of a DDP script that is at fault.",
    )
    parser.add_argument("path", help="a script whose __main__ calls mp.spawn, or a worker file")
    parser.epilog = "ARGS after -- go to main after world_size (a worker file) or to the script."
    parser.add_argument("--world-size", default=None, help="processes (default: the course's)")
    parser.add_argument("--timeout", default=str(TIMEOUT_S), help="deadline in seconds")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    options = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    try:
        world_size = None if options.world_size is None else int(options.world_size)
    except ValueError:
        return _fail(options, f"--world-size must be a whole number, got {options.world_size!r}; "
                     "pass e.g. --world-size 2")
    try:
        timeout_s = float(options.timeout)
    except ValueError:
        return _fail(options, f"--timeout must be a number of seconds, got {options.timeout!r}")
    result = diagnose(options.path, world_size, timeout_s=timeout_s, args=extra)
    if options.json:
        print(result.to_json())
    else:
        print(result)
    if result.problem:
        return 2
    return 1 if result.faults else 0


def _fail(options, message: str) -> int:
    if options.json:
        print(json.dumps({"path": options.path, "ok": False, "problem": message, "stages": {}}))
    else:
        print(f"doctor: {message}")
    return 2


__all__ = ["Diagnosis", "FAULT", "NOT_CHECKED", "OK", "STAGES", "Stage", "diagnose", "main"]
