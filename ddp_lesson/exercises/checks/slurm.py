"""Checking a SLURM batch script against the worker it starts (``09_checkpoints``)."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path

from ...stages import stage
from .base import Result, failed, passed

NAME = "check_slurm"
SPAWNING = stage("spawning").title

#: One ``#SBATCH`` option, as sbatch reads it: ``--name=value``, ``--name value``, or a
#: flag ``--name`` alone (a ``#`` after it starts a comment).
SBATCH_OPTION = re.compile(r"^#SBATCH[ \t]+--([\w-]+)(?:[= \t]+([^\s#]\S*))?", re.M)


def _plain(word: str) -> str:
    """A shell word with its quotes and the braces of ``${NAME}`` taken off: ``$NAME``."""
    return re.sub(r"\$\{(\w+)\}", r"$\1", word.strip("\"'"))


#: torch 2.13's torchrun keeps one store for a job's rendezvous rounds; a
#: restarted group then meets the old round's entries (09_checkpoints).
FRESH_STORE = re.compile(r"\bTORCH_DISABLE_SHARE_RDZV_TCP_STORE=1\b")


def _restart_problems(text: str, max_restarts: object) -> list[str]:
    """What a job that allows restarts is missing: a fresh store for every round.

    The variable counts only where torchrun sees it: set by a command before
    the ``srun torchrun`` line, or on that line itself.
    """
    lines = text.splitlines()
    upto = next((i for i, line in enumerate(lines) if _runs_torchrun(line)), len(lines) - 1)
    commands = "\n".join(line for line in lines[: upto + 1] if not line.lstrip().startswith("#"))
    if int(max_restarts or 0) == 0 or FRESH_STORE.search(commands):
        return []
    later = FRESH_STORE.search("\n".join(lines[upto + 1 :]))
    return [
        f"--max-restarts={max_restarts} without TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in "
        "torchrun's environment"
        + (" (it is set only after the srun line, once torchrun has run)" if later else "")
        + ": torch 2.13's torchrun reuses one store and a restarted group can wait for ever "
        "(export it before srun)"
    ]


def _runs_torchrun(line: str) -> bool:
    """True for a command line (not a comment) that runs torchrun."""
    return "torchrun" in line and not line.lstrip().startswith("#")


def check_slurm(path: str | os.PathLike, script: str, parse_args: Callable) -> Result:
    """Check that a SLURM batch script starts ``script`` the way its worker expects.

    Reads the ``#SBATCH`` options and the ``srun torchrun ...`` line, parses
    that line with torchrun's own argument parser and the script's
    arguments with the worker's ``parse_args``, and checks the pieces that
    must agree: one torchrun per node, the nodes SLURM allocates, one rank
    per GPU, and a c10d rendezvous every node can reach.

    Args:
        path: the batch script.
        script: the worker file torchrun should run, e.g. ``"workers/stage_09.py"``.
        parse_args: the worker's argument parser, called with the script's arguments.

    Returns:
        A :class:`Result`: passed, with a few lines saying what the job will
        start; or failed, listing every piece that does not agree.
    """
    text = Path(path).read_text().replace("\\\n", " ")
    sbatch = {name: _plain(value) for name, value in SBATCH_OPTION.findall(text)}
    parsed = _torchrun_line(path, text)
    if isinstance(parsed, Result):
        return parsed
    given, problems = parsed
    if given.training_script != script:
        problems.append(f"torchrun runs {given.training_script}, not {script}")
    try:
        with contextlib.redirect_stderr(io.StringIO()) as said, _program_named(script):
            parse_args(given.training_script_args)
    except SystemExit:
        problems.append(f"{script} rejects its arguments: {said.getvalue().strip()}")
    problems += _placement_problems(sbatch, given)
    problems += _restart_problems(text, given.max_restarts)
    if problems:
        return failed(
            NAME,
            stage=SPAWNING,
            expected=f"{path} to start {script} the way its worker expects",
            happened="\n".join(f"- {p}" for p in problems),
            fix="the lines named above",
        )
    return passed(
        NAME,
        "\n"
        + "\n".join(
            [
                f"nodes: {sbatch.get('nodes')}, one torchrun on each (srun, --ntasks-per-node=1)",
                f"ranks per node: one per GPU ({_gpu_count(sbatch)} GPUs, --nproc-per-node="
                f"{given.nproc_per_node})",
                f"rendezvous: c10d at {given.rdzv_endpoint}, job id {given.rdzv_id}",
                f"each rank runs: {script} {' '.join(given.training_script_args)}",
                f"restarts allowed: {given.max_restarts}",
            ]
        ),
    )


@contextlib.contextmanager
def _program_named(script: str):
    """Inside the block, ``sys.argv[0]`` is ``script``: argparse names it in its usage line."""
    kept = sys.argv[:]
    sys.argv[:] = [script]
    try:
        yield
    finally:
        sys.argv[:] = kept


def _gpu_count(sbatch: dict[str, str]) -> str | None:
    """GPUs per node from ``#SBATCH --gpus-per-node`` ("a100:4" is 4 GPUs of type a100)."""
    gpus = sbatch.get("gpus-per-node")
    return gpus.rsplit(":", 1)[-1] if gpus else None


