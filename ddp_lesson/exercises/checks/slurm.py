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

#: One ``#SBATCH`` option, as sbatch reads it: ``--name=value``, ``--name value``, a
#: flag ``--name`` alone (a ``#`` after it starts a comment), or a short option with
#: its value after it or after a space (``-N2``, ``-N 2``).
SBATCH_OPTION = re.compile(
    r"^#SBATCH[ \t]+(?:--([\w-]+)(?:[= \t]+([^\s#]\S*))?|-([A-Za-z])[ \t]*([^\s#]\S*)?)", re.M
)

#: sbatch's short options that take a value, by the long name they stand for.
SHORT_OPTIONS = {
    "N": "nodes",
    "n": "ntasks",
    "G": "gpus",
    "t": "time",
    "J": "job-name",
    "p": "partition",
    "c": "cpus-per-task",
    "A": "account",
    "C": "constraint",
    "q": "qos",
    "o": "output",
    "e": "error",
    "w": "nodelist",
    "D": "chdir",
}

#: A shell word that sets a variable for the command after it: ``NAME=VALUE``.
ASSIGNMENT = re.compile(r"^[A-Za-z_]\w*=")


def _sbatch_options(text: str) -> dict[str, str]:
    """The ``#SBATCH`` options by their long names; a later one overrides, as in sbatch.

    >>> _sbatch_options("#SBATCH -N2\\n#SBATCH -J lesson\\n#SBATCH --gres gpu:4  # per node")
    {'nodes': '2', 'job-name': 'lesson', 'gres': 'gpu:4'}
    """
    options = {}
    for name, value, letter, short_value in SBATCH_OPTION.findall(text):
        if letter:
            name, value = SHORT_OPTIONS.get(letter, letter), short_value
        options[name] = _plain(value)
    return options


def _srun_options(text: str) -> dict[str, str]:
    """The options of the ``srun`` that starts torchrun, by their long names.

    srun's own options (between ``srun`` and ``torchrun``) set the step's
    placement, over the job's ``#SBATCH`` ones.

    >>> _srun_options("srun -N2 --ntasks-per-node 1 --gpus-per-node=4 torchrun x.py")
    {'nodes': '2', 'ntasks-per-node': '1', 'gpus-per-node': '4'}
    """
    line = next((line for line in text.splitlines() if _runs_torchrun(line)), "")
    words = shlex.split(line, comments=True)
    if "srun" not in words or "torchrun" not in words:
        return {}
    words = words[words.index("srun") + 1 : words.index("torchrun")]
    options, at = {}, 0
    while at < len(words):
        word, value = words[at], None
        if word.startswith("--"):
            name, _, value = word[2:].partition("=")
            if not value and at + 1 < len(words) and not words[at + 1].startswith("-"):
                at, value = at + 1, words[at + 1]
        elif word.startswith("-") and len(word) > 1:
            name, value = SHORT_OPTIONS.get(word[1], word[1]), word[2:]
            if not value and at + 1 < len(words) and not words[at + 1].startswith("-"):
                at, value = at + 1, words[at + 1]
        else:
            break  # (a command before torchrun, such as env: srun's options have ended)
        options[name] = _plain(value or "")
        at += 1
    return options


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
    before = [line for line in lines[:upto] if not line.lstrip().startswith("#")]
    every = any(re.match(r"\s*set\s+-a\b", line) for line in before)  # exports all after it
    exported = [line for line in before if FRESH_STORE.search(line) and (every or _exports(line))]
    if int(max_restarts or 0) == 0 or exported or FRESH_STORE.search(lines[upto]):
        return []
    later = FRESH_STORE.search("\n".join(lines[upto + 1 :]))
    unexported = any(FRESH_STORE.search(line) for line in before)
    return [
        f"--max-restarts={max_restarts} without TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 in "
        "torchrun's environment"
        + (" (it is set only after the srun line, once torchrun has run)" if later else "")
        + (
            " (it is set before srun without export, so it stays in the batch shell and "
            "srun never passes it on)"
            if unexported
            else ""
        )
        + ": torch 2.13's torchrun reuses one store and a restarted group can wait for ever "
        "(export it before srun)"
    ]


def _exports(line: str) -> bool:
    """True for a shell line that puts its variables in the environment of what follows."""
    return bool(re.match(r"\s*(export|declare\s+-x)\b", line))


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
    sbatch = _sbatch_options(text)
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
    problems += _placement_problems({**sbatch, **_srun_options(text)}, given)
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
                f"ranks per node: one per GPU ({_gpus_said(sbatch)}, --nproc-per-node="
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


