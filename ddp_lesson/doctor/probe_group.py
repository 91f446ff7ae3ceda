"""The process group under the probe: init_process_group, collectives, destroy_process_group.

:func:`.probe.install` puts the recording versions here in place of torch's:

* :func:`recorded_init` records the rank and world size claimed and the
  backend asked for, then joins the group at the doctor's own store on
  127.0.0.1, whatever ``MASTER_ADDR``/``MASTER_PORT`` or ``init_method`` say
  (``"nccl"`` becomes ``"gloo"`` when CUDA stands in). It stops the rank with
  the evidence, before it would wait forever or fail in torch, for a rank
  outside the world, a world larger than the processes started, two
  processes claiming one rank, or a second call while the group is up;
* :func:`recorded_collective` makes each collective the learner's file calls on the
  whole group wait until every rank has reached the same one, and stop when a
  rank has ended without it, called a different one, or sits in a DDP step
  that waits for this rank; after ``destroy_process_group`` it stops at once;
* :func:`recorded_destroy` records where the group was destroyed and
  tells the other ranks, through the store, that this one is done;
* a store the script hosts itself listens on the loopback address only
  (:func:`.probe_claims.loopback_store`).
"""

from __future__ import annotations

import contextlib
import datetime
import inspect
import json
import os
import sys
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from .probe_buffers import quiet_apart
from .probe_claims import (
    check_claim,
    claimed_place,
    claimed_twice,
    meeting_place,
    meeting_twice,
    meets_unset,
)
from .probe_state import (
    blocking,
    called_from,
    caller_line,
    group_key,
    is_learner,
    learner_line,
    mark_done,
    note_call_line,
    originals,
    owned,
    process_state,
    save_record,
    stop_at_stage,
)
from .record import WAITED_IN_STEP

#: Seconds a rank may stay in one DDP step while another waits in a collective of
#: the learner's before the two count as stuck on different collectives.
STUCK_S = 2.0


def joining_key(index: int) -> str:
    """The store key where process ``index`` says which group it waits to join, then "joined"."""
    return f"doctor/joining/{index}"


def recorded_store() -> dist.TCPStore:
    store = process_state.get("store")
    if store is None:
        settings = process_state["settings"]
        store = dist.TCPStore(
            "127.0.0.1",
            settings.port,
            is_master=False,
            timeout=datetime.timedelta(seconds=settings.wait_s),
        )
        process_state["store"] = store
    return store


def backend_used(asked: object) -> str:
    """The backend the group uses: what was asked, with NCCL as gloo when CUDA stands in."""
    stand_in = process_state["settings"].stand_in
    if asked is None:
        return "gloo" if stand_in or not torch.cuda.is_available() else "nccl"
    text = str(asked)
    if stand_in and "nccl" in text.lower():
        return "gloo"
    return text


def recorded_init(*args, **kwargs):
    """``init_process_group`` under the probe: record and check the claim, then join the group."""
    record = process_state["record"]
    if dist.is_initialized() and record.init:
        called_again(record.init["line"])
    bound = inspect.signature(originals["init_process_group"]).bind_partial(*args, **kwargs)
    given = bound.arguments
    rank, world_size = claimed_place(record, given.get("rank", -1), given.get("world_size", -1))
    asked = given.get("backend")
    used = backend_used(asked)
    record.claimed_rank, record.claimed_world_size = rank, world_size
    record.init = {
        "line": learner_line(),
        "asked": str(asked),
        "backend": used,
        "address": os.environ.get("MASTER_ADDR"),
    }
    process_state["init_frames"] = learner_frames(sys._getframe(1))
    process_state.pop("released_at", None)  # a group made anew is not the one released
    process_state.pop("then_said", None)
    timeout = given.get("timeout")
    if isinstance(timeout, datetime.timedelta):  # the group's own, which the doctor's waits hide
        process_state["group_timeout"] = (timeout.total_seconds(), record.init["line"])
    save_record()
    check_claim(rank, world_size)
    meets_unset(given)
    store = recorded_store()
    launch = str(process_state.get("launch", 0))
    where = record.init["meets"] = meeting_place(given.get("init_method"))
    process_state["holds"] = f"doctor/holds/{where}/{rank}"
    holder = store.compare_set(process_state["holds"], "", launch).decode()
    if holder != launch:  # another of the script's starts meets there with this rank now
        stop_at_stage("process_group", meeting_twice(where))
    if store.add(f"doctor/rank/{launch}/{rank}", 1) > 1:
        claimed_twice(rank, from_env=given.get("rank", -1) in (-1, None))
    join_group(store, used, rank, world_size)


