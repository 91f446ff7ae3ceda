"""What a process claims as it joins the group: its rank, its world size, where it meets.

:func:`.probe_group.recorded_init` asks here before it joins the doctor's store:
:func:`claimed_place` (the rank and world size, given or torchrun's),
:func:`check_claim` (a rank outside the world, a world larger than the processes
started, a world counting machines that never join), :func:`claimed_twice` (a rank
two processes claimed: the start's fault when every process was given that rank),
:func:`defaulted` (a torchrun variable this process lacks, read with a default in
the learner's file),
:func:`meeting_place` (the address or file a group is told to meet at) and
:func:`loopback_store`: a store the script hosts itself
(``dist.TCPStore(..., is_master=True)``) listens on the loopback address
only (torch's listens on every interface, whatever host it is given), and
one whose port is taken is named with who may hold it.
"""

from __future__ import annotations

import linecache
import os
import re

from .probe_state import learner_line, process_state, stop_at_stage, wants_torchrun


def claimed_place(record, rank: object, world_size: object) -> tuple:
    """The rank and world size claimed: as given, else torchrun's ``RANK`` and ``WORLD_SIZE``."""
    if record.script and not record.spawns and os.getpid() == process_state["pid"]:
        # run as Python, the script joins a group itself before starting any process
        missing = [
            name
            for name, value in (("RANK", rank), ("WORLD_SIZE", world_size))
            if value in (-1, None) and name not in os.environ
        ]
        if missing:
            wants_torchrun(missing[0], learner_line())
    rank = int(os.environ.get("RANK", -1)) if rank in (-1, None) else rank
    world_size = int(os.environ.get("WORLD_SIZE", -1)) if world_size in (-1, None) else world_size
    return rank, world_size


def check_claim(rank, world_size) -> None:
    """Stop for a rank outside the world, or a world larger than the processes started."""
    nprocs = process_state.get("nprocs", 0)
    if world_size is None or world_size < 1 or rank is None or not 0 <= rank < world_size:
        _swapped(rank, world_size, nprocs)
        _numbered_apart(rank, world_size)
        why, line = defaulted("WORLD_SIZE")
        if not why:  # (a WORLD_SIZE read with a default says more)
            _smaller_world(rank, world_size, nprocs)
        stop_at_stage(
            "process_group",
            f"init_process_group got rank={rank}, world_size={world_size}: the rank must "
            f"be in 0..world_size-1 ({why or 'pass rank=rank, world_size=world_size'})",
            line,
        )
    if nprocs and world_size > nprocs:
        _nodes_world(world_size, nprocs)
        line = (process_state["record"].init or {}).get("line")
        told = f"init_process_group (line {line})" if line else "init_process_group"
        stop_at_stage(
            "spawning",
            f"only {nprocs} process(es) were started for a world of {world_size}, the "
            f"world_size {told} was given: the group would wait {_how_long()} for the missing "
            "ranks; the processes started and the world_size given must be one number "
            "(e.g. nprocs=world_size, from the same variable)",
        )


def _smaller_world(rank, world_size, nprocs: int) -> None:
    """Stop when the world given is smaller than the processes started, so the last ranks
    fall outside it; name the file's count of GPUs where this machine has none to count."""
    if not (isinstance(world_size, int) and 0 < world_size < nprocs and rank in range(nprocs)):
        return
    import torch

    lines = linecache.getlines(process_state["settings"].file)
    counted = next(
        (n for n, t in enumerate(lines, 1) if "device_count(" in t.split("#")[0]), None
    )
    gpus = (
        f"; the file counts GPUs (line {counted}: `{lines[counted - 1].strip()}`), and "
        f"torch.cuda.device_count() answers {torch.cuda.device_count()} on this machine"
        if counted else ""
    )  # fmt: skip
    stop_at_stage(
        "process_group",
        f"init_process_group got rank={rank}, world_size={world_size}, but {nprocs} processes "
        f"were started, so rank {rank} falls outside the world{gpus}: the world size given to "
        "every process must count the processes started (one number for both, e.g. "
        "nprocs=world_size)",
        counted,
    )


