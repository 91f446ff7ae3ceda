"""Check for ``08_torchrun``'s exercise: one worker, correct under ``mp.spawn`` and ``torchrun``.

The learner writes ``ddp_setup()`` (the group and the device from the
environment ``torchrun`` sets) and ``main(rank, world_size, port, ...)``
(what ``mp.spawn`` starts: it sets that environment itself, then calls
``run_rank``). :func:`check_launchers` runs both ways in real processes
(see :mod:`ddp_lesson.exercises.probes.launchers`): through ``main``, as
``mp.spawn`` starts it on this machine, and with the environment
``torchrun`` gives the processes of two nodes, whose GPUs are simulated so
that the device each process picks can be checked anywhere. Under
``mp.spawn`` the GPUs are real or absent, so the check also compares the
``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` that ``main`` set with what they are
on one machine (the rank and the world size): a ``main`` that gave every
process local rank 0 would put them all on ``cuda:0``.
"""

from __future__ import annotations

import re
from pathlib import Path

from ... import devices, launch
from ...stages import stage
from ..probes import launchers as probes
from . import base
from .base import Result, failed, graded, launch_checked, passed, quote

NAME = "check_launchers"
SPAWNING, GROUP = stage("spawning").title, stage("process_group").title

#: Simulated nodes for the torchrun half of the check.
NODES = 2

#: The variables ``torchrun`` sets that ``ddp_setup`` may read; ``main`` sets them too.
VARIABLES = "RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT"

#: The line that picks a process's device from its place on its node.
DEVICE_LINE = 'device_for(int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"]))'

#: Functions that, raising under the learner's line, show it was picking or selecting a device.
DEVICE_FUNCTIONS = {"device_for", "set_device", "_get_device_index"}

#: Words of errors about a device number no GPU of this node has.
DEVICE_WORDS = re.compile(r"invalid device|device ordinal|device >= 0|device index", re.IGNORECASE)

#: A frame of a traceback: its file, line, function and the line's text.
FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)\n[ \t]*([^\n]*)')


@graded
def check_launchers(path: str | Path, *, reveal: bool = False) -> Result:
    """Run the learner's worker as ``mp.spawn`` starts it and as ``torchrun`` does, and compare.

    Args:
        path: the worker file, e.g. ``"workers/exercise_08.py"``.
        reveal: show the line that fixes a failure now, even on a first try.
    """
    plan = devices.plan()
    got = launch_checked(
        NAME, path, probes.spawned, "ddp_setup() and main()",
        stage=GROUP, expected="ddp_setup() and main() to run",
        explain=lambda error: _spawn_error(error, plan),
    )  # fmt: skip
    local = _locals(got, plan.world_size)
    if local is not None:
        return local
    for r in got:
        wrong = _wrong(r, plan.world_size, str(plan.device(r["rank"])), plan.backend, "mp.spawn")
        if wrong is not None:
            return wrong

    per_node = plan.world_size
    total = NODES * per_node
    try:
        got = base.run_probe(probes.on_node, total, base.worker_path(path), per_node)
    except (launch.LaunchError, ValueError) as error:
        picked = _device_error(error, Path(path), per_node)
        if picked is not None:
            return picked
        return failed(
            NAME,
            stage=GROUP,
            expected=f"ddp_setup() to join the group torchrun describes: {NODES} nodes of "
            f"{per_node} processes",
            happened=_waited(error, total),
            fix="ddp_setup: every process joins once, as its global rank, in a group of all "
            f"{total}; LOCAL_RANK and LOCAL_WORLD_SIZE only number a node's processes",
            answer="init_process_group(backend) with nothing else: it reads RANK, WORLD_SIZE, "
            "MASTER_ADDR and MASTER_PORT from the environment",
        )
    for r in got:
        local = r["rank"] % per_node
        wrong = _wrong(r, total, f"cuda:{local}", "nccl", "torchrun", per_node=per_node)
        if wrong is not None:
            return wrong
    rows = ", ".join(f"rank {r['rank']} -> {r['device']}" for r in got)
    return passed(
        NAME,
        f"under mp.spawn every rank joined one {plan.backend} group on {plan.device(0).type}; "
        f"under torchrun with {NODES} nodes of {per_node} GPU(s) each (simulated), every "
        f"process joined as its global rank and took its local rank's GPU: {rows}.",
    )