def join_group(store: dist.TCPStore, backend: str, rank: int, world_size: int) -> None:
    """Join the group at the doctor's store, telling the store while this process waits."""
    record = process_state["record"]
    timeout = datetime.timedelta(seconds=process_state["settings"].wait_s)
    # what a script that joins each process it starts watches for (see .start_follow)
    joining = joining_key(record.index)
    store.set(joining, f"{world_size}:{rank}:{record.init['line'] or ''}")
    # each of the script's starts meets apart: a later group must not find an earlier one's keys
    apart = dist.PrefixStore(f"group/{process_state.get('launch', 0)}", store)
    with owned("process_group"), blocking("init_process_group", record.init["line"]):
        originals["init_process_group"](
            backend, store=apart, rank=rank, world_size=world_size, timeout=timeout
        )
    store.set(joining, "joined")
    record.init["joined"] = True
    save_record()


def learner_frames(frame) -> list[tuple[object, int]]:
    """The learner's frames on the stack, innermost first, each with the line it is at."""
    found = []
    while frame is not None:
        if is_learner(frame.f_code.co_filename):
            found.append((frame, frame.f_lineno))
        frame = frame.f_back
    return found


def called_again(first: int | None) -> None:
    """init_process_group again while this process's group is up: stop at the repeated call.

    The call that repeats is the line, in a function still running since the
    first call, that leads to this one (a loop that runs ``setup()`` every
    epoch: that ``setup()`` line).
    """
    before = {id(frame): line for frame, line in process_state.get("init_frames", [])}
    now = learner_frames(sys._getframe(2))
    shared = next(((f, line) for f, line in now if id(f) in before), None)
    line = shared[1] if shared else (now[0][1] if now else None)
    how = (
        f"line {line} runs again (it is in a loop)"
        if shared and before[id(shared[0])] == line
        else f"it was called at line {first}, and again at line {line}"
    )
    stop_at_stage(
        "process_group",
        f"init_process_group is called again while the group it made (line {first}) is "
        f"still up: {how}, and torch refuses a second default group; make the group once "
        "per process, outside what repeats, or release it before it is made again "
        "(destroy_process_group() at the end of the function that made it)",
        line,
    )


def recorded_destroy(*args, **kwargs):
    record = process_state["record"]
    first = record.destroyed is None
    process_state.pop("init_frames", None)  # a later init_process_group is no repeat
    if first:
        record.destroyed = {"line": learner_line(), "caller": caller_line(sys._getframe(1))}
        process_state["released_at"] = record.destroyed["line"]
        mark_done(ended=False)
        save_record()
    with owned("teardown"):
        return originals["destroy_process_group"](*args, **kwargs)


def _called(entry: dict) -> str:
    """", called from line N" where a helper of the learner's made the call, else ""."""
    caller = entry.get("caller")
    return f" (called from line {caller})" if caller is not None else ""


def wait_for_all(name: str, line: int, step: int, rank: int, size: int) -> None:
    """Wait until every rank has reached collective number ``step``; stop if one never will.

    A rank that never will has ended (its ``done`` key), or sits in a DDP step
    (a backward pass averaging gradients) that itself waits for this rank.
    """
    store = recorded_store()
    keys = [group_key("coll", step, r) for r in range(size)]
    began = time.monotonic()
    deadline = began + process_state["settings"].wait_s
    seen: dict[int, tuple[bytes, float]] = {}  # what each missing rank was doing, since when
    while time.monotonic() < deadline:
        missing = [r for r in range(size) if not store.check([keys[r]])]
        if not missing:
            break
        for other in missing:
            if store.check([group_key("done", other)]):
                left_without(store, name, line, rank, other)
            check_stuck(name, line, rank, other, seen)
        with contextlib.suppress(dist.DistStoreError):
            store.wait([keys[missing[0]]], datetime.timedelta(seconds=0.25))
    else:
        outwaited(name, line, rank, time.monotonic() - began)
        return  # the real call waits out the group's own timeout
    outwaited(name, line, rank, time.monotonic() - began)
    ops = {r: store.get(keys[r]).decode().split(":") for r in range(size)}
    if len({op[0] for op in ops.values()}) > 1:
        said = ", ".join(f"rank {r}: {op[0]} at line {op[1]}" for r, op in ops.items())
        quiet_apart(store, size, said)
        stop_at_stage(
            "process_group",
            f"the ranks called different collectives at the same point ({said}): "
            "every rank must call the same collectives in the same order",
            line,
        )
    shapes = {r: op[2] for r, op in ops.items() if len(op) > 2 and op[2]}
    if name in SAME_SHAPE and len(shapes) == size and unequal(shapes):
        said = ", ".join(f"rank {r}: {shape.split('|')[0]}" for r, shape in shapes.items())
        stop_at_stage(
            "process_group",
            f"the ranks passed {name}() (line {line}) tensors of different shapes ({said}): "
            f"{name} needs the same shape on every rank (pad to the largest, or gather the "
            "sizes first)",
            line,
        )