#: Words a file uses for the number of machines, or a machine's place among them.
NODE_WORDS = re.compile(r"num_?nodes|n_?nodes|node_?count|node_?rank", re.IGNORECASE)


def _nodes_world(world_size: int, nprocs: int) -> None:
    """Stop when the world given counts nodes this one machine does not have: a file that
    counts machines, whose world is a multiple of the processes started here."""
    lines = linecache.getlines(process_state["settings"].file)
    if world_size % nprocs or not any(NODE_WORDS.search(t.split("#")[0]) for t in lines):
        return
    nodes = world_size // nprocs
    made = next(
        (n for n, t in enumerate(lines, 1)
         if NODE_WORDS.search(t.split("#")[0]) and "*" in t.split("#")[0]),
        None,
    )  # fmt: skip
    said = next(
        (n for n, t in enumerate(lines, 1)
         if NODE_WORDS.search(t) and re.search(rf"[=:(,]\s*{nodes}\b", t.split("#")[0])),
        None,
    )  # fmt: skip
    init = (process_state["record"].init or {}).get("line")
    code = [t.split("#")[0].strip() for t in lines]
    where = f" (line {made}: `{code[made - 1]}`)" if made else ""
    count = f" (line {said}: `{code[said - 1]}`)" if said else ""
    stop_at_stage(
        "process_group",
        f"init_process_group (line {init}) was given world_size={world_size}, a world "
        f"of {nodes} machines with {nprocs} process(es) each{where}, but this machine "
        f"started {nprocs}, and no other machine joins: the group would wait {_how_long()} for "
        f"ranks {nprocs}..{world_size - 1}. Run on one machine, the number of machines must "
        f"be 1{count}; on {nodes}, start the script on each with its own node rank",
        made or init,
    )


def _numbered_apart(rank, world_size) -> None:
    """Stop when a process the script started with ``multiprocessing.Process`` was given, as
    its first argument, the rank it claims, outside the world: the start numbers them wrong."""
    first, runs = process_state.get("started_with") or (None, None)
    if runs is None or first != rank or isinstance(first, bool) or not isinstance(rank, int):
        return
    pooled = process_state.get("pool_task")
    how = "sent a Pool task" if pooled else "started with multiprocessing.Process"
    which = "tasks" if pooled else "processes the loop starts"
    stop_at_stage(
        "spawning",
        f"this process was {how} and given {rank} as its first argument, which {runs} "
        f"passes to init_process_group as the rank; in a world of {world_size} the ranks "
        f"are 0..{world_size - 1}: number the {which} from 0 (range(world_size), or "
        "enumerate without start=)",
    )


def _how_long() -> str:
    """How long a group waits for ranks that never come: its own timeout, if it was given."""
    limit, _ = process_state.get("group_timeout") or (None, None)
    return f"until its {limit:g} s timeout" if limit is not None else "for ever"


def _swapped(rank, world_size, nprocs: int) -> None:
    """Stop when the world size given is this process's number and the rank the number of
    processes: the function takes its arguments in another order than the start gives."""
    index, fn = process_state.get("entry") or (None, None)
    if fn is None or index is None or world_size != index or rank != nprocs:
        return
    name = getattr(fn, "__name__", "main")
    code = getattr(fn, "__code__", None)
    at = f" (line {code.co_firstlineno})" if code is not None else ""
    stop_at_stage(
        "spawning",
        f"init_process_group got world_size={world_size}, which is this process's number, "
        f"and rank={rank}, the number of processes: {name}{at} takes its parameters in "
        "another order than they are passed (the process number first, then the args "
        f"given). Put rank first: def {name}(rank, ...)",
    )