def _placement_problems(sbatch: dict[str, str], given) -> list[str]:
    """What does not agree in where the ranks run: nodes, ranks per node, the rendezvous."""
    problems = []
    if sbatch.get("ntasks-per-node") != "1":
        problems.append(
            "#SBATCH --ntasks-per-node=1 is missing: srun must start one torchrun "
            "per node, which then starts that node's ranks"
        )
    if _plain(given.nnodes) not in ("$SLURM_NNODES", sbatch.get("nodes")):
        problems.append(
            f"--nnodes={given.nnodes} is not the allocation's --nodes (use --nnodes=$SLURM_NNODES)"
        )
    gpus, count = sbatch.get("gpus-per-node"), _gpu_count(sbatch)
    if given.nproc_per_node not in ("gpu", count):
        problems.append(
            f"--nproc-per-node={given.nproc_per_node} is not one rank per GPU "
            f"(#SBATCH --gpus-per-node={gpus}; or use --nproc-per-node=gpu)"
        )
    if given.rdzv_backend != "c10d" or ":" not in given.rdzv_endpoint:
        problems.append("use --rdzv-backend=c10d and --rdzv-endpoint=HOST:PORT of one node")
    elif _loopback(given.rdzv_endpoint) and sbatch.get("nodes", "1") != "1":
        problems.append(
            f"--rdzv-endpoint={given.rdzv_endpoint} is this machine's own loopback address: "
            "each node's torchrun would wait there alone; give the host name of one node "
            "every node can reach (the job's first node)"
        )
    return problems


def _loopback(endpoint: str) -> bool:
    """True for a ``HOST:PORT`` whose host is a machine's own loopback address.

    >>> [_loopback(e) for e in ("localhost:29500", "127.0.0.1:1", "[::1]:2", "$head:29500")]
    [True, True, True, False]
    """
    host = _plain(endpoint).rsplit(":", 1)[0].strip("[]").lower()
    return host in ("localhost", "::1", "0.0.0.0") or host.startswith("127.")


def _torchrun_line(path: str | os.PathLike, text: str):
    """The ``srun torchrun ...`` line parsed by torchrun's own parser, and what is wrong with it.

    Returns ``(arguments, problems)``, or a failed :class:`Result` when there
    is no such line or torchrun rejects it.
    """
    from torch.distributed.run import get_args_parser

    calls = [shlex.split(line, comments=True) for line in text.splitlines() if _runs_torchrun(line)]
    if not calls:
        return failed(
            NAME,
            stage=SPAWNING,
            expected="an 'srun torchrun ...' line",
            happened=f"{path} has no torchrun line",
            fix="start the ranks with 'srun torchrun ...'",
        )
    words = calls[0]
    problems = []
    if words[0] != "srun":
        problems.append("torchrun is not started by srun, so it runs on the first node only")
    try:
        with contextlib.redirect_stderr(io.StringIO()) as said:
            given = get_args_parser().parse_args(words[words.index("torchrun") + 1 :])
    except SystemExit:
        return failed(
            NAME,
            stage=SPAWNING,
            expected="arguments torchrun accepts",
            happened=f"torchrun rejects its arguments: {said.getvalue().strip()}",
            fix="the srun torchrun line",
        )
    return given, problems