def _device_error(error: BaseException, path: Path, per_node: int) -> Result | None:
    """The failure for a process of the two-node run that raised while picking its device.

    Told by the failing rank's traceback: below the learner's last line in
    it, a function that picks or selects a device raised, or the error
    names a device number that does not exist, or that line itself is one
    about the device (and not the one that joins the group).
    """
    rank = getattr(error, "rank", None)
    trace = getattr(error, "rank_traceback", "")
    if rank is None or not trace or isinstance(error, launch.LaunchTimeout):
        return None
    frames = FRAME.findall(trace)
    own = [n for n, f in enumerate(frames) if _same_file(f[0], path)]
    if not own:
        return None
    _, line, function, text = frames[own[-1]]
    below = {f[2] for f in frames[own[-1] + 1 :]}
    about_device = re.search(r"device|cuda", text) and not re.search(
        r"init_process_group|barrier", text
    )
    if not (below & DEVICE_FUNCTIONS or DEVICE_WORDS.search(trace) or about_device):
        return None
    node, local = divmod(rank, per_node)
    gpus = ", ".join(f"cuda:{i}" for i in range(per_node))
    raised = [x for x in trace.strip().splitlines() if x.strip()][-1].strip()
    return failed(
        NAME,
        stage=GROUP,
        expected=f"each process under torchrun ({NODES} nodes of {per_node}) to pick one of its "
        "own node's GPUs",
        happened=f"process {rank}, local rank {local} of node {node} (which has {gpus} and "
        f"nothing else), raised in {function}, while picking its device: {raised}",
        fix=f"{path.name}, line {line} (`{text.strip()}`), in {function}: the device follows "
        "the local rank (LOCAL_RANK: which GPU of its own node a process drives), not the "
        "global rank (RANK)",
        answer=DEVICE_LINE,
    )


def _same_file(name: str, path: Path) -> bool:
    try:
        return Path(name).resolve() == path.resolve()
    except OSError:
        return Path(name).name == path.name


def _waited(error: BaseException, total: int) -> str:
    if isinstance(error, launch.LaunchTimeout):
        return (
            f"the {total} processes did not meet within {base.CHECK_TIMEOUT_S} s: two of them "
            "claimed the same rank, or some waited for more processes than there are"
        )
    return quote(error)


def _shown(value: int | None) -> str:
    return "unset" if value is None else str(value)


def _locals(got: list[probes.SetupReport], size: int) -> Result | None:
    """A failure if ``main`` did not give each process its place on this one machine.

    ``mp.spawn`` starts every process on this machine, so each one's local
    rank is its rank, and the local world size the world size. Without GPUs
    the device does not show a mistake here (every process takes the CPU),
    so the variables themselves are compared.
    """
    if all((r["local_rank"], r["local_world_size"]) == (r["rank"], size) for r in got):
        return None
    said = "; ".join(
        f"process {r['rank']}: LOCAL_RANK={_shown(r['local_rank'])}, "
        f"LOCAL_WORLD_SIZE={_shown(r['local_world_size'])}"
        for r in got
    )
    by_local: dict[int | None, list[int]] = {}
    for r in got:
        by_local.setdefault(r["local_rank"], []).append(r["rank"])
    shared = [(k, v) for k, v in by_local.items() if k is not None and len(v) > 1]
    if shared:
        local, ranks = shared[0]
        said += (
            f". With a GPU for every process, processes {ranks} would all drive "
            f"cuda:{local} (NCCL refuses two ranks on one GPU)"
        )
    return failed(
        NAME,
        stage=SPAWNING,
        expected=f"main to give each of the {size} processes mp.spawn starts its place on this one "
        "machine, as torchrun would: its own LOCAL_RANK, and LOCAL_WORLD_SIZE the number of "
        "processes on the machine",
        happened=f"main set {said}",
        fix="main, where it sets LOCAL_RANK and LOCAL_WORLD_SIZE: mp.spawn starts every process "
        "on this one machine; what are a process's local rank and the local world size there?",
        answer="LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world_size)",
    )


def _unset_variable(error: BaseException) -> Result | None:
    """The failure for a variable init_process_group needed and main did not set, or None."""
    unset = re.search(r"environment variable (\w+) expected, but not set", str(error))
    if not unset:
        return None
    return failed(
        NAME,
        stage=SPAWNING,
        expected=f"main to set every variable ddp_setup reads: {VARIABLES}",
        happened=f"ddp_setup's init_process_group found no {unset[1]} in the environment: "
        "main, which mp.spawn runs in each process before ddp_setup, had not set it",
        fix="main, where it sets the environment before run_rank: which of the variables "
        "torchrun would have set is missing there?",
        answer=f"{unset[1]}=... in main's os.environ.update(...)"
        + (', e.g. MASTER_ADDR="127.0.0.1"' if unset[1] == "MASTER_ADDR" else ""),
    )