def _gpu_request(sbatch: dict[str, str]) -> tuple[str | None, str | None]:
    """The GPUs per node the job asks SLURM for, and the option that asks for them.

    ``--gpus-per-node`` and ``--gres=gpu[:type]:N`` count per node;
    ``--gpus-per-task`` per task; ``--gpus`` for the whole job, shared out
    over ``--nodes``. The count is None where the options do not tell it;
    both are None where no GPU is asked for.

    >>> _gpu_request({"gres": "gpu:a100:4,nvme"}), _gpu_request({"gpus": "8", "nodes": "2"})
    (('4', '--gres=gpu:a100:4,nvme'), ('4', '--gpus=8 over --nodes=2'))
    >>> _gpu_request({"gpus": "8"}), _gpu_request({"gres": "gpu"}), _gpu_request({})
    ((None, '--gpus=8'), ('1', '--gres=gpu'), (None, None))
    """
    if sbatch.get("gpus-per-node"):
        return _count(sbatch["gpus-per-node"]), f"--gpus-per-node={sbatch['gpus-per-node']}"
    gres = [g for g in sbatch.get("gres", "").split(",") if g.split(":")[0] == "gpu"]
    if gres:  # gpu, gpu:N or gpu:type:N; no count is one GPU
        return (_count(gres[0]) if ":" in gres[0] else "1"), f"--gres={sbatch['gres']}"
    if sbatch.get("gpus-per-task"):
        count, tasks = _count(sbatch["gpus-per-task"]), sbatch.get("ntasks-per-node", "1")
        per_node = str(int(count) * int(tasks)) if count and tasks.isdigit() else None
        return per_node, f"--gpus-per-task={sbatch['gpus-per-task']}"
    if sbatch.get("gpus"):
        total, nodes = _count(sbatch["gpus"]), sbatch.get("nodes", "")
        if total and nodes.isdigit() and int(nodes) and int(total) % int(nodes) == 0:
            return str(int(total) // int(nodes)), f"--gpus={sbatch['gpus']} over --nodes={nodes}"
        return None, f"--gpus={sbatch['gpus']}"
    return None, None


def _count(gpus: str) -> str | None:
    """The number in a ``[type:]N`` GPU request ("a100:4" is 4 GPUs of type a100)."""
    count = gpus.rsplit(":", 1)[-1]
    return count if count.isdigit() else None


def _gpus_said(sbatch: dict[str, str]) -> str:
    """The job's GPUs in words: ``"4 GPUs per node from --gres=gpu:4"``."""
    count, source = _gpu_request(sbatch)
    return f"{count} GPUs per node from {source}" if count else f"GPUs from {source}"


def _placement_problems(sbatch: dict[str, str], given) -> list[str]:
    """What does not agree in where the ranks run: nodes, ranks per node, the rendezvous."""
    problems = []
    tasks = sbatch.get("ntasks-per-node")
    if tasks is None and sbatch.get("ntasks") and sbatch.get("ntasks") == sbatch.get("nodes"):
        tasks = "1"  # as many tasks as nodes: one on each
    if tasks is None:
        problems.append(
            "--ntasks-per-node=1 is missing (in #SBATCH or on the srun line): srun must start "
            "one torchrun per node, which then starts that node's ranks"
        )
    elif tasks != "1":
        problems.append(
            f"--ntasks-per-node={tasks}: srun would start {tasks} torchruns on each node, each "
            "starting all of that node's ranks; one torchrun per node must start them"
        )
    # (SLURM sets the allocation's node count under both names)
    if _plain(given.nnodes) not in ("$SLURM_NNODES", "$SLURM_JOB_NUM_NODES", sbatch.get("nodes")):
        problems.append(
            f"--nnodes={given.nnodes} is not the allocation's --nodes (use --nnodes=$SLURM_NNODES)"
        )
    problems += _gpu_problems(sbatch, given.nproc_per_node)
    if given.rdzv_backend != "c10d" or ":" not in given.rdzv_endpoint:
        problems.append("use --rdzv-backend=c10d and --rdzv-endpoint=HOST:PORT of one node")
    elif _loopback(given.rdzv_endpoint) and sbatch.get("nodes", "1") != "1":
        problems.append(
            f"--rdzv-endpoint={given.rdzv_endpoint} is this machine's own loopback address: "
            "each node's torchrun would wait there alone; give the host name of one node "
            "every node can reach (the job's first node)"
        )
    return problems


def _gpu_problems(sbatch: dict[str, str], nproc_per_node: str) -> list[str]:
    """What does not agree between the GPUs the job asks for and the ranks on each node."""
    count, source = _gpu_request(sbatch)
    if source is None or count == "0":
        return [
            "the job asks SLURM for no GPU (no #SBATCH --gpus-per-node, --gres=gpu:N, --gpus "
            f"or --gpus-per-task), so SLURM allocates it none and --nproc-per-node="
            f"{nproc_per_node} has no GPU to put a rank on (ask with #SBATCH --gpus-per-node=N)"
        ]
    if nproc_per_node == "gpu" or nproc_per_node == count:
        return []
    # SLURM's own count of the node's GPUs (SLURM_GPUS_PER_NODE only when it is a number)
    per_node = sbatch.get("gpus-per-node", "")
    if _plain(nproc_per_node) in ("$SLURM_GPUS_ON_NODE",) + (
        ("$SLURM_GPUS_PER_NODE",) if per_node.isdigit() else ()
    ):
        return []
    if count is None:
        return [
            f"--nproc-per-node={nproc_per_node}: #SBATCH {source} does not say how many GPUs "
            "each node gets (ask with --gpus-per-node=N, or use --nproc-per-node=gpu)"
        ]
    return [
        f"--nproc-per-node={nproc_per_node} is not one rank per GPU (#SBATCH {source} is "
        f"{count} GPUs per node; or use --nproc-per-node=gpu)"
    ]


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
    # NAME=VALUE words before a command only set its environment (bash), and env
    # runs the command after them: the launcher is the first other word.
    words = calls[0]
    launcher = next((w for w in words if not ASSIGNMENT.match(w) and w != "env"), "")
    problems = []
    if launcher != "srun":
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