def outwaited(name: str, line: int, rank: int, waited: float) -> None:
    """Stop when this rank waited for the others in a collective longer than the timeout the
    script gave its group: run as written, the collective fails with a timeout there."""
    limit, given_at = process_state.get("group_timeout") or (None, None)
    if limit is None or waited <= limit:
        return
    stop_at_stage(
        "process_group",
        f"rank {rank} waited {waited:.1f} s in {name}() (line {line}) for the other ranks to "
        f"reach it, longer than the {limit:g} s timeout its group was given (line {given_at}): "
        f"run as written, {name}() fails with a timeout there (the doctor's own wait let it "
        "go on). Give the group a timeout well beyond the work one rank does while the "
        "others wait",
        given_at,
    )


#: Seconds a rank that released its group is given to show what it does next: end, or call
#: a collective on the group it released (ample on a busy machine: it is already running).
RELEASED_GRACE_S = 5.0


def left_without(store, name: str, line: int, rank: int, other: int) -> None:
    """Stop: rank ``other`` has left the group without the collective ``rank`` waits in."""
    done = _left(store, other)
    if done.get("released") is not None and not done.get("ended"):
        until = time.monotonic() + RELEASED_GRACE_S
        while not done.get("ended") and time.monotonic() < until:
            time.sleep(0.05)
            done = _left(store, other)
    calls = done.get("calls", 0)
    made = f" (it made {calls} collective call(s) of its own)" if calls else ""
    size = process_state["record"].claimed_world_size or 0
    quiet_apart(store, size, f"rank {rank} waits in {name}() at line {line}; rank {other} ended")
    if done.get("said"):  # it released the group and then called on it: its own fault, said so
        stop_at_stage("teardown", done["said"], done["released"])
    stop_at_stage(
        "process_group",
        f"rank {rank} waits in {name}() (line {line}), but rank {other} ended without "
        f"calling it{made}: every rank must call each collective, in the same order",
        line,
    )


def _left(store, other: int) -> dict:
    """What rank ``other`` told the store as it left its group (:func:`.probe_state.mark_done`)."""
    try:
        return json.loads(store.get(group_key("done", other)).decode())
    except (ValueError, dist.DistStoreError):
        return {}


#: Collectives whose tensor must have the same shape on every rank.
SAME_SHAPE = {"all_reduce", "all_gather", "all_gather_into_tensor", "broadcast", "reduce",
              "reduce_scatter_tensor"}  # fmt: skip


def tensor_shape(arguments: dict) -> str:
    """The shape of the tensor a collective was given, as text ("" when it has none).

    For ``all_gather``, ``|`` and the shapes of the list it gathers into follow.
    """

    def spelled(tensor) -> str:
        return "x".join(map(str, tensor.shape))

    given = arguments.get("tensor", arguments.get("input_tensor"))
    if not isinstance(given, torch.Tensor):
        given = next((v for v in arguments.values() if isinstance(v, torch.Tensor)), None)
    if not isinstance(given, torch.Tensor):
        return ""
    into = arguments.get("tensor_list")
    if isinstance(into, (list, tuple)) and all(isinstance(t, torch.Tensor) for t in into):
        return spelled(given) + "|" + ",".join(spelled(t) for t in into)
    return spelled(given)