def _spawn_error(error: BaseException, plan: devices.Plan) -> Result:
    text = str(error)
    if "not at the port main was given" in text:
        return failed(
            NAME,
            stage=SPAWNING,
            expected="main to have the processes meet at the port it is given",
            happened=quote(error),
            fix="main, where it sets MASTER_PORT: a port written into the code is taken as "
            "soon as another run uses it; which of main's arguments is the port to meet at?",
            answer="MASTER_PORT=str(port)",
        )
    if "ended without sending its report" in text:
        return failed(
            NAME,
            stage=SPAWNING,
            expected="main to set the environment, then call run_rank(...)",
            happened="main returned without calling run_rank",
            fix="main: once the environment is set, a process spawned here must do what every "
            "process does, as the __main__ block has it done under torchrun",
            answer="run_rank(epochs), as main's last line",
        )
    unset = _unset_variable(error)
    if unset is not None:
        return unset
    if "KeyError" in text:
        return failed(
            NAME,
            stage=SPAWNING,
            expected=f"main to set every variable ddp_setup reads: {VARIABLES}",
            happened=quote(error),
            fix="main, before run_rank: which of the variables torchrun would set does it set "
            "itself, and is the one the error names among them?",
            answer="os.environ.update(...) with each of them, as strings, before run_rank",
        )
    if isinstance(error, launch.LaunchTimeout):
        return failed(
            NAME,
            stage=GROUP,
            expected=f"the {plan.world_size} processes mp.spawn starts to meet in one group",
            happened=f"they did not meet within {base.CHECK_TIMEOUT_S} s",
            fix="main: every process must be told one meeting point (MASTER_ADDR, and "
            "MASTER_PORT from the port it is given) and a RANK of its own out of WORLD_SIZE",
            answer='MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), '
            "WORLD_SIZE=str(world_size)",
        )
    return failed(
        NAME,
        stage=SPAWNING,
        expected="main(rank, world_size, port) to run under mp.spawn",
        happened=quote(error),
        fix="the line the error names",
    )


def _wrong(
    r: probes.SetupReport, size: int, device: str, backend: str, how: str, per_node: int = 0
) -> Result | None:
    """A failure if process ``rank`` did not become what ``how`` should have made it."""
    rank = r["rank"]
    where = f"under {how}" + (f", node {r['node']}" if per_node else "")
    if (r["rank_in_group"], r["size_of_group"]) != (rank, size):
        return failed(
            NAME,
            stage=GROUP,
            expected=f"process {rank} {where} to join as global rank {rank} of {size}",
            happened=f"it joined as rank {r['rank_in_group']} of {r['size_of_group']}",
            fix="ddp_setup: the rank in the group is RANK, the global rank (init_process_group "
            "reads it from the environment); LOCAL_RANK only numbers a node's processes",
        )
    if r["device"] != device:
        extra = ""
        if per_node:
            extra = (
                f" (local rank {r['local_rank']}; node {r['node']} has "
                f"{', '.join(f'cuda:{i}' for i in range(per_node))} and nothing else)"
            )
        return failed(
            NAME,
            stage=GROUP,
            expected=f"process {rank} {where} to use {device}",
            happened=f"ddp_setup chose {r['device']}{extra}",
            fix="ddp_setup, where it picks the device: the device follows this node's numbers, "
            "LOCAL_RANK (which GPU of its own node a process drives) and LOCAL_WORLD_SIZE (how "
            "many processes share the node's GPUs), not the global RANK and WORLD_SIZE"
            + (
                f"; it chose the CPU on a node with a GPU for each of its {per_node} "
                "processes: against how many processes did it count the GPUs?"
                if per_node and r["device"] == "cpu" and device != "cpu"
                else ""
            ),
            answer=DEVICE_LINE,
        )
    selection = selection_wrong(NAME, r, device, where) if per_node else None
    if selection is not None:
        return selection
    asked = r["asked_backend"] if per_node else r["backend"]
    if asked != backend:
        return failed(
            NAME,
            stage=GROUP,
            expected=f"backend {backend!r} {where} ({device})",
            happened=f"backend {asked!r}",
            fix='ddp_setup: "nccl" for a GPU, "gloo" for the CPU',
        )
    return None


def selection_wrong(check: str, r: probes.SetupReport, device: str, where: str) -> Result | None:
    """``check``'s failure if a process on a GPU did not select it (set_device) before the
    group, or None."""
    rank = r["rank"]
    if device in r["set_device"] and device not in r["set_before_group"]:
        return failed(
            check,
            stage=GROUP,
            expected=f"ddp_setup to select {device} (torch.cuda.set_device) before the group",
            happened=f"process {rank} {where} called set_device({device!r}) only after "
            "init_process_group",
            fix="ddp_setup: in which order does it select the GPU and join the group? Calls that "
            "name no device (the group's own barrier among them) use the GPU selected when "
            "they run",
            answer='torch.cuda.set_device(device) when device.type == "cuda", before '
            "init_process_group",
        )
    if device not in r["set_device"]:
        return failed(
            check,
            stage=GROUP,
            expected=f"ddp_setup to select {device} (torch.cuda.set_device) before the group",
            happened=f"process {rank} {where} selected {r['set_device'] or 'nothing'}",
            fix="ddp_setup, before init_process_group: a process on a GPU must select that GPU "
            "before it joins the group (barrier() and other calls that name no device use it)",
            answer='torch.cuda.set_device(device) when device.type == "cuda", before '
            "init_process_group",
        )
    return None
