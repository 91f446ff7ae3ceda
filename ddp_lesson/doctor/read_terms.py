"""The terms the doctor's static read shares with the probe and the judge.

The calls each stage owns (:data:`STAGE_CALLS`), the collectives every
rank must call, the variables torchrun sets, the addresses that listen on
every network interface, and :class:`Finding`: one mistake, as the code or
the run shows it. Nothing here reads code; the reader (:mod:`.read` and
its ``read_*`` modules), :mod:`.probe` and :mod:`.judge` all use these.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Collectives: every rank of the group must call each of them, in the same order.
COLLECTIVES = frozenset(
    {
        "all_reduce",
        "all_gather",
        "all_gather_object",
        "all_gather_into_tensor",
        "all_to_all",
        "all_to_all_single",
        "barrier",
        "broadcast",
        "broadcast_object_list",
        "gather",
        "gather_object",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_tensor",
        "scatter",
        "scatter_object_list",
    }
)

#: The calls that belong to each stage: a line that raises inside one of them
#: is that stage's (the model's forward pass is found separately).
STAGE_CALLS = {
    "spawning": {"spawn", "start_processes"},
    "process_group": {
        "init_process_group",
        "new_group",
        "get_rank",
        "get_world_size",
        "monitored_barrier",
        "TCPStore",
        "init_device_mesh",
        *COLLECTIVES,
    },
    "data_division": {"DataLoader", "DistributedSampler", "set_epoch"},
    "model_wrapping": {
        "DistributedDataParallel",
        "set_device",
        "backward",
        "step",
        "zero_grad",
    },
    "teardown": {"destroy_process_group"},
}

#: Environment variables that torchrun sets for every process it starts.
TORCHRUN_VARIABLES = frozenset({"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"})

#: Addresses that mean "listen on every network interface".
ALL_INTERFACES = frozenset({"0.0.0.0", "::"})


@dataclass
class Finding:
    """One mistake: the stage it belongs to, what shows it, and the line that owns the fix.

    ``needs`` names what a run must have done to show the mistake (e.g.
    ``"epochs"``: more than one epoch), when a short run may not have.
    """

    stage: str
    evidence: str
    line: int | None
    needs: str = ""