def claimed_twice(rank: int, from_env: bool = False) -> None:
    """Stop: a second process claimed ``rank``; a rank given alike to every process the
    script started with ``multiprocessing.Process`` is the start's fault. ``from_env``:
    init_process_group was given no rank, so it read ``RANK`` from the environment."""
    first, runs = process_state.get("started_with") or (None, None)
    if runs is None:
        why, line = defaulted("RANK")
        _, fn = process_state.get("entry") or (None, None)
        name = getattr(fn, "__name__", None)
        given = f"the number mp.spawn passes {name} first" if name else "the one mp.spawn gives"
        if from_env and name and not why:
            why = (
                f"none gave rank=, so each read RANK from its environment, and two found "
                f"{rank} there (a RANK set before the processes start is inherited by each); "
                f"pass rank=: {given} (on several nodes, plus the node's first rank)"
            )
        why = why or f"{given}, or torchrun's RANK"
        stop_at_stage(
            "process_group",
            f"two processes both claimed rank {rank} in init_process_group: each process "
            f"must pass its own rank ({why})",
            line,
        )
    if isinstance(first, int) and not isinstance(first, bool) and first == rank:
        pooled = process_state.get("pool_task")
        who = (
            "tasks sent to the multiprocessing.Pool" if pooled
            else "processes started with multiprocessing.Process"
        )  # fmt: skip
        each = "one of range(world_size) per task" if pooled else "its number in the loop"
        stop_at_stage(
            "spawning",
            f"the {who} were each given {rank} as their first argument, which {runs} passes "
            f"to init_process_group as the rank, so two processes both claimed rank {rank}; "
            f"give each its own rank (one number per process of the world: on one machine, "
            f"{each}{'' if pooled else ' that starts them'})",
        )
    stop_at_stage(
        "process_group",
        f"two processes both claimed rank {rank} in init_process_group: each process "
        "must pass its own rank (for example the number of the process in the loop that "
        "starts it)",
    )


def defaulted(name: str) -> tuple[str, int | None]:
    """Where the learner's file reads torchrun's ``name`` with a default, when this process
    has no ``name`` in its environment: the default stood in for it (text and line, or
    "" and None)."""
    if name in os.environ:
        return "", None
    path = process_state["settings"].file
    # os.environ.get("RANK", ...), os.getenv("RANK", ...), or a helper: env_int("RANK", 0)
    given_default = re.compile(rf"""(get|getenv)\(|\w\(\s*["']{name}["']\s*,""")
    for number, text in enumerate(linecache.getlines(path), 1):
        code = text.split("#")[0]
        if any(q + name + q in code for q in "\"'") and given_default.search(code):
            entry = process_state.get("entry")  # (the number its start handed the function)
            given = (
                f"; its start handed {getattr(entry[1], '__name__', 'its function')} its "
                f"number first (this process: {entry[0]}): use that"
                if entry and name in ("RANK", "LOCAL_RANK") else ""
            )  # fmt: skip
            return (
                f"this process has no {name} in its environment, so line {number} "
                f"(`{code.strip()}`) gave its default; set {name} for every process the "
                f"script starts, or pass the value in{given}"
            ), number
    return "", None


def meets_unset(given: dict) -> None:
    """Stop when a process is to meet through its environment (``env://``, the default) but
    lacks ``MASTER_ADDR`` or ``MASTER_PORT`` there, which the file sets elsewhere (in one
    rank's code, or after the processes started): torch raises at that call."""
    method = given.get("init_method")
    if given.get("store") is not None or method not in (None, "env://"):
        return
    lines = linecache.getlines(process_state["settings"].file)
    # (only where the file sets them itself: a worker the course's launch runs gets them there)
    missing = [
        name for name in ("MASTER_ADDR", "MASTER_PORT")
        if name not in os.environ and any(name in t.split("#")[0] for t in lines)
    ]  # fmt: skip
    if not missing:
        return
    record = process_state["record"]
    line = (record.init or {}).get("line")
    stop_at_stage(
        "process_group",
        f"rank {record.claimed_rank} reached init_process_group (line {line}), which meets "
        f"through the environment (env://), with no {' and no '.join(missing)} in its own: "
        f"run as written, torch raises at that line ('environment variable {missing[0]} "
        "expected, but not set'). Every process needs both, set the same before it calls "
        "init_process_group (set in one rank's code only, they exist in that process alone)",
        line,
    )