def unequal(shapes: dict[int, str]) -> bool:
    """Whether the ranks' tensors do not fit one collective.

    Equal shapes fit. For ``all_gather`` (shapes with ``|``) rank r's tensor
    may differ from the others' (NCCL gathers uneven tensors) as long as
    every rank's list holds a tensor of rank r's shape at place r.

    >>> unequal({0: "4", 1: "4"}), unequal({0: "4", 1: "3"})
    (False, True)
    >>> unequal({0: "4|4,3", 1: "3|4,3"}), unequal({0: "4|4,4", 1: "3|3,3"})
    (False, True)
    """
    mine = {r: shape.split("|")[0] for r, shape in shapes.items()}
    lists = {r: shape.split("|")[1].split(",") for r, shape in shapes.items() if "|" in shape}
    if len(lists) < len(shapes):
        return len(set(mine.values())) > 1
    return any(
        len(into) != len(mine) or any(into[r] != mine[r] for r in mine)
        for into in lists.values()
    )


def check_stuck(name: str, line: int, rank: int, other: int, seen: dict) -> None:
    """Stop when ``other`` has sat in one DDP step all the while this rank waited for it."""
    store = process_state["store"]
    key = group_key("where", other)
    if not store.check([key]):
        return
    where = store.get(key)
    now = time.monotonic()
    if other not in seen or seen[other][0] != where:
        seen[other] = (where, now)
        return
    if now - seen[other][1] < STUCK_S:
        return
    op, at, _ = where.decode().split(":")
    what = WAITED_IN_STEP if op == "backward" else "DDP(...)"
    called = called_from(sys._getframe(1))
    quiet_apart(store, process_state["record"].claimed_world_size or 0,
                f"rank {rank} waits in {name}() at line {line}{called}, rank {other} in "
                f"{what} at line {at}")  # fmt: skip
    stop_at_stage(
        "process_group",
        f"rank {rank} waits in {name}() (line {line}{called}) while rank {other} waits in "
        f"{what} (line {at}), which needs every rank: the ranks are at different "
        "collectives, which never match, so they wait for each other until the group's "
        "timeout (or the backend fails on the mismatch first); every rank must call the "
        "same collectives in the same order",
        line,
    )


#: The first all-reduces of a rank whose operation and sizes are recorded.
SUMS_KEPT = 64


def reduce_name(op: object) -> str:
    """``"SUM"``, ``"AVG"``...: an all-reduce's operation by name (SUM when not given)."""
    if op is None:
        return "SUM"
    return str(getattr(op, "name", op)).rsplit(".", 1)[-1].upper()


def abs_sum(tensor: object) -> float | None:
    """The sum of a floating tensor's absolute values (None for anything else)."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
        return None
    with torch.no_grad():
        return float(tensor.detach().double().abs().sum())


def recorded_collective(name: str) -> Callable:
    real = originals[name]
    signature = inspect.signature(real)

    def checked(*args, **kwargs):
        line = learner_line()
        record = process_state["record"]
        if line is None or record is None:
            return real(*args, **kwargs)
        if not dist.is_initialized():
            if record.destroyed:
                said = (
                    f"{name}() at line {line} runs after destroy_process_group() at line "
                    f"{record.destroyed['line']}{_called(record.destroyed)} released the "
                    "group, so it has no group to run in; destroy the group after the last "
                    "collective"
                )
                process_state["then_said"] = said  # (a partner left waiting says the same)
                stop_at_stage("teardown", said, record.destroyed["line"])  # where the fix goes
            return real(*args, **kwargs)
        group = signature.bind_partial(*args, **kwargs).arguments.get("group")
        if group is not None and group is not dist.group.WORLD:
            return real(*args, **kwargs)  # a subgroup: not every rank takes part
        rank, size = dist.get_rank(), dist.get_world_size()
        step = len(record.collectives)
        given = signature.bind_partial(*args, **kwargs).arguments
        entry = {"op": name, "line": line}
        tensor = given.get("tensor")
        if isinstance(tensor, torch.Tensor) and tensor.grad_fn is not None:
            entry["tracked"] = True  # a tensor autograd records: the loss, say
        record.collectives.append(entry)
        note_call_line(line)
        shape = tensor_shape(given)
        recorded_store().set(group_key("coll", step, rank), f"{name}:{line}:{shape}")
        wait_for_all(name, line, step, rank, size)
        sums = name == "all_reduce" and step < SUMS_KEPT and not given.get("async_op")
        if sums:
            entry.update(reduce=reduce_name(given.get("op")), before=abs_sum(given.get("tensor")))
        with blocking(name, line):
            result = real(*args, **kwargs)
        if sums:
            entry["after"] = abs_sum(given.get("tensor"))
        return result

    return checked