def meeting_place(init_method: object) -> str:
    """Where a group is told to meet: ``init_method``'s address, or the environment's."""
    if isinstance(init_method, str) and init_method.startswith("tcp://"):
        return init_method.removeprefix("tcp://").split("?")[0]
    if isinstance(init_method, str) and init_method.startswith("file://"):
        return "file://" + os.path.abspath(init_method.removeprefix("file://").split("?")[0])
    return f"{os.environ.get('MASTER_ADDR', '?')}:{os.environ.get('MASTER_PORT', '?')}"


def meeting_twice(where: str) -> str:
    """Two of the script's starts of processes whose groups meet at once, at one address."""
    return (
        f"two groups the script started at once both meet at {where}: run for real, the "
        "second group's rank 0 cannot listen on the port the first one "
        "holds (EADDRINUSE), or its ranks join the wrong group; give each group a port of "
        "its own, or run the groups one after another"
    )


#: The hosts whose store is moved to the loopback address, and the address it is moved to.
LOOPBACK_FOR = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "127.0.0.1": "127.0.0.1",
                "localhost": "127.0.0.1", "::": "::1", "::1": "::1"}  # fmt: skip


def loopback_store(tcp_store: type) -> type:
    """``dist.TCPStore`` in a diagnosed process: a store it hosts listens on loopback only.

    torch's store server listens on every interface (``:::PORT``) whatever
    ``host_name`` says. Given a socket bound to the loopback address
    (``master_listen_fd``, as the launch's own store is), it listens there;
    its clients, which connect to ``host_name``, still reach it (``0.0.0.0``
    and ``::`` reach the loopback address). A host of another machine's
    address is left as torch would use it.
    """
    import socket

    class LoopbackTCPStore(tcp_store):
        __doc__ = tcp_store.__doc__

        def __init__(self, host_name, port, world_size=None, is_master=False, *rest, **kwargs):
            rest = list(rest)
            given = rest[3] if len(rest) > 3 else kwargs.get("master_listen_fd")
            address = LOOPBACK_FOR.get(str(host_name))
            if is_master and given is None and address is not None:
                family = socket.AF_INET6 if ":" in address else socket.AF_INET
                try:
                    listener = socket.create_server((address, port), family=family)
                except OSError as taken:
                    _store_port_taken(port, taken)
                    raise
                port = listener.getsockname()[1]
                if len(rest) > 3:
                    rest[3] = listener.detach()
                else:
                    kwargs["master_listen_fd"] = listener.detach()
            super().__init__(host_name, port, world_size, is_master, *rest, **kwargs)

    LoopbackTCPStore.__name__ = LoopbackTCPStore.__qualname__ = tcp_store.__name__
    LoopbackTCPStore.__module__ = tcp_store.__module__
    return LoopbackTCPStore


def _store_port_taken(port: int, error: OSError) -> None:
    """Stop where a store this process was to host finds its port taken: say who may hold it."""
    import errno

    if error.errno != errno.EADDRINUSE:
        return
    line = learner_line(2)
    stop_at_stage(
        "process_group",
        f"the TCPStore made at line {line} with is_master=True could not listen on port {port}: "
        "another process already does. Only one process of a group hosts its store (rank 0: "
        "is_master=(rank == 0)) and the others connect to it with is_master=False; when "
        "every rank passes is_master=True, the second finds the first's store there (else a "
        "program of an earlier run still holds the port)",
        line,
    )
